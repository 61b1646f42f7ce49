#include "plan/gpu_specs.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace mopt::plan {
namespace {

constexpr double kGiB = 1073741824.0, kGBs = 1e9, kTF = 1e12;

// Dense FLOP/s: NVIDIA's datasheets print the with-sparsity figure (marked *) beside or instead of the dense one,
// which is half of it.
const GpuSpec kSpecs[] = {
    {"H100-SXM", "h100-sxm|h100 sxm|h100 80gb hbm3|h100", 80 * kGiB, 3350 * kGBs, 989.4 * kTF, 1978.9 * kTF,
     "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 80 GB HBM3, 3.35 TB/s, BF16 1,979 / FP8 3,958 TFLOPS with "
     "sparsity)"},
    {"H100-PCIE", "h100-pcie|h100 pcie", 80 * kGiB, 2000 * kGBs, 756 * kTF, 1513 * kTF,
     "NVIDIA H100 datasheet (PCIe: 80 GB HBM2e, 2 TB/s, BF16 1,513 / FP8 3,026 TFLOPS with sparsity)"},
    {"H100-NVL", "h100-nvl|h100 nvl", 94 * kGiB, 3900 * kGBs, 835.5 * kTF, 1670.5 * kTF,
     "NVIDIA H100 datasheet (NVL: 94 GB HBM3, 3.9 TB/s, BF16 1,671 / FP8 3,341 TFLOPS with sparsity)"},
    {"H200", "h200-sxm|h200 sxm|h200", 141 * kGiB, 4800 * kGBs, 989.4 * kTF, 1978.9 * kTF,
     "NVIDIA H200 Tensor Core GPU product page (SXM: 141 GB HBM3e, 4.8 TB/s, BF16 1,979 / FP8 3,958 TFLOPS with "
     "sparsity)"},
    {"H200-NVL", "h200-nvl|h200 nvl", 141 * kGiB, 4800 * kGBs, 835.5 * kTF, 1670.5 * kTF,
     "NVIDIA H200 product page (NVL: 141 GB HBM3e, 4.8 TB/s, BF16 1,671 / FP8 3,341 TFLOPS with sparsity)"},
    {"A100-80GB", "a100-80gb|a100-sxm4-80gb|a100 80gb|a100-80g", 80 * kGiB, 2039 * kGBs, 312 * kTF, 0,
     "NVIDIA A100 Tensor Core GPU datasheet (SXM 80 GB HBM2e: 2,039 GB/s; BF16 312 TFLOPS dense; no FP8)"},
    {"A100-40GB", "a100-40gb|a100-sxm4-40gb|a100 40gb|a100-pcie-40gb|a100", 40 * kGiB, 1555 * kGBs, 312 * kTF, 0,
     "NVIDIA A100 Tensor Core GPU datasheet (40 GB HBM2: 1,555 GB/s; BF16 312 TFLOPS dense; no FP8)"},
    {"L40S", "l40s", 48 * kGiB, 864 * kGBs, 362.05 * kTF, 733 * kTF,
     "NVIDIA L40S datasheet (48 GB GDDR6, 864 GB/s, BF16 362.05 / FP8 733 TFLOPS dense)"},
    {"L4", "l4", 24 * kGiB, 300 * kGBs, 121 * kTF, 242.5 * kTF,
     "NVIDIA L4 datasheet (24 GB GDDR6, 300 GB/s, BF16 242 / FP8 485 TFLOPS with sparsity)"},
    {"A10", "a10", 24 * kGiB, 600 * kGBs, 125 * kTF, 0,
     "NVIDIA A10 datasheet (24 GB GDDR6, 600 GB/s, BF16 125 TFLOPS dense; no FP8)"},
    {"RTX-4090", "rtx-4090|rtx 4090|rtx4090|4090", 24 * kGiB, 1008 * kGBs, 165.2 * kTF, 330.3 * kTF,
     "NVIDIA Ada Lovelace architecture whitepaper, GeForce RTX 4090 (24 GB GDDR6X, 1,008 GB/s; dense BF16 165.2 / "
     "FP8 330.3 TFLOPS with FP32 accumulate)"},
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::span<const GpuSpec> gpu_specs() { return kSpecs; }

const GpuSpec* find_gpu_spec(const std::string& name) {
  const std::string n = lower(name);
  const GpuSpec* best = nullptr;
  size_t best_len = 0;
  for (const GpuSpec& s : kSpecs) {
    if (n == lower(s.name)) return &s;
    std::stringstream ss(s.match);
    for (std::string alias; std::getline(ss, alias, '|');) {
      // A short alias ("l4", "a10") must match a whole word, not a part of "l40s" or "a100".
      const size_t at = n.find(alias);
      if (at == std::string::npos) continue;
      const size_t end = at + alias.size();
      const bool word = (at == 0 || !std::isalnum(static_cast<unsigned char>(n[at - 1]))) &&
                        (end == n.size() || !std::isalnum(static_cast<unsigned char>(n[end])));
      if (word && alias.size() > best_len) {
        best = &s;
        best_len = alias.size();
      }
    }
  }
  return best;
}

std::string gpu_spec_names() {
  std::string s;
  for (const GpuSpec& g : kSpecs) s += (s.empty() ? "" : ", ") + std::string(g.name);
  return s;
}

}  // namespace mopt::plan
