// AdamW (Loshchilov & Hutter 2019) over the pieces of the flat parameter buffer
// this rank updates (GradSync::owned()), with the global gradient norm for
// clipping. The moments are f32 (state_elems each); the master weights and
// gradients come from the gradient sync, in any gradient dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/grad_sync.h"

namespace braid::train {

struct AdamWSettings {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // matrices only (ParamInfo::weight_decay)
};

class AdamW {
 public:
  /// One owned piece inside one parameter (so it has one weight-decay setting).
  struct Segment {
    size_t offset, len, state;  // flat offset, elements, offset in the moments
    bool decay;
    bool tp_replicated;    // the same tensor on every TP rank: counted once in the norm
    bool pp_copy = false;  // the last stage's copy of the tied embedding (counted on the first)
  };

  /// Cuts sync.owned() at the parameter boundaries of `model` (alignment gaps
  /// between parameters are updated without decay; their gradient is always
  /// zero). last_stage_copy: this rank is a pipeline's last stage, whose unit 0
  /// is a copy of the first stage's tied embedding. Allocates m and v
  /// (sync.state_elems() f32 each) in the ledger as optimizer memory.
  AdamW(const AdamWSettings& s, const parallel::GradSync& sync, const model::GPT& model, bool last_stage_copy,
        MemoryLedger* ledger);

  /// Sum over the world of the squared gradients times mult^2, each element
  /// counted on exactly one rank: identical on every rank (collective over
  /// sync.norm_group()). tp_rank: tensors replicated over TP count on rank 0.
  double global_grad_sumsq(parallel::GradSync& sync, float mult, int tp_rank) const;
  /// One update of every segment with gradient g * grad_mult, learning rate
  /// lr and step t >= 1 (bias corrections).
  void step(parallel::GradSync& sync, float lr, float grad_mult, int64_t t);

  const std::vector<Segment>& segments() const { return segments_; }
  float* m() { return m_.as<float>(); }
  float* v() { return v_.as<float>(); }
  /// Sets the moments of every segment from a checkpoint (read_m, read_v:
  /// flat ranges of this rank's layout).
  void load_state(const parallel::FlatReader& read_m, const parallel::FlatReader& read_v);

 private:
  AdamWSettings s_;
  std::vector<Segment> segments_;
  Buffer m_, v_;
};

}  // namespace braid::train
