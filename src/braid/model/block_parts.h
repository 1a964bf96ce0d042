// The parts a block is assembled from, chosen by the configuration (config.h:
// norm, positions, MLP): each part's forward and backward, written once
// against the strand's Operators or a row-wise kernel, so a parallel strand
// needs no branch for it. A new part is a kernel pair, an entry in the
// registry (block_parts.cpp) and its enum value; the block code (gpt.cpp)
// reads the part, never the kind.
#pragma once
#include <cstdint>

#include "braid/core/dtype.h"
#include "braid/model/config.h"
#include "braid/model/operators.h"

namespace braid::model {

/// A normalisation over the local rows of the residual stream (x, out f32;
/// weight, bias (C); mean, rstd (rows) saved for backward; backward
/// accumulates dx, dweight, dbias).
struct NormPart {
  NormKind kind;
  const char* name;
  bool has_bias;   // a bias tensor beside the weight (LayerNorm's)
  bool uses_mean;  // saves the row means (RMSNorm leaves `mean` untouched)
  void (*forward)(Operators& ops, float* out, float* mean, float* rstd, const float* x, const float* weight,
                  const float* bias, int64_t C, float eps);
  void (*backward)(Operators& ops, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                   const float* weight, const float* mean, const float* rstd, int64_t C);
};

/// The MLP's activation between its up- and down-projection: act (N, Hl) f32
/// from the up-projection's output up (N, up_rows * Hl) stored in `dt`;
/// backward writes dup (N, up_rows * Hl, f32) from dact (N, Hl) and may
/// overwrite dact (GELU works in place: dup == dact there).
struct MlpPart {
  MlpKind kind;
  const char* name;
  int64_t up_rows;  // up-projection features per hidden feature (SwiGLU: gate and up)
  void (*forward)(float* act, const void* up, DType dt, int64_t N, int64_t Hl);
  void (*backward)(float* dup, float* dact, const void* up, DType dt, int64_t N, int64_t Hl);
};

/// How positions enter the model: a learned table added by the embedding
/// (Operators::embedding_forward's wpe) or rotary embeddings of q and k in
/// every block at each token's global position (Operators::token_positions).
struct PositionPart {
  PositionKind kind;
  const char* name;
  bool learned_table;  // the model holds wpe (block_size, C)
  bool rotary;         // q and k are turned in every block
};

/// The registered parts (one entry per kind).
const NormPart& norm_part(NormKind k);
const MlpPart& mlp_part(MlpKind k);
const PositionPart& position_part(PositionKind k);

}  // namespace braid::model
