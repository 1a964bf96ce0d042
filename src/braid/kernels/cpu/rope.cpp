#include "braid/kernels/cpu/rope.h"

#include <cmath>

#include "braid/core/error.h"

namespace braid::kernels {

std::vector<float> rope_inverse_frequencies(int64_t head_size, double theta, const RopeScaling& s) {
  BRAID_CONFIG_CHECK(head_size > 0 && head_size % 2 == 0, "rotary positions need an even head size, got ",
                     head_size, "; choose n_embd / n_head even");
  BRAID_CONFIG_CHECK(theta > 1.0, "--rope-theta ", theta, " must be > 1 (Llama 3: 500000)");
  BRAID_CONFIG_CHECK(s.factor > 0 && s.low_freq_factor > 0 && s.low_freq_factor < s.high_freq_factor &&
                         s.original_context > 0,
                     "RoPE scaling needs factor > 0 (got ", s.factor, "), 0 < low_freq_factor (", s.low_freq_factor,
                     ") < high_freq_factor (", s.high_freq_factor, ") and original_context > 0 (",
                     s.original_context, "); Llama 3.1 uses 8, 1, 4, 8192");
  // In fp32 operation by operation, as transformers computes them (its
  // _compute_default_rope_parameters and _compute_llama3_parameters), so the
  // frequencies agree to an ulp or two and a model imported from it turns alike.
  const int64_t half = head_size / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float factor = float(s.factor), low = float(s.low_freq_factor), high = float(s.high_freq_factor);
  const float context = float(s.original_context);
  const float low_wavelen = context / low, high_wavelen = context / high;
  for (int64_t i = 0; i < half; ++i) {
    const float f = 1.0f / std::pow(float(theta), float(2 * i) / float(head_size));
    if (s.factor == 1.0) {
      inv[size_t(i)] = f;
      continue;
    }
    const float wavelen = 2.0f * float(3.141592653589793) / f;
    float scaled = f;
    if (wavelen > low_wavelen) {
      scaled = f / factor;
    } else if (!(wavelen < high_wavelen)) {
      const float smooth = (context / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * f / factor + smooth * f;
    }
    inv[size_t(i)] = scaled;
  }
  return inv;
}

void rope_table_fill(RopeTable& tb, const int64_t* pos, int64_t T, const std::vector<float>& inv_freq) {
  tb.T = T, tb.half = int64_t(inv_freq.size());
  tb.cos.resize(size_t(T * tb.half)), tb.sin.resize(size_t(T * tb.half));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < tb.half; ++i) {
      const float angle = float(pos[t]) * inv_freq[size_t(i)];
      tb.cos[size_t(t * tb.half + i)] = float(std::cos(double(angle)));
      tb.sin[size_t(t * tb.half + i)] = float(std::sin(double(angle)));
    }
}

RopeTable rope_table(const int64_t* pos, int64_t T, const std::vector<float>& inv_freq) {
  RopeTable tb;
  rope_table_fill(tb, pos, T, inv_freq);
  return tb;
}

namespace {

// Turns every head of every row by +angle (sign 1, forward) or -angle (sign
// -1, the transpose for backward).
void rotate(float* x, int64_t B, int64_t T, const RopeHeads& h, const RopeTable& tb, float sign) {
  BRAID_CHECK(tb.T == T && 2 * tb.half == h.head_size, "rope: a table of ", tb.T, " x ", tb.half,
              " angles for ", T, " positions of ", h.head_size, "-feature heads");
  const int64_t half = tb.half;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const float* cs = tb.cos.data() + t * half;
      const float* sn = tb.sin.data() + t * half;
      float* row = x + (b * T + t) * h.stride + h.col0;
      for (int64_t hd = 0; hd < h.n_heads; ++hd) {
        float* a = row + hd * h.head_size;
        float* z = a + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = a[i], x1 = z[i], s = sign * sn[i];
          a[i] = x0 * cs[i] - x1 * s;
          z[i] = x1 * cs[i] + x0 * s;
        }
      }
    }
}

}  // namespace

void rope_forward(float* x, int64_t B, int64_t T, const RopeHeads& h, const RopeTable& table) {
  rotate(x, B, T, h, table, 1.0f);
}

void rope_backward(float* dx, int64_t B, int64_t T, const RopeHeads& h, const RopeTable& table) {
  rotate(dx, B, T, h, table, -1.0f);
}

}  // namespace braid::kernels
