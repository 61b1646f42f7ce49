// Whole-process times of short mopt commands against llama2.c's run.c on the same model, measured in one run and
// interleaved (command A, B, C, A, B, C, ...) so that a busy machine slows them alike:
//   /bin/true                                                   (the process floor of this machine)
//   mopt --help
//   mopt run -m stories260K.gguf -n 256 --temp 0 --device cpu
//   run.c stories260K.bin -z tok512.bin -t 0 -n 257             (257 steps = BOS + the same 256 tokens)
// For each: wall time (median, min) from spawn to exit, and the CPU time the process used (user + system, median).
// run.c is not part of mopt: build it out of tree and pass the binary, e.g.
//   git clone https://github.com/karpathy/llama2.c /tmp/llama2.c && cc -O3 -o /tmp/runc /tmp/llama2.c/run.c -lm
// Usage: bench_whole_process [--mopt build/mopt] [--runc /tmp/runc] [--models ../shared/models] [--runs 40]
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct Command {
  std::string label;
  std::vector<std::string> argv;
  std::vector<double> wall_ms = {}, cpu_ms = {};
  std::string first_output = {};  // stdout of the first run
};

// Runs argv once with stdout to `out_path` (or /dev/null), stderr to /dev/null. Returns false on failure.
bool run_once(Command& c, const char* out_path, double& wall_ms, double& cpu_ms) {
  std::vector<char*> args;
  for (std::string& a : c.argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int e = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (e != 0) {
    std::fprintf(stderr, "cannot start %s: %s\n", args[0], std::strerror(e));
    return false;
  }
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) != pid) return false;
  wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s exited with status %d\n", c.label.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return false;
  }
  return true;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string mopt = "build/mopt", runc, models = "../shared/models";
  int runs = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mopt"))
      mopt = argv[i + 1];
    else if (!std::strcmp(argv[i], "--runc"))
      runc = argv[i + 1];
    else if (!std::strcmp(argv[i], "--models"))
      models = argv[i + 1];
    else if (!std::strcmp(argv[i], "--runs"))
      runs = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--mopt PATH] [--runc PATH] [--models DIR] [--runs N]\n", argv[0]);
      return 2;
    }
  }
  if (runs < 1) {
    std::fprintf(stderr, "--runs must be >= 1\n");
    return 2;
  }
  std::vector<Command> cmds;
  cmds.push_back({"/bin/true (process floor)", {"/bin/true"}});
  cmds.push_back({"mopt --help", {mopt, "--help"}});
  cmds.push_back({"mopt run -n 256 (stories260K.gguf)",
                  {mopt, "run", "-m", models + "/stories260K.gguf", "-n", "256", "--temp", "0", "--device", "cpu"}});
  if (!runc.empty())
    cmds.push_back({"llama2.c run.c -n 257 (stories260K.bin)",
                    {runc, models + "/stories260K.bin", "-z", models + "/tok512.bin", "-t", "0", "-n", "257"}});
  char tmpl[] = "/tmp/bench_whole_process_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return 1;
  close(fd);
  // Warm-up (page cache, first-run effects), keeping each command's output.
  for (Command& c : cmds) {
    double w, u;
    if (!run_once(c, tmpl, w, u)) return 1;
    c.first_output = slurp(tmpl);
  }
  for (int r = 0; r < runs; ++r)
    for (Command& c : cmds) {
      double w = 0, u = 0;
      if (!run_once(c, "/dev/null", w, u)) return 1;
      c.wall_ms.push_back(w);
      c.cpu_ms.push_back(u);
    }
  unlink(tmpl);
  std::printf("%d interleaved runs of each, after one warm-up run\n", runs);
  std::printf("%-42s %12s %12s %14s\n", "command", "wall median", "wall min", "CPU (u+s) med");
  for (const Command& c : cmds)
    std::printf("%-42s %9.2f ms %9.2f ms %11.2f ms\n", c.label.c_str(), median(c.wall_ms),
                *std::min_element(c.wall_ms.begin(), c.wall_ms.end()), median(c.cpu_ms));
  if (cmds.size() == 4) {
    const Command &m = cmds[2], &rc = cmds[3];
    std::printf(
        "mopt run / run.c: wall median %.2fx, wall min %.2fx, CPU %.2fx\n", median(m.wall_ms) / median(rc.wall_ms),
        *std::min_element(m.wall_ms.begin(), m.wall_ms.end()) / *std::min_element(rc.wall_ms.begin(), rc.wall_ms.end()),
        median(m.cpu_ms) / median(rc.cpu_ms));
    // Both are greedy on the same weights: the text must be the same (run.c's first 300 bytes against mopt's).
    const size_t n = std::min<size_t>(300, std::min(m.first_output.size(), rc.first_output.size()));
    std::printf("same text as run.c (first %zu bytes): %s\n", n,
                n > 100 && m.first_output.compare(0, n, rc.first_output, 0, n) == 0 ? "yes" : "NO");
  }
  return 0;
}
