// Rotary position embedding (Su et al. 2021, "RoFormer", eq. 34) in
// transformers' convention (`rotate_half`): within a head of hs features,
// feature i pairs with feature i + hs/2 and the pair turns by angle
// pos * inv_freq[i]:
//   y[i]        = x[i] cos - x[i + hs/2] sin
//   y[i + hs/2] = x[i + hs/2] cos + x[i] sin,     i in [0, hs/2)
// The angle is the fp32 product pos * inv_freq[i] (as transformers forms it),
// its cosine and sine taken in double and rounded to fp32.
#pragma once
#include <cstdint>
#include <vector>

namespace braid::kernels {

/// Llama 3's frequency scaling (transformers' rope_type "llama3",
/// `_compute_llama3_parameters`): wavelengths 2 pi / inv_freq longer than
/// original_context / low_freq_factor are stretched by `factor`, those shorter
/// than original_context / high_freq_factor kept, and those between
/// interpolated smoothly. factor 1 is no scaling. Llama 3.1: 8, 1, 4, 8192;
/// Llama 3.2 1B and 3B: factor 32.
struct RopeScaling {
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
};

/// inv_freq[i] = theta^(-2i / hs) for i in [0, hs/2), then `scaling`; hs/2
/// floats, computed in fp32 step by step as transformers does. Throws ConfigError unless hs is even and positive, theta > 1 and
/// the scaling's factors are positive with low_freq_factor < high_freq_factor.
std::vector<float> rope_inverse_frequencies(int64_t head_size, double theta, const RopeScaling& scaling = {});

/// Where the heads are in each row of x: `n_heads` heads of `head_size`
/// features from column `col0`, rows `stride` floats apart (q and k of a
/// packed [q | k | v] row are two calls with their own col0 and n_heads).
struct RopeHeads {
  int64_t stride, col0, n_heads, head_size;
};

/// The cosine and sine of every angle pos[t] * inv_freq[i]: (T, hs/2) each,
/// computed once for a micro-batch and read by every layer's q and k.
struct RopeTable {
  int64_t T = 0, half = 0;
  std::vector<float> cos, sin;
};
/// The table of positions pos[0, T) (each token's global position, so a
/// context-parallel chunk or any split of the rows turns exactly as one rank
/// does) and inv_freq (head_size/2 floats from rope_inverse_frequencies).
RopeTable rope_table(const int64_t* pos, int64_t T, const std::vector<float>& inv_freq);
/// The same into `table`, reusing its storage (no allocation once it has held
/// T x head_size / 2 angles).
void rope_table_fill(RopeTable& table, const int64_t* pos, int64_t T, const std::vector<float>& inv_freq);

/// Rotates x in place: x (B, T, stride) floats, row (b, t) by the angles of
/// table row t. Throws braid::Error unless the table has T rows of
/// head_size / 2.
void rope_forward(float* x, int64_t B, int64_t T, const RopeHeads& h, const RopeTable& table);

/// Backward of rope_forward, in place on the gradient dx (same layout): the
/// rotation is orthogonal, so its transpose turns the other way,
///   dx[i] = dy[i] cos + dy[i + hs/2] sin;  dx[i + hs/2] = dy[i + hs/2] cos - dy[i] sin.
void rope_backward(float* dx, int64_t B, int64_t T, const RopeHeads& h, const RopeTable& table);

}  // namespace braid::kernels
