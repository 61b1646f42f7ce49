// Rotary position embedding frequencies, shared by the backends (each turns them into its own tables).
#pragma once

#include <cmath>
#include <numbers>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace mopt {

// inv_freq [rot_dim / 2]: theta^(-2i / rot_dim), rot_dim = rope_dim (or head_dim), with the config's linear or
// Llama 3.1 frequency scaling applied. Inline so that a backend built as a shared object carries its own copy.
inline std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const int rot_dim = cfg.rope_dim > 0 ? cfg.rope_dim : cfg.head_dim;
  MOPT_CHECK(rot_dim > 0 && rot_dim % 2 == 0, "rope_inv_freq: rotary dims %d must be positive and even", rot_dim);
  std::vector<float> inv(static_cast<size_t>(rot_dim / 2));
  const double theta = cfg.rope_theta > 0 ? cfg.rope_theta : 10000.0;
  for (int i = 0; i < rot_dim / 2; ++i) {
    double f = std::pow(theta, -2.0 * i / rot_dim);
    switch (cfg.rope_scaling) {
      case RopeScaling::kNone: break;
      case RopeScaling::kLinear:
        if (cfg.rope_scale_factor > 0) f /= cfg.rope_scale_factor;
        break;
      case RopeScaling::kLlama3: {
        // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth ramp in between.
        const double factor = cfg.rope_scale_factor > 0 ? cfg.rope_scale_factor : 1.0;
        const double orig = cfg.rope_original_context;
        const double low_wavelen = orig / cfg.rope_low_freq_factor;
        const double high_wavelen = orig / cfg.rope_high_freq_factor;
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_wavelen) {
          // unchanged
        } else if (wavelen > low_wavelen) {
          f /= factor;
        } else {
          const double smooth = (orig / wavelen - cfg.rope_low_freq_factor) /
                                (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor);
          f = (1.0 - smooth) * f / factor + smooth * f;
        }
        break;
      }
    }
    inv[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return inv;
}

}  // namespace mopt
