#include "braid/comm/reduce.h"

#include <cstdint>
#include <cstring>

namespace braid::comm {
namespace {

// Loads/stores as small inline functors so each (dtype, op) pair compiles to one
// straight loop the compiler can vectorise (bf16: shifts; f16: F16C/AVX512-FP16).
struct F32 {
  using T = float;
  static float load(T v) { return v; }
  static T store(float v) { return v; }
};
struct BF16 {
  using T = uint16_t;
  static float load(T v) {
    uint32_t u = static_cast<uint32_t>(v) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static T store(float f) { return f32_to_bf16(f); }
};
struct F16 {
  using T = uint16_t;
  static float load(T v) { return f16_to_f32(v); }
  static T store(float f) { return f32_to_f16(f); }
};

struct Sum {
  static float apply(float a, float b) { return a + b; }
};
struct Max {
  static float apply(float a, float b) { return a > b ? a : b; }
};
struct Min {
  static float apply(float a, float b) { return a < b ? a : b; }
};

template <class D, class Op>
void reduce_loop(void* dst, const void* a, const void* b, size_t n, float divisor) {
  using T = typename D::T;
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (divisor > 0.f) {
    for (size_t i = 0; i < n; ++i) d[i] = D::store(Op::apply(D::load(x[i]), D::load(y[i])) / divisor);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = D::store(Op::apply(D::load(x[i]), D::load(y[i])));
  }
}

template <class D>
void reduce_dtype(void* dst, const void* a, const void* b, size_t n, ReduceOp op, float divisor) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: reduce_loop<D, Sum>(dst, a, b, n, divisor); break;
    case ReduceOp::max: reduce_loop<D, Max>(dst, a, b, n, divisor); break;
    case ReduceOp::min: reduce_loop<D, Min>(dst, a, b, n, divisor); break;
  }
}

template <class D>
void divide_loop(void* dst, const void* src, size_t n, float divisor) {
  using T = typename D::T;
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = D::store(D::load(s[i]) / divisor);
}

template <class D>
void widen_loop(float* dst, const void* src, size_t n) {
  const auto* s = static_cast<const typename D::T*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = D::load(s[i]);
}

template <class D>
void narrow_loop(void* dst, const float* src, size_t n, float divisor) {
  auto* d = static_cast<typename D::T*>(dst);
  if (divisor > 0.f) {
    for (size_t i = 0; i < n; ++i) d[i] = D::store(src[i] / divisor);
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = D::store(src[i]);
  }
}

}  // namespace

void reduce_elems(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op,
                  float divisor) {
  if (op != ReduceOp::avg) divisor = 0.f;
  switch (dtype) {
    case DType::f32: reduce_dtype<F32>(dst, a, b, n, op, divisor); break;
    case DType::bf16: reduce_dtype<BF16>(dst, a, b, n, op, divisor); break;
    case DType::f16: reduce_dtype<F16>(dst, a, b, n, op, divisor); break;
  }
}

void divide_elems(void* dst, const void* src, size_t n, DType dtype, float divisor) {
  switch (dtype) {
    case DType::f32: divide_loop<F32>(dst, src, n, divisor); break;
    case DType::bf16: divide_loop<BF16>(dst, src, n, divisor); break;
    case DType::f16: divide_loop<F16>(dst, src, n, divisor); break;
  }
}

void to_f32(float* dst, const void* src, size_t n, DType dtype) {
  switch (dtype) {
    case DType::f32: std::memcpy(dst, src, n * 4); break;
    case DType::bf16: widen_loop<BF16>(dst, src, n); break;
    case DType::f16: widen_loop<F16>(dst, src, n); break;
  }
}

void from_f32(void* dst, const float* src, size_t n, DType dtype, float divisor) {
  switch (dtype) {
    case DType::f32: narrow_loop<F32>(dst, src, n, divisor); break;
    case DType::bf16: narrow_loop<BF16>(dst, src, n, divisor); break;
    case DType::f16: narrow_loop<F16>(dst, src, n, divisor); break;
  }
}

}  // namespace braid::comm
