// mopt doctor: diagnose the machine (driver, CUDA, GPUs, topology, container, CPU, model); exit 0 ok, 1 warning,
// 2 failure.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "doctor/doctor.h"

namespace mopt::cli {
namespace {

struct DoctorArgs {
  doctor::DoctorOptions opts;
  bool json = false;
};

Registration reg("doctor", 5, [](CLI::App& app) {
  auto args = std::make_shared<DoctorArgs>();
  CLI::App* cmd = app.add_subcommand(
      "doctor",
      "Check the machine: driver, CUDA, GPU health, topology, container limits, CPU (exit 0 ok, 1 warn, 2 fail)");
  cmd->add_option("-m,--model", args->opts.model,
                  "Also check this model: files readable, parse, filesystem read speed");
  cmd->add_flag("--json", args->json, "Print the findings and everything read as JSON");
  cmd->add_flag_callback(
      "--no-read-test", [args] { args->opts.read_test = false; }, "Do not measure the model's filesystem read speed");
  cmd->callback([args]() {
    const doctor::Report r = doctor::run_doctor(args->opts);
    if (args->json)
      std::printf("%s\n", doctor::report_json(r).c_str());
    else
      doctor::print_report_text(r, stdout);
    set_exit_code(r.exit_code());
  });
});

}  // namespace
}  // namespace mopt::cli
