// What `mopt serve` reports about the device it runs on (the web console's model card), read with doctor's
// collectors: the CPU's model, cores and memory; with CUDA, the driver and the GPUs NVML lists.
#pragma once

#include <nlohmann/json.hpp>

#include "backend/runner.h"

namespace mopt::cli {

nlohmann::ordered_json device_facts(DeviceKind device);

}  // namespace mopt::cli
