// check_layers <src-dir>: reads every `#include "..."` line of the C++ / CUDA files under <src-dir> and fails
// (exit 1, one line per offence: file, line, the include, the rule it breaks) on any include against the layer
// order of DESIGN.md:
//
//   core <- tokenizer <- model <- backend <- engine <- {server, loadgen, quant, eval} <- {doctor, plan, tune, gate}
//        <- cli
//
// A module may include itself and any module of a lower rank. Modules of one rank (server and quant, doctor and plan,
// ...) may include each other in one direction only: when both directions occur, every include of the cycle fails.
// The load generator (loadgen) includes core only (it drives any OpenAI-compatible server, not our engine). Inside
// backend, cpu/ and cuda/ are two implementations of runner.h and do not include each other. A file whose module is
// not in the table, or an include naming no known module, fails too: a new module is added to kModules below.
// Exit 0 with a one-line summary when every include is in order; exit 2 on a usage or read error.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Module {
  const char* name;
  int rank;
};

// The layer order: a module may include the modules of lower rank (and itself).
constexpr Module kModules[] = {
    {"core", 0},   {"tokenizer", 1}, {"model", 2},  {"backend", 3}, {"engine", 4}, {"server", 5},
    {"loadgen", 5}, {"quant", 5},    {"eval", 5},   {"doctor", 6},  {"plan", 6},   {"tune", 6},
    {"gate", 6},   {"cli", 7},
};
// Modules that may include only the listed ones (besides themselves), whatever their rank.
struct Restriction {
  const char* module;
  const char* only;
};
constexpr Restriction kRestricted[] = {{"loadgen", "core"}};
// Sub-folders of one module that are alternatives and must not include each other.
constexpr const char* kSiblingBackends[] = {"backend/cpu", "backend/cuda"};

const Module* find_module(const std::string& name) {
  for (const Module& m : kModules)
    if (name == m.name) return &m;
  return nullptr;
}

std::string order_text() {
  return "core <- tokenizer <- model <- backend <- engine <- {server, loadgen, quant, eval} <- "
         "{doctor, plan, tune, gate} <- cli";
}

// "backend/cpu/x.h" -> "backend/cpu" when that is one of kSiblingBackends, else "".
std::string sibling_of(const std::string& path) {
  for (const char* s : kSiblingBackends) {
    const std::string p = std::string(s) + "/";
    if (path.compare(0, p.size(), p) == 0) return s;
  }
  return "";
}

bool is_source(const fs::path& p) {
  static const char* const kExt[] = {".h", ".hpp", ".c", ".cc", ".cpp", ".cu", ".cuh", ".inc"};
  const std::string e = p.extension().string();
  return std::any_of(std::begin(kExt), std::end(kExt), [&](const char* x) { return e == x; });
}

struct Include {
  std::string shown;  // "src/model/hf.cpp"
  int line = 0;
  std::string from, to, path;  // modules of the file and of the include; the include as written
};

