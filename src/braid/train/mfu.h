// Model FLOPs utilisation: achieved model FLOP/s over the fp32 matmul
// throughput of the backend, measured on this machine in the same run.
#pragma once

namespace braid::train {

/// Times the matmul backend (fp32, shapes of a GPT-2 small MLP: 256x768 @ 768x3072)
/// for about `seconds` on the calling thread's OpenMP team; returns FLOP/s.
double measure_matmul_peak_flops(double seconds);

}  // namespace braid::train
