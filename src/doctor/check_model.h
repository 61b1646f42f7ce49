// The Model group of doctor (-m MODEL).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "doctor/finding.h"
#include "doctor/host_facts.h"

namespace mopt::doctor {

struct ModelSummary {
  uint64_t weight_file_bytes = 0;  // bytes of the weight files
  uint64_t tensor_bytes = 0;       // bytes of the tensors mopt reads from them
  double read_bytes_per_s = 0;     // measured; 0 = not measured
};

// model.files, model.parse, model.read_speed. measure_speed: read up to 256 MiB of the largest weight file after
// dropping it from the page cache.
std::vector<Finding> check_model(const std::string& path, const HostFacts& h, bool measure_speed,
                                 ModelSummary* summary);

}  // namespace mopt::doctor
