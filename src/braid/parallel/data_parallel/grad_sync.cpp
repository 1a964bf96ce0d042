#include "braid/parallel/data_parallel/grad_sync.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/core/hash.h"
#include "braid/model/gpt.h"

namespace braid::parallel {

bool GradSync::local_grads_nonfinite() const {
  const DType t = grad_dtype();
  for (const auto& r : owned()) {
    const void* g = grad(r);
    for (size_t i = 0; i < r.len; ++i)
      if (!std::isfinite(load_as_f32(g, i, t))) return true;
  }
  return false;
}

const void* FlatBufferSync::grad(const OwnedRange& r) const { return model_->grads() + r.offset; }

float* FlatBufferSync::master(const OwnedRange& r) { return model_->params() + r.offset; }

const float* FlatBufferSync::full_params(std::vector<float>&) { return model_->params(); }

void FlatBufferSync::assemble_state(const float* state, float* full) {
  std::fill(full, full + model_->num_params(), 0.f);
  for (const auto& r : owned()) std::copy_n(state + r.state, r.len, full + r.offset);
}

void FlatBufferSync::load_params(const float* full) {
  std::memcpy(model_->params(), full, model_->num_params() * sizeof(float));
}

const float* FlatBufferSync::acquire_unit_params(int u) {
  return model_->params() + (u == 0 ? 0 : model_->unit_end(u - 1));
}

uint64_t FlatBufferSync::hash_params() { return fnv1a(model_->params(), model_->num_params() * sizeof(float)); }

}  // namespace braid::parallel
