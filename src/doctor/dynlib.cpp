#include "doctor/dynlib.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>

namespace mopt::doctor {

void* DynLib::find(const char* name) const { return handle ? dlsym(handle, name) : nullptr; }

Result<DynLib> open_library(const char* env_var, const char* default_name, const char* what) {
  const char* env = std::getenv(env_var);
  const std::string name = env && *env ? env : default_name;
  DynLib lib;
  lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib.handle) {
    const char* e = dlerror();
    return error("cannot load %s (%s%s): %s", what, name.c_str(),
                 env && *env ? strfmt(", from $%s", env_var).c_str() : "", e ? e : "dlopen failed");
  }
  lib.path = name;
  link_map* lm = nullptr;
  if (dlinfo(lib.handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) lib.path = lm->l_name;
  char real[PATH_MAX];
  if (realpath(lib.path.c_str(), real)) lib.path = real;
  return lib;
}

std::string version_from_library_name(const std::string& path) {
  const size_t so = path.rfind(".so.");
  if (so == std::string::npos) return "";
  const std::string v = path.substr(so + 4);
  // A driver version has a dot ("550.54.15"); "1" of libnvidia-ml.so.1 is the ABI, not the driver.
  if (v.find('.') == std::string::npos) return "";
  for (char c : v)
    if (!(c == '.' || (c >= '0' && c <= '9'))) return "";
  return v;
}

}  // namespace mopt::doctor
