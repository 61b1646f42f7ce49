// The resource-limit gate: under the memory limit (--memory-limit, or the cgroup's), the server's planned
// footprint fits, its measured peak stays below, and a server given too little memory refuses to start.
#include "core/strfmt.h"
#include "gate/gate.h"

namespace mopt::gate {

GateResult resource_gate(const GateOptions& opt, double peak_rss_bytes) {
  GateResult g;
  g.name = "resources";
  g.threshold = "planned footprint and peak RSS under the memory limit; too little memory is refused at start";
  if (opt.memory_limit == 0) {
    g.verdict = Verdict::kSkip;
    g.measured = strfmt("peak RSS %.1f MB", peak_rss_bytes / 1e6);
    g.detail = "no --memory-limit given and no cgroup memory limit found";
    return g;
  }
  // The planned footprint comes from mopt plan (src/plan, branch `doctor`), not on main yet.
  return error_result(g.name, g.threshold,
                      "this build has no mopt plan library (src/plan): the planned footprint cannot be computed");
}

}  // namespace mopt::gate
