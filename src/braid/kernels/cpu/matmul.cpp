#include "braid/kernels/cpu/matmul.h"


#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/row_sum.h"

namespace braid::kernels {
namespace {

struct GemmKey {
  int64_t M, N, K, batch;
  uint32_t alpha_bits, beta_bits;
  bool ta, tb, has_bias;
  DType ab;
  int64_t lda = 0;  // row stride of a plain A (batch 1) when it is not K; 0: contiguous
  int64_t ldc = 0;  // row stride of C (batch 1) when it is not N; 0: contiguous
  bool operator==(const GemmKey& o) const {
    return M == o.M && N == o.N && K == o.K && batch == o.batch && alpha_bits == o.alpha_bits &&
           beta_bits == o.beta_bits && ta == o.ta && tb == o.tb && has_bias == o.has_bias && ab == o.ab &&
           lda == o.lda && ldc == o.ldc;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.M)); mix(uint64_t(k.N)); mix(uint64_t(k.K)); mix(uint64_t(k.batch)); mix(uint64_t(k.lda)); mix(uint64_t(k.ldc));
    mix(k.alpha_bits); mix(k.beta_bits);
    mix(uint64_t(k.ta) | uint64_t(k.tb) << 1 | uint64_t(k.has_bias) << 2 | uint64_t(k.ab) << 3);
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
  // f32 tiles of half operands oneDNN cannot multiply here (widened_gemm).
  std::vector<float> widen_a, widen_b;
  // half_matmul_supported's answer per DType (-1: not asked yet).
  int8_t supported[3] = {-1, -1, -1};
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

dnnl::memory::data_type dnnl_type(DType t) {
  using dt = dnnl::memory::data_type;
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
  }
  return dt::undef;
}

// Row-major (batch, rows, cols) descriptor; transposed storage = swapped strides.
dnnl::memory::desc make_md(int64_t batch, int64_t rows, int64_t cols, bool trans, DType t = DType::f32) {
  if (trans) return dnnl::memory::desc({batch, rows, cols}, dnnl_type(t), {rows * cols, 1, rows});
  return dnnl::memory::desc({batch, rows, cols}, dnnl_type(t), {rows * cols, cols, 1});
}

GemmEntry make_entry(GemmContext& ctx, const GemmKey& k, float alpha, float beta) {
  auto a_md = k.lda ? dnnl::memory::desc({1, k.M, k.K}, dnnl_type(k.ab), {k.M * k.lda, k.lda, 1})
                    : make_md(k.batch, k.M, k.K, k.ta, k.ab);
  auto b_md = make_md(k.batch, k.K, k.N, k.tb, k.ab);
  auto c_md = k.ldc ? dnnl::memory::desc({1, k.M, k.N}, dnnl::memory::data_type::f32, {k.M * k.ldc, k.ldc, 1})
                    : make_md(k.batch, k.M, k.N, false);
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

// Runs the cached primitive for `key` (made on first use).
void run_gemm(const GemmKey& key, float alpha, float beta, const void* A, const void* B, float* C,
              const float* bias) {
  GemmContext& ctx = context();
  auto it = ctx.cache.find(key);
  try {
    if (it == ctx.cache.end()) it = ctx.cache.emplace(key, make_entry(ctx, key, alpha, beta)).first;
    GemmEntry& e = it->second;
    e.a.set_data_handle(const_cast<void*>(A));
    e.b.set_data_handle(const_cast<void*>(B));
    e.c.set_data_handle(C);
    if (bias) e.bias.set_data_handle(const_cast<float*>(bias));
    e.prim.execute(ctx.strm, e.args);
    ctx.strm.wait();
  } catch (const dnnl::error& err) {
    throw Error(braid::detail::concat(__FILE__, ":", __LINE__, ": oneDNN matmul failed (", dtype_name(key.ab),
                               " M=", key.M, " N=", key.N, " K=", key.K, " batch=", key.batch, "): ",
                               err.what()));
  }
}

// C (M, N) = beta C + A (M, K; rows lda apart) @ B^T, B stored (N, K): f32, one batch.
void gemm_strided_a(int64_t M, int64_t N, int64_t K, int64_t lda, const float* A, const float* B, float beta,
                    float* C) {
  if (M == 0 || N == 0 || K == 0) return;
  run_gemm({M, N, K, 1, bits(1.0f), bits(beta), false, true, false, DType::f32, lda == K ? 0 : lda}, 1.0f,
           beta, A, B, C, nullptr);
}

// Floats of one operand's f32 tile in widened_gemm (16 MiB).
constexpr int64_t kWidenFloats = int64_t(1) << 22;

const void* elem(const void* p, int64_t i, DType t) {
  return static_cast<const char*>(p) + size_t(i) * dtype_size(t);
}

// Tile sizes of widened_gemm: each side halved (the largest first) until an
// (m x k) tile of A and an (n x k) tile of B each hold at most kWidenFloats.
struct WidenTiles {
  int64_t m, n, k;
};
WidenTiles widen_tiles(int64_t M, int64_t N, int64_t K) {
  WidenTiles t{M, N, K};
  auto half = [](int64_t& x) { x = (x + 1) / 2; };
  while (t.m * t.k > kWidenFloats || t.n * t.k > kWidenFloats) {
    if (t.k >= t.m && t.k >= t.n) half(t.k);
    else if (t.m >= t.n) half(t.m);
    else half(t.n);
  }
  return t;
}

// gemm_typed for a half type oneDNN has no matmul for here: the operands are
// widened exactly to f32 and multiplied by the f32 primitive. A small batch is
// widened whole (one batched product); otherwise each batch runs in tiles
// (widen_tiles), each widened in its stored layout (widening into the
// forward's layout instead, transposing, measured slower at GPT-2's shapes);
// C's tile is written in place and K's tiles accumulate into it in order
// (beta and bias on the first). Each element of C is the f32 product of the
// rounded values; tiled along K, its sum is split at the tile edges.
void widened_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                  const void* B, DType t, float beta, float* C, const float* bias, int64_t batch) {
  GemmContext& ctx = context();
  if (batch > 1) {
    if (batch * M * K <= kWidenFloats && batch * K * N <= kWidenFloats) {
      ctx.widen_a.resize(size_t(batch * M * K));
      ctx.widen_b.resize(size_t(batch * K * N));
      cast_to_f32(ctx.widen_a.data(), A, t, ctx.widen_a.size());
      cast_to_f32(ctx.widen_b.data(), B, t, ctx.widen_b.size());
      run_gemm({M, N, K, batch, bits(alpha), bits(beta), ta, tb, bias != nullptr, DType::f32}, alpha, beta,
               ctx.widen_a.data(), ctx.widen_b.data(), C, bias);
      return;
    }
    for (int64_t b = 0; b < batch; ++b)
      widened_gemm(ta, tb, M, N, K, alpha, elem(A, b * M * K, t), elem(B, b * K * N, t), t, beta, C + b * M * N,
                   bias, 1);
    return;
  }
  const WidenTiles tile = widen_tiles(M, N, K);
  ctx.widen_a.resize(size_t(tile.m * tile.k));
  ctx.widen_b.resize(size_t(tile.n * tile.k));
  int64_t a_at[2] = {-1, -1}, b_at[2] = {-1, -1};  // the (row, k) origin of the tile each buffer holds
  for (int64_t m0 = 0; m0 < M; m0 += tile.m)
    for (int64_t n0 = 0; n0 < N; n0 += tile.n)
      for (int64_t k0 = 0; k0 < K; k0 += tile.k) {
        const int64_t m = std::min(tile.m, M - m0), n = std::min(tile.n, N - n0), k = std::min(tile.k, K - k0);
        if (a_at[0] != m0 || a_at[1] != k0) {  // op(A)[m0:, k0:], as stored
          if (ta) cast_rows_to_f32(ctx.widen_a.data(), elem(A, k0 * M + m0, t), t, size_t(k), size_t(m), size_t(M));
          else cast_rows_to_f32(ctx.widen_a.data(), elem(A, m0 * K + k0, t), t, size_t(m), size_t(k), size_t(K));
          a_at[0] = m0, a_at[1] = k0;
        }
        if (b_at[0] != n0 || b_at[1] != k0) {  // op(B)[k0:, n0:], as stored
          if (tb) cast_rows_to_f32(ctx.widen_b.data(), elem(B, n0 * K + k0, t), t, size_t(n), size_t(k), size_t(K));
          else cast_rows_to_f32(ctx.widen_b.data(), elem(B, k0 * N + n0, t), t, size_t(k), size_t(n), size_t(N));
          b_at[0] = n0, b_at[1] = k0;
        }
        const float b_k = k0 == 0 ? beta : 1.0f;
        const bool with_bias = bias && k0 == 0;
        GemmKey key{m, n, k, 1, bits(alpha), bits(b_k), ta, tb, with_bias, DType::f32};
        key.ldc = n == N ? 0 : N;
        run_gemm(key, alpha, b_k, ctx.widen_a.data(), ctx.widen_b.data(), C + m0 * N + n0,
                 with_bias ? bias + n0 : nullptr);
      }
}

}  // namespace

