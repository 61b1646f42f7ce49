// Subcommand registry. Each src/cli/cmd_<verb>.cpp registers itself:
//   static mopt::cli::Registration reg("run", 20, [](CLI::App& app) { auto* sub = app.add_subcommand(...); ... });
// (src/cli is an OBJECT library: every file is linked into the binary, so static registration is safe).
// The callback of a subcommand sets the process exit code with set_exit_code().
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace mopt::cli {

using RegisterFn = std::function<void(CLI::App&)>;

struct Registration {
  // `order` sorts subcommands in --help.
  Registration(std::string name, int order, RegisterFn fn);
};

// Adds every verb to `app`, or only `verb` when one by that name is registered: a process runs one verb, so it
// need not build the other verbs' options (about a millisecond of the start of `mopt run`).
void register_commands(CLI::App& app, const std::string& verb = "");
int exit_code();
void set_exit_code(int code);

}  // namespace mopt::cli
