#include "cli/commands.h"

#include <algorithm>
#include <tuple>
#include <vector>

namespace mopt::cli {
namespace {

struct Entry {
  std::string name;
  int order;
  RegisterFn fn;
};
std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}
int g_exit_code = 0;

}  // namespace

Registration::Registration(std::string name, int order, RegisterFn fn) {
  registry().push_back({std::move(name), order, std::move(fn)});
}

void register_commands(CLI::App& app, const std::string& verb) {
  auto& r = registry();
  std::sort(r.begin(), r.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.order, a.name) < std::tie(b.order, b.name); });
  const bool known = std::any_of(r.begin(), r.end(), [&](const Entry& e) { return e.name == verb; });
  for (auto& e : r)
    if (!known || e.name == verb) e.fn(app);
}

int exit_code() { return g_exit_code; }
void set_exit_code(int code) { g_exit_code = code; }

}  // namespace mopt::cli