void gemm_typed(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, const void* B, DType ab_type, float beta, float* C, const float* bias,
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
  if (ab_type != DType::f32 && !half_matmul_supported(ab_type)) {
    widened_gemm(trans_a, trans_b, M, N, K, alpha, A, B, ab_type, beta, C, bias, batch);
    return;
  }
  run_gemm({M, N, K, batch, bits(alpha), bits(beta), trans_a, trans_b, bias != nullptr, ab_type}, alpha, beta, A,
           B, C, bias);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          const float* B, float beta, float* C, const float* bias, int64_t batch) {
  gemm_typed(trans_a, trans_b, M, N, K, alpha, A, B, DType::f32, beta, C, bias, batch);
}

bool half_matmul_supported(DType t) {
  if (t == DType::f32) return true;
  GemmContext& ctx = context();
  int8_t& known = ctx.supported[size_t(t)];
  if (known < 0) {
    try {
      const GemmKey key{16, 16, 16, 1, bits(1.0f), bits(0.0f), false, true, false, t};
      make_entry(ctx, key, 1.0f, 0.0f);
      known = 1;
    } catch (const dnnl::error&) {
      known = 0;
    }
  }
  return known == 1;
}

size_t gemm_cache_size() { return context().cache.size(); }

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t BT, int64_t C, int64_t OC) {
  // out (BT, OC) = inp (BT, C) @ weight^T (C, OC) + bias
  gemm(false, true, BT, OC, C, 1.0f, inp, weight, 0.0f, out, bias);
}

