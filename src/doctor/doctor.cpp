#include "doctor/doctor.h"

#include "doctor/check_model.h"
#include "doctor/checks.h"
#include "doctor/cuda_driver_api.h"

namespace mopt::doctor {
namespace {

void append(std::vector<Finding>& out, std::vector<Finding> more) {
  for (Finding& f : more) out.push_back(std::move(f));
}

}  // namespace

Report run_doctor(const DoctorOptions& opts) {
  Report r;
  const GpuSystem gpu = collect_gpu_system();
  const HostFacts host = collect_host_facts();
  const KernelLog klog = read_kernel_log();
  std::vector<Finding> model_findings;
  ModelSummary model;
  if (!opts.model.empty()) model_findings = check_model(opts.model, host, opts.read_test, &model);
  const uint64_t model_bytes = model.tensor_bytes ? model.tensor_bytes : model.weight_file_bytes;

  append(r.findings, check_driver(gpu, opts.build));
  append(r.findings, check_gpu_health(gpu, klog));
  append(r.findings, check_topology(gpu));
  append(r.findings, check_host(gpu, host, model_bytes));
  append(r.findings, check_cpu(host, opts.build, model_bytes));
  append(r.findings, std::move(model_findings));

  r.facts["build"] = {{"cuda_runtime", opts.build.cudart_version ? cuda_version_string(opts.build.cudart_version) : ""},
                      {"cuda_archs", opts.build.cuda_archs},
                      {"cpu_features", opts.build.cpu_features}};
  r.facts["gpu"] = gpu_system_json(gpu);
  r.facts["host"] = host_facts_json(host);
  r.facts["kernel_log"] = {{"readable", klog.readable}, {"source", klog.source}, {"xid_events", klog.xids.size()}};
  if (!opts.model.empty())
    r.facts["model"] = {{"path", opts.model},
                        {"weight_file_bytes", model.weight_file_bytes},
                        {"tensor_bytes", model.tensor_bytes},
                        {"read_bytes_per_s", model.read_bytes_per_s}};
  return r;
}

void print_report_text(const Report& r, std::FILE* out) {
  std::string group;
  for (const Finding& f : r.findings) {
    if (f.group != group) {
      group = f.group;
      std::fprintf(out, "\n%s\n", group.c_str());
    }
    std::fprintf(out, "  [%-4s] %s: %s\n", verdict_name(f.verdict), f.title.c_str(), f.evidence.c_str());
    if (!f.fix.empty() && (f.verdict == Verdict::kWarn || f.verdict == Verdict::kFail))
      std::fprintf(out, "         fix: %s\n", f.fix.c_str());
  }
  int n[4] = {0, 0, 0, 0};
  for (const Finding& f : r.findings) ++n[static_cast<int>(f.verdict)];
  std::fprintf(out, "\n%d ok, %d warning(s), %d failure(s), %d skipped\n", n[0], n[1], n[2], n[3]);
}

std::string report_json(const Report& r) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  int n[4] = {0, 0, 0, 0};
  for (const Finding& f : r.findings) {
    ++n[static_cast<int>(f.verdict)];
    checks.push_back({{"id", f.id},
                      {"group", f.group},
                      {"title", f.title},
                      {"verdict", verdict_name(f.verdict)},
                      {"evidence", f.evidence},
                      {"fix", f.fix}});
  }
  j["checks"] = checks;
  j["summary"] = {{"ok", n[0]}, {"warn", n[1]}, {"fail", n[2]}, {"skip", n[3]}};
  j["exit_code"] = r.exit_code();
  j["facts"] = r.facts;
  return j.dump(2);
}

}  // namespace mopt::doctor
