// Writing a whole file: reports, evidence, generated configs.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace mopt {

// Creates or replaces `path` with `data`; the error names the path and asks whether its directory exists.
Status write_file(const std::string& path, std::string_view data);

}  // namespace mopt
