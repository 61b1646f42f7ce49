// mopt: one binary, subcommands. Each subcommand lives in its own file under src/cli/.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/vllm_serve_flags.h"

int main(int argc, char** argv) {
  CLI::App app{"mopt: make large language models production-grade on the hardware at hand"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mopt 0.1.0");
  mopt::cli::register_commands(app, argc > 1 ? argv[1] : "");
  try {
    if (argc > 1 && (std::string(argv[1]) == "serve" || std::string(argv[1]) == "run")) {
      // vLLM's -tp / -pp (cli/vllm_serve_flags.h); CLI11 takes the arguments reversed, without the program name.
      auto args = mopt::cli::expand_vllm_short_flags(std::vector<std::string>(argv + 1, argv + argc));
      std::reverse(args.begin(), args.end());
      app.name(argv[0]);  // as parse(argc, argv) would name it, for --help
      app.parse(args);
    } else {
      app.parse(argc, argv);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return mopt::cli::exit_code();
}
