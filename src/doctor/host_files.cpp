#include "doctor/host_files.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mopt::doctor {

std::string host_path(const std::string& abs_path) {
  const char* root = std::getenv("MOPT_DOCTOR_ROOT");
  return root && *root ? std::string(root) + abs_path : abs_path;
}

std::optional<std::string> read_host_file(const std::string& abs_path, size_t max_bytes) {
  std::ifstream f(host_path(abs_path), std::ios::binary);
  if (!f) return std::nullopt;
  std::string s(max_bytes, '\0');
  f.read(s.data(), static_cast<std::streamsize>(max_bytes));
  if (f.bad()) return std::nullopt;
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

std::optional<std::string> read_host_line(const std::string& abs_path) {
  auto s = read_host_file(abs_path, 4096);
  if (!s) return std::nullopt;
  std::string line = s->substr(0, s->find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) line.pop_back();
  return line;
}

std::optional<int64_t> read_host_int(const std::string& abs_path) {
  auto s = read_host_line(abs_path);
  if (!s || s->empty()) return std::nullopt;
  char* end = nullptr;
  const long long v = std::strtoll(s->c_str(), &end, 10);
  if (end == s->c_str()) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<uint64_t> meminfo_value(const std::string& key) {
  auto s = read_host_file("/proc/meminfo");
  if (!s) return std::nullopt;
  std::istringstream in(*s);
  std::string k, unit;
  uint64_t v = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    unit.clear();
    if (!(ls >> k >> v)) continue;
    ls >> unit;
    if (k == key + ":") return unit == "kB" ? v * 1024 : v;
  }
  return std::nullopt;
}

}  // namespace mopt::doctor
