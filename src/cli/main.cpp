// mopt: one binary, subcommands. Each subcommand lives in its own file under src/cli/.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"mopt: make large language models production-grade on the hardware at hand"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mopt 0.1.0");
  mopt::cli::register_commands(app, argc > 1 ? argv[1] : "");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return mopt::cli::exit_code();
}
