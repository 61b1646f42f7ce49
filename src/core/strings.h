// ASCII string helpers shared by the modules: case mapping and trimming. Bytes >= 0x80 pass through unchanged, so
// UTF-8 text keeps its multi-byte characters.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mopt {

std::string lower(std::string_view s);  // A-Z -> a-z
std::string upper(std::string_view s);  // a-z -> A-Z
// Without leading and trailing spaces and tabs (HTTP's optional whitespace, Prometheus' blanks).
std::string_view trim_blanks(std::string_view s);
// The non-empty pieces of s between separators: "a,,b," -> {"a", "b"} (option lists such as "1,2,4").
std::vector<std::string> split_nonempty(std::string_view s, char sep);

}  // namespace mopt
