// Layer normalisation (Ba, Kiros, Hinton 2016) over the last dimension:
//   y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps), eps = 1e-5
// with the biased variance, as torch.nn.LayerNorm.
#pragma once
#include <cstdint>

namespace braid::kernels {

constexpr float kLayerNormEps = 1e-5f;

///   out  (N, C)  written
///   mean (N), rstd (N)  saved for backward
///   inp  (N, C); weight (C), bias (C)
/// N is the number of rows (B*T). Statistics are accumulated in double-free
/// two-pass fp32 (mean first, then centred variance) for accuracy.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C);

/// Backward of layernorm_forward. With xhat = (x - mean) * rstd, g = dout * weight:
///   dinp += rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))
///   dweight += sum_rows(dout * xhat); dbias += sum_rows(dout)
///   dinp (N, C)  ACCUMULATED (+=): layer norms read the residual stream, whose
///                gradient collects contributions from several branches.
///   dweight, dbias (C)  accumulated (+=), deterministic (fixed row order)
///   dout (N, C); inp (N, C); weight (C); mean, rstd (N) from forward
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int64_t N, int64_t C);

}  // namespace braid::kernels
