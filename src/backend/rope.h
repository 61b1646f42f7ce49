// Rotary position embedding frequencies, shared by the backends (each turns them into its own tables).
#pragma once

#include <algorithm>
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
      case RopeScaling::kYarn: {
        // transformers' _compute_yarn_parameters: dims below `low` keep f, above `high` take f / factor, a linear
        // ramp between; low / high are the dims where a wavelength fits beta_fast / beta_slow times into the
        // original context.
        const double factor = cfg.rope_scale_factor > 0 ? cfg.rope_scale_factor : 1.0;
        auto corr_dim = [&](double rot) {
          return rot_dim * std::log(cfg.rope_original_context / (rot * 2 * std::numbers::pi)) / (2 * std::log(theta));
        };
        double low = corr_dim(cfg.rope_yarn_beta_fast), high = corr_dim(cfg.rope_yarn_beta_slow);
        if (cfg.rope_yarn_truncate) low = std::floor(low), high = std::ceil(high);
        low = std::max(low, 0.0);
        high = std::min(high, rot_dim - 1.0);
        if (low == high) high += 0.001;
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);  // 0: extrapolate (keep f)
        f = f / factor * ramp + f * (1.0 - ramp);
        break;
      }
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