// Why `file_rel` (path below src/, e.g. "model/hf.cpp") may not include `inc`; "" when it may. Includes between
// modules of one rank are allowed here and checked for cycles afterwards (*same_rank set).
std::string violation(const std::string& file_rel, const std::string& inc, bool* same_rank) {
  *same_rank = false;
  const std::string from = file_rel.substr(0, file_rel.find('/'));
  const size_t slash = inc.find('/');
  if (slash == std::string::npos) return "";  // "x.h": a file beside this one, same module
  const std::string to = inc.substr(0, slash);
  if (to == from) {
    const std::string a = sibling_of(file_rel), b = sibling_of(inc);
    if (!a.empty() && !b.empty() && a != b)
      return a + " and " + b + " are two implementations of backend/runner.h and may not include each other "
             "(move what both need to backend/ or a lower module)";
    return "";
  }
  const Module* mf = find_module(from);
  const Module* mt = find_module(to);
  if (!mt) return "\"" + to + "\" is not a module of the layer order (" + order_text() + ")";
  for (const Restriction& r : kRestricted)
    if (from == r.module && to != r.only)
      return from + " may include only " + r.only + " (and itself), not " + to;
  if (mt->rank < mf->rank) return "";
  if (mt->rank == mf->rank) {
    *same_rank = true;
    return "";
  }
  return from + " may not include " + to + ", which is above it in the layer order (" + order_text() + ")";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: check_layers <src-dir>\n");
    return 2;
  }
  const fs::path root(argv[1]);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    std::fprintf(stderr, "check_layers: %s is not a directory\n", argv[1]);
    return 2;
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && is_source(it->path())) files.push_back(it->path());
  if (ec) {
    std::fprintf(stderr, "check_layers: cannot list %s: %s\n", argv[1], ec.message().c_str());
    return 2;
  }
  std::sort(files.begin(), files.end());

  const std::regex include_re(R"(^\s*#\s*include\s*"([^"]+)\")");
  const std::string prefix = root.filename().string().empty() ? "src" : root.filename().string();
  int n_includes = 0, n_bad = 0;
  std::vector<Include> same_rank;  // includes between two modules of one rank
  std::set<std::pair<std::string, std::string>> same_rank_edges;
  for (const fs::path& f : files) {
    const std::string rel = fs::relative(f, root).generic_string();
    const std::string shown = prefix + "/" + rel;
    if (rel.find('/') == std::string::npos || !find_module(rel.substr(0, rel.find('/')))) {
      std::printf("%s: the file lies in no module of the layer order (%s); put it in one or add its module to "
                  "kModules in tests/layering/check_layers.cpp\n", shown.c_str(), order_text().c_str());
      ++n_bad;
      continue;
    }
    std::ifstream in(f);
    if (!in) {
      std::fprintf(stderr, "check_layers: cannot read %s\n", shown.c_str());
      return 2;
    }
    std::string line;
    std::smatch m;
    for (int ln = 1; std::getline(in, line); ++ln) {
      if (!std::regex_search(line, m, include_re)) continue;
      ++n_includes;
      const std::string inc = m[1].str();
      bool is_same_rank = false;
      const std::string why = violation(rel, inc, &is_same_rank);
      if (is_same_rank) {
        Include i{shown, ln, rel.substr(0, rel.find('/')), inc.substr(0, inc.find('/')), inc};
        same_rank_edges.emplace(i.from, i.to);
        same_rank.push_back(std::move(i));
      }
      if (why.empty()) continue;
      std::printf("%s:%d: #include \"%s\": %s\n", shown.c_str(), ln, inc.c_str(), why.c_str());
      ++n_bad;
    }
  }
  // An include a -> b between modules of one rank closes a cycle when b already reaches a.
  auto reaches = [&](const std::string& start, const std::string& goal) {
    std::vector<std::string> todo{start};
    std::set<std::string> seen{start};
    while (!todo.empty()) {
      const std::string cur = todo.back();
      todo.pop_back();
      if (cur == goal) return true;
      for (const auto& [a, b] : same_rank_edges)
        if (a == cur && seen.insert(b).second) todo.push_back(b);
    }
    return false;
  };
  for (const Include& i : same_rank) {
    if (!reaches(i.to, i.from)) continue;
    std::printf("%s:%d: #include \"%s\": %s and %s are modules of the same rank that include each other (a cycle); "
                "keep one direction, or move what both need to a lower module\n",
                i.shown.c_str(), i.line, i.path.c_str(), i.from.c_str(), i.to.c_str());
    ++n_bad;
  }
  if (n_bad) {
    std::printf("check_layers: %d include(s) against the layer order in %s\n", n_bad, argv[1]);
    return 1;
  }
  std::printf("check_layers: %d includes in %zu files follow the layer order\n", n_includes, files.size());
  return 0;
}
