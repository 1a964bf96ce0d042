// The ceilings that model FLOPs utilisation (MFU) is measured against, timed on
// this machine in the same run: the backend's matmul at the run's own MLP shape
// and dtype (what the model's matmuls could reach), and the FMA peak of the
// cores (what the silicon could reach).
#pragma once
#include <cstdint>
#include <string>

#include "braid/core/dtype.h"

namespace braid::kernels {

/// The matmul ceiling of a run: `probes` timings of the forward MLP matmul
/// out (M, N) = x (M, K) @ W^T (W stored (N, K), as c_fc's weight), M = B*T
/// token rows, K = n_embd, N = 4 n_embd / TP, in `dtype` (f32 or bf16 operands,
/// f32 output), each probe at least `probe_seconds` of back-to-back calls on the
/// calling thread's OpenMP team.
struct MatmulCeiling {
  DType dtype = DType::f32;
  int64_t M = 0, N = 0, K = 0;
  int probes = 0;
  double flops = 0;   // median probe, FLOP/s: the MFU denominator
  double spread = 0;  // (max - min) / median over the probes
  /// "f32 (1024x768)(768x3072): 295.1 GFLOP/s (median of 5, spread 3.2%)".
  std::string describe() const;
};

/// Measures a MatmulCeiling. Throws braid::Error on non-positive sizes or
/// probes, or when oneDNN has no matmul for `dtype` here.
MatmulCeiling measure_matmul_ceiling(int64_t M, int64_t K, int64_t N, DType dtype, int probes = 5,
                                     double probe_seconds = 0.05);

/// The ceiling of a run: measure_matmul_ceiling at its forward MLP shape,
/// M = min(tokens, 4096) rows (B*T of a micro-batch, capped: the probe's buffers
/// stay small beside the run's, and the backend's throughput is flat in the row
/// count well before that), K = n_embd, N = 4 n_embd / tp.
MatmulCeiling measure_mlp_ceiling(int64_t tokens, int64_t n_embd, int tp, DType dtype = DType::f32);

/// The dtype the run's matmuls execute in, for a run of compute dtype
/// `compute` whose operands are `stored` in it (model::GPT::half_matmuls):
/// natively where oneDNN has that matmul here, else in f32 on the operands
/// widened exactly (fp16 with oneDNN 2.x on CPUs without AVX512-FP16
/// kernels); unstored, in f32 on operands rounded to it (--matmul-precision fp32).
std::string matmul_path(DType compute, bool stored);

/// FMA peak of the calling thread's OpenMP team in FLOP/s: every thread runs
/// 16 independent chains of fused multiply-adds on the widest vectors the build
/// targets (-march=native: 16 f32 lanes with AVX-512); 2 FLOP per lane per FMA,
/// summed over the threads; the best of 5 windows of `seconds` / 5 (a peak is
/// an upper bound: a busy core only lowers a window).
double measure_fma_peak_flops(double seconds = 0.2);

}  // namespace braid::kernels
