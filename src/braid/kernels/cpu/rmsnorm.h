// Root-mean-square layer normalisation (Zhang & Sennrich 2019, eq. 4; Llama's
// norm) over the last dimension:
//   y = x * rstd * weight,  rstd = 1 / sqrt(mean_c(x^2) + eps)
// no centring and no bias, as transformers' LlamaRMSNorm.
#pragma once
#include <cstdint>

namespace braid::kernels {

/// Llama's default eps (config.json's rms_norm_eps).
constexpr float kRmsNormEps = 1e-5f;

///   out  (N, C)  written (may not alias inp)
///   rstd (N)     saved for backward
///   inp  (N, C); weight (C)
/// N is the number of rows (B*T); the mean of squares is accumulated in fp32.
/// Errors: none (eps > 0 keeps rstd finite for a zero row).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps = kRmsNormEps);

/// Backward of rmsnorm_forward. With xhat = x * rstd and g = dout * weight:
///   dinp += rstd * (g - xhat * mean_c(g * xhat))
///   dweight += sum_rows(dout * xhat)
///   dinp (N, C)  ACCUMULATED (+=): the norm reads the residual stream, whose
///                gradient collects contributions from several branches.
///   dweight (C)  accumulated (+=), deterministic (rows summed in order)
///   dout (N, C); inp (N, C); weight (C); rstd (N) from forward
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C);

}  // namespace braid::kernels