void transpose(float* dst, const float* src, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
      const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t i = i0; i < i1; ++i) dst[j * rows + i] = src[i * cols + j];
    }
}

namespace {
// Layout rules of matmul_backward (matmul.h; measured: docs/BENCHMARKS.md).
// oneDNN reads a plain right operand of many columns at about half rate; the
// weight's copy costs about 120 / BT of its product, and dinp computed
// transposed costs a transpose of the small result.
constexpr int64_t kWide = 2048;
constexpr int64_t kMinRowsForWeightCopy = 1024;
constexpr int64_t kMinRowsForTransposedDinp = 512;
constexpr int64_t kMinInnerForTransposedDinp = 8192;
constexpr int64_t kWeightBlockRows = 4096;

enum class DinpLayout { plain, weight_copy, transposed };

DinpLayout dinp_layout(int64_t BT, int64_t C, int64_t OC) {
  if (OC == 0 || std::max(C, OC) < kWide) return DinpLayout::plain;  // plain zero-fills at OC == 0
  if (BT >= kMinRowsForWeightCopy) return DinpLayout::weight_copy;
  if (BT >= kMinRowsForTransposedDinp || C >= kWide || OC >= kMinInnerForTransposedDinp)
    return DinpLayout::transposed;
  return DinpLayout::plain;
}
}  // namespace

