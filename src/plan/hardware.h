// The device a plan is for: a GPU from the built-in table, a GPU NVML detects here, or this machine's CPU (RAM
// available now, read bandwidth and fp32 FLOP/s measured in a fraction of a second).
#pragma once

#include <string>

#include "core/status.h"
#include "plan/plan.h"

namespace mopt::plan {

Result<Hardware> gpu_from_table(const std::string& name);
// GPU `index` as NVML sees it (memory total and in use by other processes); bandwidth and FLOP/s from the table
// when its name is there. An error when there is no such GPU.
Result<Hardware> detected_gpu(int index);
// measure = false: bandwidth and FLOP/s stay unknown (0).
Hardware cpu_host(bool measure);

}  // namespace mopt::plan
