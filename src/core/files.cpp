#include "core/files.h"

#include <fstream>

namespace mopt {

Status write_file(const std::string& path, std::string_view data) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return error("cannot write '%s' (does the directory exist and is it writable?)", path.c_str());
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) return error("error writing '%s' (disk full?)", path.c_str());
  return Status::ok();
}

}  // namespace mopt