size_t matmul_backward_scratch_floats(int64_t BT, int64_t C, int64_t OC) {
  size_t n = 0;
  switch (dinp_layout(BT, C, OC)) {
    case DinpLayout::plain: break;
    case DinpLayout::weight_copy: n = size_t(std::min(OC, kWeightBlockRows) * C); break;
    case DinpLayout::transposed: n = size_t(BT * C); break;
  }
  if (C >= kWide) n = std::max(n, size_t(BT * C));  // inp transposed
  return n;
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int64_t BT, int64_t C, int64_t OC,
                     float* scratch) {
  // dinp (BT, C) = dout (BT, OC) @ weight (OC, C)
  const DinpLayout layout = scratch ? dinp_layout(BT, C, OC) : DinpLayout::plain;
  if (dinp && layout == DinpLayout::weight_copy) {
    // Block by block of weight rows: dinp += dout[:, o0:o1] @ (weight[o0:o1, :]^T)^T.
    for (int64_t o0 = 0; o0 < OC; o0 += kWeightBlockRows) {
      const int64_t rows = std::min(kWeightBlockRows, OC - o0);
      transpose(scratch, weight + o0 * C, rows, C);  // (C, rows)
      // dout's columns [o0, o0 + rows): a (BT, rows) operand with rows OC apart.
      gemm_strided_a(BT, C, rows, OC, dout + o0, scratch, o0 == 0 ? 0.0f : 1.0f, dinp);
    }
  } else if (dinp && layout == DinpLayout::transposed) {
    // dinp^T (C, BT) = weight^T (C, OC) @ dout^T (OC, BT), then transposed back.
    gemm(true, true, C, BT, OC, 1.0f, weight, dout, 0.0f, scratch);
    transpose(dinp, scratch, C, BT);
  } else if (dinp) {
    gemm(false, false, BT, C, OC, 1.0f, dout, weight, 0.0f, dinp);
  }
  // dweight (OC, C) += dout^T (OC, BT) @ inp (BT, C)
  if (dweight && scratch && C >= kWide) {
    transpose(scratch, inp, BT, C);  // (C, BT)
    gemm(true, true, OC, C, BT, 1.0f, dout, scratch, 1.0f, dweight);
  } else if (dweight) {
    gemm(true, false, OC, C, BT, 1.0f, dout, inp, 1.0f, dweight);
  }
  // Column sum over the rows, in row order (deterministic).
  if (dbias) add_rows_in_order([&](int64_t) { return dbias; }, dout, BT, OC, 64);
}

void matmul_forward_typed(float* out, const void* inp, const void* weight, DType ab, const float* bias,
                          int64_t BT, int64_t C, int64_t OC) {
  gemm_typed(false, true, BT, OC, C, 1.0f, inp, weight, ab, 0.0f, out, bias);
}

void matmul_backward_typed(float* dinp, float* dweight, float* dbias, const void* dout, const void* inp,
                           const void* weight, DType ab, int64_t BT, int64_t C, int64_t OC, float* scratch) {
  if (ab == DType::f32) {
    matmul_backward(dinp, dweight, dbias, static_cast<const float*>(dout), static_cast<const float*>(inp),
                    static_cast<const float*>(weight), BT, C, OC, scratch);
    return;
  }
  if (dinp) gemm_typed(false, false, BT, C, OC, 1.0f, dout, weight, ab, 0.0f, dinp);
  if (dweight) gemm_typed(true, false, OC, C, BT, 1.0f, dout, inp, ab, 1.0f, dweight);
  if (dbias) add_rows_in_order([&](int64_t) { return dbias; }, dout, ab, BT, OC, 64);
}

}  // namespace braid::kernels
