#include "braid/kernels/cpu/matmul.h"


#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "braid/core/error.h"
#include "braid/kernels/cpu/row_sum.h"

namespace braid::kernels {
namespace {

struct GemmKey {
  int64_t M, N, K, batch;
  uint32_t alpha_bits, beta_bits;
  bool ta, tb, has_bias;
  bool operator==(const GemmKey& o) const {
    return M == o.M && N == o.N && K == o.K && batch == o.batch && alpha_bits == o.alpha_bits &&
           beta_bits == o.beta_bits && ta == o.ta && tb == o.tb && has_bias == o.has_bias;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.M)); mix(uint64_t(k.N)); mix(uint64_t(k.K)); mix(uint64_t(k.batch));
    mix(k.alpha_bits); mix(k.beta_bits);
    mix(uint64_t(k.ta) | uint64_t(k.tb) << 1 | uint64_t(k.has_bias) << 2);
    return size_t(h);
  }
};

// A ready-to-run primitive with its memory objects and argument map, so a call
// only swaps data handles (no allocation per call).
struct GemmEntry {
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias;
  std::unordered_map<int, dnnl::memory> args;
};

struct GemmContext {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::unordered_map<GemmKey, GemmEntry, GemmKeyHash> cache;
};

GemmContext& context() {
  thread_local GemmContext ctx;
  return ctx;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Row-major (batch, rows, cols) descriptor; transposed storage = swapped strides.
dnnl::memory::desc make_md(int64_t batch, int64_t rows, int64_t cols, bool trans) {
  using dt = dnnl::memory::data_type;
  if (trans) return dnnl::memory::desc({batch, rows, cols}, dt::f32, {rows * cols, 1, rows});
  return dnnl::memory::desc({batch, rows, cols}, dt::f32, {rows * cols, cols, 1});
}

GemmEntry make_entry(GemmContext& ctx, const GemmKey& k, float alpha, float beta) {
  auto a_md = make_md(k.batch, k.M, k.K, k.ta);
  auto b_md = make_md(k.batch, k.K, k.N, k.tb);
  auto c_md = make_md(k.batch, k.M, k.N, false);
  dnnl::memory::desc bias_md;
  if (k.has_bias)
    bias_md = dnnl::memory::desc({1, 1, k.N}, dnnl::memory::data_type::f32, {k.N, k.N, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  dnnl::matmul::desc d = k.has_bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md)
                                    : dnnl::matmul::desc(a_md, b_md, c_md);
  dnnl::matmul::primitive_desc pd(d, attr, ctx.eng);
  GemmEntry e;
  e.prim = dnnl::matmul(pd);
  e.a = dnnl::memory(a_md, ctx.eng, DNNL_MEMORY_NONE);
  e.b = dnnl::memory(b_md, ctx.eng, DNNL_MEMORY_NONE);
  e.c = dnnl::memory(c_md, ctx.eng, DNNL_MEMORY_NONE);
  e.args = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
  if (k.has_bias) {
    e.bias = dnnl::memory(bias_md, ctx.eng, DNNL_MEMORY_NONE);
    e.args.emplace(DNNL_ARG_BIAS, e.bias);
  }
  return e;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, const float* B, float beta, float* C, const float* bias,
          int64_t batch) {
  BRAID_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "gemm: negative size M=", M, " N=", N,
              " K=", K, " batch=", batch);
  BRAID_CHECK(bias == nullptr || alpha == 1.0f, "gemm: bias needs alpha == 1, got ", alpha);
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // oneDNN rejects K == 0; the product is the zero matrix.
    const size_t n = size_t(batch * M * N);
    for (size_t i = 0; i < n; ++i) {
      float base = beta == 0.0f ? 0.0f : beta * C[i];
      C[i] = base + (bias ? bias[i % size_t(N)] : 0.0f);
    }
    return;
  }
  GemmContext& ctx = context();
  GemmKey key{M, N, K, batch, bits(alpha), bits(beta), trans_a, trans_b, bias != nullptr};
  auto it = ctx.cache.find(key);
  try {
    if (it == ctx.cache.end()) it = ctx.cache.emplace(key, make_entry(ctx, key, alpha, beta)).first;
    GemmEntry& e = it->second;
    e.a.set_data_handle(const_cast<float*>(A));
    e.b.set_data_handle(const_cast<float*>(B));
    e.c.set_data_handle(C);
    if (bias) e.bias.set_data_handle(const_cast<float*>(bias));
    e.prim.execute(ctx.strm, e.args);
    ctx.strm.wait();
  } catch (const dnnl::error& err) {
    throw Error(detail::concat(__FILE__, ":", __LINE__, ": oneDNN matmul failed (M=", M, " N=", N,
                               " K=", K, " batch=", batch, "): ", err.what()));
  }
}

size_t gemm_cache_size() { return context().cache.size(); }

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC) {
  // out (BT, OC) = inp (BT, C) @ weight^T (C, OC) + bias
  gemm(false, true, BT, OC, C, 1.0f, inp, weight, 0.0f, out, bias);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t BT, int64_t C, int64_t OC) {
  // dinp (BT, C) = dout (BT, OC) @ weight (OC, C)
  if (dinp) gemm(false, false, BT, C, OC, 1.0f, dout, weight, 0.0f, dinp);
  // dweight (OC, C) += dout^T (OC, BT) @ inp (BT, C)
  if (dweight) gemm(true, false, OC, C, BT, 1.0f, dout, inp, 1.0f, dweight);
  // Column sum over the rows, in row order (deterministic).
  if (dbias) add_rows_in_order([&](int64_t) { return dbias; }, dout, BT, OC, 64);
}

}  // namespace braid::kernels
