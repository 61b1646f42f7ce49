// A shared library opened at run time (dlopen) for doctor's NVML and CUDA driver probes.
#pragma once

#include <initializer_list>
#include <string>

#include "core/status.h"

namespace mopt::doctor {

struct DynLib {
  void* handle = nullptr;
  std::string path;  // the file loaded, symlinks resolved (libnvidia-ml.so.550.54.15)

  void* find(const char* name) const;
  // fn = the first of `names` the library exports, else null.
  template <class F>
  void sym(F*& fn, std::initializer_list<const char*> names) const {
    fn = nullptr;
    for (const char* n : names)
      if (void* p = find(n)) {
        fn = reinterpret_cast<F*>(p);
        return;
      }
  }
};

// dlopen()s $env_var when set, else default_name (searched like any library). `what` names it in the error.
// Libraries stay loaded for the life of the process.
Result<DynLib> open_library(const char* env_var, const char* default_name, const char* what);

// The driver version in a library file name: "libnvidia-ml.so.550.54.15" -> "550.54.15" ("" if none).
std::string version_from_library_name(const std::string& path);

}  // namespace mopt::doctor
