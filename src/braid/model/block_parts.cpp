#include "braid/model/block_parts.h"

#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/swiglu.h"

namespace braid::model {

namespace k = braid::kernels;

namespace {

// ---- norms: LayerNorm (GPT-2), RMSNorm (Llama) ----
void layernorm_fwd(Operators& ops, float* out, float* mean, float* rstd, const float* x, const float* w,
                   const float* b, int64_t C, float) {
  ops.norm_forward(out, mean, rstd, x, w, b, C);
}
void layernorm_bwd(Operators& ops, float* dx, float* dw, float* db, const float* dout, const float* x,
                   const float* w, const float* mean, const float* rstd, int64_t C) {
  ops.norm_backward(dx, dw, db, dout, x, w, mean, rstd, C);
}
void rmsnorm_fwd(Operators& ops, float* out, float*, float* rstd, const float* x, const float* w, const float*,
                 int64_t C, float eps) {
  ops.rms_norm_forward(out, rstd, x, w, C, eps);
}
void rmsnorm_bwd(Operators& ops, float* dx, float* dw, float*, const float* dout, const float* x, const float* w,
                 const float*, const float* rstd, int64_t C) {
  ops.rms_norm_backward(dx, dw, dout, x, w, rstd, C);
}

// ---- MLP activations: GELU (GPT-2), SwiGLU (Llama) ----
void gelu_fwd(float* act, const void* up, DType dt, int64_t N, int64_t Hl) { k::gelu_forward(act, up, dt, N * Hl); }
void gelu_bwd(float* dup, float* dact, const void* up, DType dt, int64_t N, int64_t Hl) {
  k::gelu_backward(dup, dact, up, dt, N * Hl);
}
void swiglu_fwd(float* act, const void* up, DType dt, int64_t N, int64_t Hl) { k::swiglu_forward(act, up, dt, N, Hl); }
void swiglu_bwd(float* dup, float* dact, const void* up, DType dt, int64_t N, int64_t Hl) {
  k::swiglu_backward(dup, dact, up, dt, N, Hl);
}

// The registries, indexed by the kind's value.
const NormPart kNorms[] = {
    {NormKind::layernorm, "layernorm", true, true, layernorm_fwd, layernorm_bwd},
    {NormKind::rmsnorm, "rmsnorm", false, false, rmsnorm_fwd, rmsnorm_bwd},
};
const MlpPart kMlps[] = {
    {MlpKind::gelu, "gelu", 1, gelu_fwd, gelu_bwd},
    {MlpKind::swiglu, "swiglu", 2, swiglu_fwd, swiglu_bwd},
};
const PositionPart kPositions[] = {
    {PositionKind::learned, "learned", true, false},
    {PositionKind::rope, "rope", false, true},
};

}  // namespace

const NormPart& norm_part(NormKind kind) { return kNorms[size_t(kind)]; }
const MlpPart& mlp_part(MlpKind kind) { return kMlps[size_t(kind)]; }
const PositionPart& position_part(PositionKind kind) { return kPositions[size_t(kind)]; }

}  // namespace braid::model
