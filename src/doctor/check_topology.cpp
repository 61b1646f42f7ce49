// Topology: how the GPUs connect (NVLink, PCIe switch / host bridge, NUMA node) and which tensor-parallel groups
// that suggests: tensor parallelism all-reduces every layer, so a group should be joined by NVLink, or at least
// share a NUMA node.
#include "doctor/checks.h"
#include "doctor/nvml_api.h"

namespace mopt::doctor {
namespace {

constexpr const char* kGroup = "Topology";  // this file's findings' group, as printed

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::string s;
  for (const auto& grp : groups) {
    std::string members;
    for (int m : grp) join_to(members, std::to_string(m), ",");
    join_to(s, "[" + members + "]", " ");
  }
  return s;
}

const char* level_name(int lvl) {
  switch (lvl) {
    case kNvmlTopologyInternal:
      return "same board";
    case kNvmlTopologySingle:
      return "one PCIe switch";
    case kNvmlTopologyMultiple:
      return "PCIe switches";
    case kNvmlTopologyHostbridge:
      return "host bridge";
    case kNvmlTopologyNode:
      return "same NUMA node";
    case kNvmlTopologySystem:
      return "across CPU sockets";
    default:
      return "unknown";
  }
}

}  // namespace

std::vector<std::vector<int>> tensor_parallel_groups(const std::vector<std::vector<bool>>& linked) {
  const int n = static_cast<int>(linked.size());
  int k = 1;
  while (k * 2 <= n) k *= 2;
  for (; k >= 2; k /= 2) {
    if (n % k != 0) continue;
    std::vector<bool> used(static_cast<size_t>(n), false);
    std::vector<std::vector<int>> groups;
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      if (used[static_cast<size_t>(i)]) continue;
      std::vector<int> grp{i};
      used[static_cast<size_t>(i)] = true;
      for (int j = i + 1; j < n && static_cast<int>(grp.size()) < k; ++j) {
        if (used[static_cast<size_t>(j)]) continue;
        bool all = true;
        for (int m : grp) all = all && linked[static_cast<size_t>(m)][static_cast<size_t>(j)];
        if (all) {
          grp.push_back(j);
          used[static_cast<size_t>(j)] = true;
        }
      }
      ok = static_cast<int>(grp.size()) == k;
      groups.push_back(grp);
    }
    if (ok) return groups;
  }
  std::vector<std::vector<int>> singles;
  for (int i = 0; i < n; ++i) singles.push_back({i});
  return singles;
}

std::vector<Finding> check_topology(const GpuSystem& s) {
  std::vector<Finding> out;
  const size_t n = s.gpus.size();
  const char* t = "GPU interconnect";
  if (n < 2) {
    add(out, "topology.gpus", kGroup, t, Verdict::kSkip, n == 1 ? "one GPU: no tensor parallelism" : "no GPU");
    return out;
  }
  // Pairwise description: NVLink, else the closest common PCIe ancestor; plus NUMA nodes.
  std::string ev;
  std::vector<std::vector<bool>> near(n, std::vector<bool>(n, false));
  bool all_nvlink = true, mixed = false;
  for (size_t i = 0; i < n; ++i) {
    mixed |= s.gpus[i].name != s.gpus[0].name || s.gpus[i].mem_total != s.gpus[0].mem_total;
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const bool nv = s.topology.nvlink.size() == n && s.topology.nvlink[i][j];
      const int lvl = s.topology.level.size() == n ? s.topology.level[i][j] : -1;
      const bool same_numa = s.gpus[i].numa_node && s.gpus[j].numa_node && *s.gpus[i].numa_node == *s.gpus[j].numa_node;
      near[i][j] = nv || (lvl >= 0 && lvl <= kNvmlTopologyNode) || same_numa;
      all_nvlink &= nv;
      if (j > i) ev += strfmt("%s%zu-%zu %s", ev.empty() ? "" : ", ", i, j, nv ? "NVLink" : level_name(lvl));
    }
  }
  for (size_t i = 0; i < n; ++i)
    if (s.gpus[i].numa_node) ev += strfmt("%s GPU %zu on NUMA node %d", i ? "," : ";", i, *s.gpus[i].numa_node);
  std::vector<std::vector<bool>> nvlinked(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) nvlinked[i][j] = s.topology.nvlink.size() == n && s.topology.nvlink[i][j];
  const auto nv_groups = tensor_parallel_groups(nvlinked);
  const auto near_groups = tensor_parallel_groups(near);
  if (all_nvlink) {
    ev += strfmt("; every pair is joined by NVLink: tensor parallelism can span all %zu GPUs", n);
  } else if (nv_groups[0].size() > 1) {
    ev += strfmt("; NVLink groups of %zu: %s", nv_groups[0].size(), groups_text(nv_groups).c_str());
  } else {
    ev += strfmt("; no NVLink; groups on one NUMA node / PCIe root: %s", groups_text(near_groups).c_str());
  }
  if (mixed) {
    add(out, "topology.gpus", kGroup, t, Verdict::kWarn, ev + "; the GPUs are not all the same model/memory",
        "Tensor parallelism runs at the pace of the slowest GPU and the smallest memory: group identical GPUs.");
  } else if (all_nvlink) {
    add(out, "topology.gpus", kGroup, t, Verdict::kOk, ev);
  } else {
    const auto& g = nv_groups[0].size() > 1 ? nv_groups : near_groups;
    add(out, "topology.gpus", kGroup, t, Verdict::kWarn, ev,
        strfmt("Tensor parallelism across GPUs without NVLink all-reduces over PCIe (or across sockets): keep each "
               "tensor-parallel group within %s (tensor-parallel size %zu; mopt plan --tensor-parallel-size sizes it) "
               "and run one replica per group.",
               groups_text(g).c_str(), g[0].size()));
  }
  return out;
}

}  // namespace mopt::doctor
