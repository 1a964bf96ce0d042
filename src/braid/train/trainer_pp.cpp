// One training step on every layout: this rank's program runs in the
// pipeline executor against TrainStage (the model with this step's data, the
// dropout keys, the gradient sync's hooks); then the pipeline's reductions, the
// DP average of the loss and the update. Also the forward-only passes through
// the pipeline used by validation and sampling.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "braid/core/error.h"
#include "braid/train/gpt_stage.h"
#include "braid/train/trainer.h"

namespace braid::train {

namespace {
using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
// "<what><micro>", built by appending (GCC 12 warns falsely on literal + to_string).
std::string micro_span_name(const char* what, int64_t micro) {
  std::string s(what);
  s += std::to_string(micro);
  return s;
}
}  // namespace

class Trainer::TrainStage final : public GptStage {
 public:
  TrainStage(Trainer& t, int64_t step)
      : GptStage(*t.model_, t.opt_.micro_batch, t.opt_.seq_len / t.cp_size_), t_(t), step_(step),
        offsets_(t.sampler_->rank_offsets(step)),
        scale_(t.scaler_->scale() / static_cast<float>(t.accum_steps_)) {}


  float forward(int j, bool first, bool last) override {
    const int64_t B = t_.opt_.micro_batch;
    if (first || last) t_.load_batch(t_.train_, offsets_.data() + j * B, B, t_.opt_.seq_len);
    dropout_key(j);
    return m_.forward(first ? t_.tokens_.as<int32_t>() : nullptr, last ? t_.targets_.as<int32_t>() : nullptr, B, T_);
  }

  void backward(int j, parallel::PipeOp op, bool last) override {
    if (op != parallel::PipeOp::backward_weight) dropout_key(j);
    m_.set_tp_grad_sync(last);
    if (op == parallel::PipeOp::backward_weight) {
      m_.backward_weight();
      return;
    }
    // Test hook (fp16): this rank's last backward reports an inf gradient.
    if (last && t_.opt_.inject_inf_rank == t_.world_.rank() && t_.opt_.inject_inf_step == step_)
      t_.sync_->inject_inf_once();
    if (op == parallel::PipeOp::backward_input) {
      m_.backward_input(scale_);
      return;
    }
    // Without a pipeline the sync reduces while the last backward runs; a
    // pipeline stage reduces once after its last backward (reduce_accumulated).
    m_.backward(scale_, t_.sync_->backward_hook(last && t_.pp_size_ == 1));
  }

 private:
  // Dropout masks keyed by the step and the global token row of the micro-batch.
  void dropout_key(int j) {
    const int64_t seq0 = std::max(t_.dp_rank_, 0) * t_.sampler_->local_batch() + j * t_.opt_.micro_batch;
    m_.set_dropout_key(t_.opt_.seed, static_cast<uint64_t>(step_) + 1, seq0 * t_.opt_.seq_len);
  }

  Trainer& t_;
  int64_t step_;
  std::vector<size_t> offsets_;
  float scale_;
};

double Trainer::forward_backward(int64_t step, double* compute_s) {
  TrainStage stage(*this, step);
  const auto res = executor_->run(stage, [this](const char* what, int64_t index, const char* cat, double t0,
                                                double t1, int chunk) { trace(what, index, cat, t0, t1, chunk); });
  if (compute_s) *compute_s += res.compute_s;
  return res.loss_sum / static_cast<double>(accum_steps_);
}

StepRecord Trainer::train_step(int64_t step) {
  const auto t0 = Clock::now();
  const uint64_t sent0 = bytes_sent(), recv0 = bytes_received();
  maybe_inject_failure(opt_, world_.rank(), step);
  StepRecord r;
  r.step = step;
  r.loss_scale = scaler_->scale();
  sync_->begin_step(step);
  double compute = 0;
  float loss = sync_->computes() ? static_cast<float>(forward_backward(step, &compute)) : 0.f;
  r.fwd_bwd_ms = secs(t0, Clock::now()) * 1e3;
  const double s0 = TraceRecorder::now_us();
  if (pp_size_ > 1) {
    // The tied embedding's copies on the first and the last stage get the sum of
    // both gradients, so they stay bitwise equal (Shoeybi et al. 2019, sec. 3);
    // a rank holding both (no group) summed them in place.
    sync_->reduce_accumulated(ctx_->emb());
    // The loss lives on the last stage: broadcast it along the pipeline.
    ctx_->pp()->broadcast(&loss, 1, DType::f32, plan_.pp.last_rank());
  }
  r.loss = sync_->finish(loss);
  const double s1 = TraceRecorder::now_us();
  trace("gradient sync", -1, "comm", s0, s1);
  update(r);
  trace("optimizer", -1, "compute", s1, TraceRecorder::now_us());
  const double wall = secs(t0, Clock::now());
  if (pp_size_ > 1) {
    // Measured bubble: the part of the step a stage spends not computing,
    // averaged over the stages of the pipeline.
    float idle = static_cast<float>(1.0 - compute / wall);
    ctx_->pp()->all_reduce(&idle, &idle, 1, DType::f32, comm::ReduceOp::avg);
    r.bubble = idle;
  }
  finish_record(r, wall, sent0, recv0);
  return r;
}

void Trainer::trace(const char* what, int64_t index, const char* cat, double t0, double t1, int chunk) {
  if (!tracer_->enabled()) return;  // the name is built only when tracing
  std::string name = index < 0 ? std::string(what) : micro_span_name(what, index);
  if (chunk >= 0 && model_->num_chunks() > 1) {
    name += ".c";
    name += std::to_string(chunk);
  }
  tracer_->span(std::move(name), cat, t0, t1);
}

float Trainer::forward_pass(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  ForwardStage stage(*model_, tokens, targets, B, T);
  return executor_->forward_only(stage, 0, 1);
}

}  // namespace braid::train
