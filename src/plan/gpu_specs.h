// Built-in table of GPUs `mopt plan --gpu NAME` can plan for without having them: memory, memory bandwidth and
// dense (no sparsity) tensor-core FLOP/s, from the vendors' public datasheets (the source of each row is in
// gpu_specs.cpp). Also used to look up bandwidth and FLOP/s for a GPU that NVML detects, by its name.
#pragma once

#include <span>
#include <string>

namespace mopt::plan {

struct GpuSpec {
  const char* name;     // "H100-SXM"
  const char* match;    // '|'-separated lowercase substrings of NVML names and aliases
  double memory_bytes;  // as sold (GiB: HBM/GDDR capacities are binary); the driver reserves ~0.5-1%
  double bandwidth;     // bytes/s
  double bf16_flops;    // dense tensor-core FLOP/s
  double fp8_flops;     // dense; 0 = no fp8 tensor cores
  const char* source;
};

std::span<const GpuSpec> gpu_specs();
// By table name or alias ("h100", "H100-SXM", "NVIDIA H100 80GB HBM3", "rtx4090"): case-insensitive; the longest
// matching alias wins (so "h100 nvl" is not taken for "h100"). nullptr when none matches.
const GpuSpec* find_gpu_spec(const std::string& name);
// "H100-SXM, H100-PCIE, ..." for error messages and --help.
std::string gpu_spec_names();

}  // namespace mopt::plan
