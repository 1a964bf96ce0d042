#include "braid/parallel/data_parallel/grad_sync.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/core/hash.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/model/gpt.h"

namespace braid::parallel {

namespace {
// f32 through the vectorised kernel; half formats by their all-ones exponent (inf or NaN).
bool nonfinite(const void* x, DType t, size_t n) {
  if (t == DType::f32) return kernels::has_nonfinite(static_cast<const float*>(x), n);
  const uint16_t* h = static_cast<const uint16_t*>(x);
  const uint16_t mask = t == DType::bf16 ? 0x7f80u : 0x7c00u;
  for (size_t i = 0; i < n; ++i)
    if ((h[i] & mask) == mask) return true;
  return false;
}
}  // namespace

bool GradSync::local_grads_nonfinite() const {
  for (const auto& r : owned())
    if (nonfinite(grad(r), grad_dtype(), r.len)) return true;
  return false;
}

void GradSync::init_params(model::GPT& model, uint64_t seed) { model.init_weights(seed); }

const void* FlatBufferSync::grad(const OwnedRange& r) const { return model_->grads() + r.offset; }

float* FlatBufferSync::master(const OwnedRange& r) { return model_->params() + r.offset; }

const float* FlatBufferSync::full_params(std::vector<float>&) { return model_->params(); }

void FlatBufferSync::assemble_state(const float* state, float* full) {
  std::fill(full, full + model_->num_params(), 0.f);
  for (const auto& r : owned()) std::copy_n(state + r.state, r.len, full + r.offset);
}

void FlatBufferSync::load_params(const FlatReader& read) { read(0, model_->num_params(), model_->params()); }

const float* FlatBufferSync::acquire_unit_params(int u) {
  return model_->params() + (u == 0 ? 0 : model_->unit_end(u - 1));
}

uint64_t FlatBufferSync::hash_params() { return fnv1a(model_->params(), model_->num_params() * sizeof(float)); }

}  // namespace braid::parallel
