// The GPT model as the pipeline executor sees it (parallel::StageModel): its
// chunks, activation slots and boundary buffers, for (B, T) micro-batches.
#pragma once
#include <cstdint>

#include "braid/core/error.h"
#include "braid/model/gpt.h"
#include "braid/parallel/pipeline/executor.h"

namespace braid::train {

/// The chunk, slot and boundary plumbing shared by every pass; forward and
/// backward are the subclass's (they know the step's data).
class GptStage : public parallel::StageModel {
 public:
  GptStage(model::GPT& m, int64_t B, int64_t T) : m_(m), B_(B), T_(T) {}
  int num_chunks() const override { return m_.num_chunks(); }
  int64_t chunk_slots(int c) const override { return m_.chunk_slots(c); }
  void set_slot(int64_t slot, int c) override { m_.set_slot(slot, c); }
  void* stage_input() override { return m_.stage_input(); }
  const void* stage_output() override { return m_.stage_output(); }
  void* boundary_grad() override { return m_.boundary_grad(); }
  size_t boundary_bytes() const override {
    return static_cast<size_t>(m_.boundary_rows(B_, T_) * m_.config().n_embd) * sizeof(float);
  }

 protected:
  model::GPT& m_;
  int64_t B_, T_;
};

/// Forward only over given tokens (B, T) int32 (evaluation, sampling); the
/// targets, when given, make the last stage return the mean loss.
class ForwardStage final : public GptStage {
 public:
  ForwardStage(model::GPT& m, const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T)
      : GptStage(m, B, T), tokens_(tokens), targets_(targets) {}
  float forward(int, bool first, bool last) override {
    return m_.forward(first ? tokens_ : nullptr, last ? targets_ : nullptr, B_, T_);
  }
  void backward(int, parallel::PipeOp, bool) override { BRAID_CHECK(false, "a forward-only pass has no backward"); }

 private:
  const int32_t *tokens_, *targets_;
};

}  // namespace braid::train
