// Reading the host's /proc, /sys and /dev for doctor. Every absolute path goes through host_path(), which
// prefixes $MOPT_DOCTOR_ROOT when set: tests build a fake machine (driver version file, device nodes, cgroup
// limits, kernel log) in a directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mopt::doctor {

std::string host_path(const std::string& abs_path);
// Whole file (at most max_bytes), or nullopt when it cannot be read.
std::optional<std::string> read_host_file(const std::string& abs_path, size_t max_bytes = size_t{1} << 20);
// First line, trimmed.
std::optional<std::string> read_host_line(const std::string& abs_path);
std::optional<int64_t> read_host_int(const std::string& abs_path);
// A /proc/meminfo field in bytes ("MemTotal", "MemAvailable", "HugePages_Total" is a count, not scaled).
std::optional<uint64_t> meminfo_value(const std::string& key);

}  // namespace mopt::doctor
