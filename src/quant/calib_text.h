// The calibration text AWQ uses when `--calib` is not given (calib_text.cpp).
#pragma once

namespace mopt::quant {

extern const char* const kDefaultCalibText;

}  // namespace mopt::quant
