#include "core/malloc_arenas.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#include <cstdio>
#endif

#include "core/strfmt.h"

namespace mopt {

std::string bound_malloc_arenas(int arenas) {
#if defined(__GLIBC__)
  if (const char* env = std::getenv("MALLOC_ARENA_MAX"); env && *env)
    return strfmt("malloc arenas: MALLOC_ARENA_MAX=%s (from the environment)", env);
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc.arena_max"))
    return "malloc arenas: glibc.malloc.arena_max (from GLIBC_TUNABLES)";
  if (arenas < 1) return "malloc arenas: glibc's default";
  if (mallopt(M_ARENA_MAX, arenas) != 1) return strfmt("malloc arenas: glibc refused M_ARENA_MAX=%d", arenas);
  return strfmt("malloc arenas: %d (MALLOC_ARENA_MAX overrides)", arenas);
#else
  (void)arenas;
  return "malloc arenas: not glibc, left as they are";
#endif
}

int malloc_arenas_in_use() {
#if defined(__GLIBC__)
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return -1;
  const int rc = malloc_info(0, f);
  std::fclose(f);
  int n = 0;
  for (const char* p = text; rc == 0 && p && (p = std::strstr(p, "<heap nr=")); ++p) ++n;  // one element an arena
  std::free(text);
  return rc == 0 ? n : -1;
#else
  return -1;
#endif
}

}  // namespace mopt
