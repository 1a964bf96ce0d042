#include "braid/kernels/cpu/adamw.h"

#include <algorithm>
#include <cmath>

#include "braid/core/error.h"

namespace braid::kernels {

namespace {
// The update loop, with the gradient element supplied by `grad(i)` (f32 as is,
// or widened from half precision and multiplied).
// `out(i, p)` receives each updated parameter (a no-op, or the bf16 copy).
template <typename Grad, typename Out>
void adamw_loop(float* params, Grad grad, Out out, float* m, float* v, size_t n, float lr, float beta1,
                float beta2, float eps, float weight_decay, int64_t t) {
  BRAID_CHECK(t >= 1, "adamw_update: step t must be >= 1, got ", t);
  // Bias corrections in double, then rounded once (torch computes them in Python floats).
  const double bc1 = 1.0 - std::pow(double(beta1), double(t));
  const double bc2 = 1.0 - std::pow(double(beta2), double(t));
  const float step_size = float(double(lr) / bc1);
  const float inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - lr * weight_decay;
  const int64_t N = int64_t(n);
#pragma omp parallel
  {
    // Each thread's own copy of the loader: read through the team's shared
    // one, the loop does not vectorise (scalar sqrt and divide per element).
    const Grad gl = grad;
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float g = gl(i);
      const float mi = beta1 * m[i] + (1.0f - beta1) * g;
      const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
      const float p = params[i] * decay - step_size * mi / denom;
      params[i] = p;
      out(i, p);
    }
  }
}
}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t) {
  adamw_loop(params, [grads](int64_t i) { return grads[i]; }, [](int64_t, float) {}, m, v, n, lr, beta1, beta2,
             eps, weight_decay, t);
}

void adamw_update_mixed(float* params, const void* grads, DType gdt, float grad_mult, float* m,
                        float* v, size_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int64_t t, uint16_t* bf16_out) {
  with_f32_loader(grads, gdt, [&](auto load) {
    auto g = [=](int64_t i) { return load(i) * grad_mult; };
    if (bf16_out) {
      adamw_loop(params, g, [bf16_out](int64_t i, float p) { bf16_out[i] = f32_to_bf16(p); }, m, v, n, lr, beta1,
                 beta2, eps, weight_decay, t);
    } else {
      adamw_loop(params, g, [](int64_t, float) {}, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
    }
    return 0;
  });
}

double grad_sumsq(const void* g, DType t, size_t len, float mult) {
  // Fixed blocks, each summed in vector lanes (omp simd), then added in block
  // order: the result depends on neither the thread count nor the schedule. A
  // single serial double chain, as an OpenMP reduction over elements compiles
  // to, reads about 2.8 GB/s per core; the lanes read as fast as one core's
  // read stream goes (about 6 GB/s here).
  static constexpr int64_t kBlock = 16384, kBlocksPerPass = 256;
  const int64_t n = static_cast<int64_t>(len);
  return with_f32_loader(g, t, [n, mult](auto load) {
    double total = 0;
    double part[kBlocksPerPass];
    for (int64_t base = 0; base < n; base += kBlock * kBlocksPerPass) {
      const int64_t nb = std::min(kBlocksPerPass, (n - base + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t lo = base + b * kBlock, hi = std::min(n, lo + kBlock);
        const auto ld = load;  // a private copy: through the shared one the loop stays scalar
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = lo; i < hi; ++i) {
          const double v = static_cast<double>(ld(i) * mult);
          s += v * v;
        }
        part[b] = s;
      }
      for (int64_t b = 0; b < nb; ++b) total += part[b];
    }
    return total;
  });
}

}  // namespace braid::kernels
