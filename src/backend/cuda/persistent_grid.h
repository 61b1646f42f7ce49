// How many CTAs per SM a persistent grid may hold (resident_ctas in func_attr.h applies it). Its own header so that
// a benchmark can set it without touching the kernels' includes.
#pragma once

namespace mopt::cuda {

// At most `cap` CTAs per SM in resident_ctas' figure (0, the default: no cap), process-wide. A persistent grid of
// fewer CTAs than the SMs hold leaves room on every SM for the next kernel's CTAs, which can then start their
// weight stream (PDL: loads before griddepcontrol.wait) while this grid still runs. Set before the grids are
// launched or captured (the benchmarks' --pers-per-sm).
void set_persistent_ctas_per_sm(int cap);
int persistent_ctas_per_sm();

}  // namespace mopt::cuda
