// The pipeline executor: runs this rank's action list (from the schedule
// builder) for one step. A rank holds one model chunk, or several under the
// interleaved schedule (virtual stage q = chunk * P + rank). A forward on a
// later virtual stage first receives its input activation from the previous
// one; a backward (or zero-bubble input pass) first receives the output
// gradient from the next; sends are non-blocking: activations leave from their
// slot, gradients from a ring of buffers. Tags are (virtual stage, micro-batch,
// direction), so the checked order of the tables is the order of every send
// and receive.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "braid/core/error.h"
#include "braid/train/trainer.h"

namespace braid::train {

namespace {
using Clock = std::chrono::steady_clock;
double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}
// Tags name the receiving virtual stage q and the micro-batch, so every
// message between two ranks is distinct.
int act_tag(int q, int micro, int64_t m) { return static_cast<int>(2 * (q * m + micro)); }
int grad_tag(int q, int micro, int64_t m) { return static_cast<int>(2 * (q * m + micro) + 1); }
// "<what><micro>", built by appending (GCC 12 warns falsely on literal + to_string).
std::string span_name(const char* what, int64_t micro) {
  std::string s(what);
  s += std::to_string(micro);
  return s;
}
}  // namespace

StepRecord Trainer::pipeline_step(int64_t step) {
  const auto t0 = Clock::now();
  const uint64_t sent0 = bytes_sent(), recv0 = bytes_received();
  maybe_inject_failure(step);
  const int64_t B = opt_.micro_batch, T = opt_.seq_len, m = accum_steps_;
  const int P = pp_size_, v = model_->num_chunks(), Q = P * v;
  const int prev = (pp_rank_ + P - 1) % P, next = (pp_rank_ + 1) % P;
  const bool last = model_->is_last_stage();
  // Activations and their gradients cross a stage boundary as (rows, C) f32.
  const size_t boundary_bytes =
      static_cast<size_t>(model_->boundary_rows(B, T) * model_->config().n_embd) * sizeof(float);
  const std::vector<size_t> offsets = sampler_->rank_offsets(step);
  const auto& prog = programs_[static_cast<size_t>(pp_rank_)];
  // Every backward accumulates; the DP reduction runs once, after this stage's last backward.
  sync_->begin_step(step);
  StepRecord r;
  r.step = step;
  r.loss_scale = scaler_->scale();

  // Per (chunk, micro-batch): its activation slot and the send of its output.
  const auto cj = [m](int c, int j) { return static_cast<size_t>(c) * static_cast<size_t>(m) + static_cast<size_t>(j); };
  std::vector<int64_t> slot_of(static_cast<size_t>(v * m), -1);
  std::vector<comm::WorkPtr> act_send(static_cast<size_t>(v * m));
  std::vector<std::vector<int64_t>> free_slots(static_cast<size_t>(v));
  for (int c = 0; c < v; ++c)
    for (int64_t k = model_->chunk_slots(c) - 1; k >= 0; --k) free_slots[static_cast<size_t>(c)].push_back(k);
  // Gradients leave from a ring of send buffers (the checker proved this ring
  // cannot deadlock the tables even when every send waits for its receive).
  std::vector<comm::WorkPtr> grad_send(static_cast<size_t>(parallel::kGradSendBuffers));
  size_t grad_sends = 0;
  double loss_sum = 0, compute = 0;
  const float scale = r.loss_scale / static_cast<float>(m);
  // Sequence-parallel sums of replicated gradients: once per chunk, in its
  // last input-gradient pass (LayerNorms) and its last weight pass (wpe).
  std::vector<size_t> last_b(static_cast<size_t>(v), SIZE_MAX), last_w(static_cast<size_t>(v), SIZE_MAX);
  for (size_t i = 0; i < prog.size(); ++i) {
    const auto op = prog[i].op;
    const size_t c = static_cast<size_t>(prog[i].chunk);
    if (op == parallel::PipeOp::backward_weight) {
      last_w[c] = i;
    } else if (op != parallel::PipeOp::forward) {
      last_b[c] = i;
      if (op == parallel::PipeOp::backward) last_w[c] = i;
    }
  }

  auto dropout_key = [&](int j) {
    const int64_t seq0 = std::max(dp_rank_, 0) * sampler_->local_batch() + j * B;
    model_->set_dropout_key(opt_.seed, static_cast<uint64_t>(step) + 1, seq0 * T);
  };

  for (size_t i = 0; i < prog.size(); ++i) {
    const parallel::PipeAction a = prog[i];
    const int j = a.micro, c = a.chunk, q = c * P + pp_rank_;
    const bool first_v = q == 0, last_v = q == Q - 1;
    const size_t id = cj(c, j);
    if (a.op == parallel::PipeOp::forward) {
      auto& fs = free_slots[static_cast<size_t>(c)];
      BRAID_CHECK(!fs.empty(), "pipeline: no free activation slot for micro-batch ", j, " on chunk ", c);
      const int64_t slot = fs.back();
      fs.pop_back();
      slot_of[id] = slot;
      model_->set_slot(slot, c);
      const double w0 = now_us();
      if (!first_v) ctx_->pp()->recv(model_->stage_input(), boundary_bytes, prev, act_tag(q, j, m));
      if (first_v || last_v)
        gather_batch(train_.data(), offsets.data() + j * B, B, T, tokens_.as<int32_t>(), targets_.as<int32_t>());
      dropout_key(j);
      const auto c0 = Clock::now();
      const double f0 = now_us();
      if (!first_v) trace("recv activation ", j, "comm", w0, f0, c);
      const float loss = model_->forward(first_v ? tokens_.as<int32_t>() : nullptr,
                                         last_v ? targets_.as<int32_t>() : nullptr, B, T);
      compute += secs(c0, Clock::now());
      trace("F", j, "compute", f0, now_us(), c);
      if (last_v) loss_sum += loss;
      if (!last_v) act_send[id] = ctx_->pp()->isend(model_->stage_output(), boundary_bytes, next, act_tag(q + 1, j, m));
    } else if (a.op == parallel::PipeOp::backward_weight) {
      model_->set_slot(slot_of[id], c);
      model_->set_tp_grad_sync(i == last_w[static_cast<size_t>(c)]);
      const auto c0 = Clock::now();
      const double w0 = now_us();
      model_->backward_weight();
      compute += secs(c0, Clock::now());
      trace("W", j, "compute", w0, now_us(), c);
      free_slots[static_cast<size_t>(c)].push_back(slot_of[id]);
    } else {
      const bool full = a.op == parallel::PipeOp::backward;
      model_->set_slot(slot_of[id], c);
      const double w0 = now_us();
      if (!last_v) ctx_->pp()->recv(model_->boundary_grad(), boundary_bytes, next, grad_tag(q, j, m));
      dropout_key(j);
      model_->set_tp_grad_sync(i == last_b[static_cast<size_t>(c)]);
      const auto c0 = Clock::now();
      const double b0 = now_us();
      if (!last_v) trace("recv gradient ", j, "comm", w0, b0, c);
      // Test hook (fp16): this rank's last backward reports an inf gradient.
      if (i == last_b[static_cast<size_t>(c)] && opt_.inject_inf_rank == world_.rank() && opt_.inject_inf_step == step)
        sync_->inject_inf_once();
      sync_->backward_hook(false);
      if (full) {
        model_->backward(scale);
      } else {
        model_->backward_input(scale);
      }
      compute += secs(c0, Clock::now());
      trace(full ? "B" : "Bi", j, "compute", b0, now_us(), c);
      if (!first_v) {
        // d(input) leaves from the next ring buffer once its previous send is done.
        const size_t k = grad_sends++ % grad_send.size();
        if (grad_send[k]) grad_send[k]->wait();
        char* buf = grad_send_buf_.as<char>() + k * boundary_bytes;
        std::memcpy(buf, model_->boundary_grad(), boundary_bytes);
        grad_send[k] = ctx_->pp()->isend(buf, boundary_bytes, prev, grad_tag(q - 1, j, m));
      }
      // The next stage returned this gradient, so it has the activation: the send is done.
      if (act_send[id]) act_send[id]->wait();
      act_send[id].reset();
      if (full) free_slots[static_cast<size_t>(c)].push_back(slot_of[id]);
    }
  }
  for (auto& w : grad_send)
    if (w) w->wait();

  // After this stage's last backward: the tied embedding and the DP sync, once.
  const double s0 = now_us();
  // The tied embedding's copies on the first and the last stage get the sum of
  // both gradients, so they stay bitwise equal (Shoeybi et al. 2019, sec. 3).
  const bool ends = pp_rank_ == 0 || pp_rank_ == pp_size_ - 1;
  sync_->reduce_accumulated(ends ? ctx_->emb() : nullptr);
  // The loss lives on the last stage: broadcast it along the pipeline, average over DP.
  float loss = last ? static_cast<float>(loss_sum / static_cast<double>(m)) : 0.f;
  ctx_->pp()->broadcast(&loss, 1, DType::f32, pp_size_ - 1);
  r.loss = sync_->finish(loss);
  const double s1 = now_us();
  trace("gradient sync", -1, "comm", s0, s1);
  update(r);
  trace("optimizer", -1, "compute", s1, now_us());
  const double wall = secs(t0, Clock::now());
  // Measured bubble: the part of the step a stage spends not computing,
  // averaged over the stages of the pipeline.
  float idle = static_cast<float>(1.0 - compute / wall);
  ctx_->pp()->all_reduce(&idle, &idle, 1, DType::f32, comm::ReduceOp::avg);
  r.bubble = idle;
  finish_record(r, wall, sent0, recv0);
  return r;
}

void Trainer::trace(const char* what, int64_t index, const char* cat, double t0, double t1, int chunk) {
  if (!tracer_.enabled()) return;  // the name is built only when tracing
  std::string name = index < 0 ? std::string(what) : span_name(what, index);
  if (chunk >= 0 && model_->num_chunks() > 1) {
    name += ".c";
    name += std::to_string(chunk);
  }
  tracer_.span(std::move(name), cat, t0, t1);
}

float Trainer::pipeline_forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T, int micro,
                                int64_t micros) {
  // One micro-batch through the virtual stages, slot 0 of each chunk; the
  // loss (targets given) is the last stage's, 0 elsewhere.
  const int P = pp_size_, v = model_->num_chunks(), Q = P * v;
  const int prev = (pp_rank_ + P - 1) % P, next = (pp_rank_ + 1) % P;
  const size_t bytes = static_cast<size_t>(model_->boundary_rows(B, T) * model_->config().n_embd) * sizeof(float);
  float loss = 0;
  for (int c = 0; c < v; ++c) {
    const int q = c * P + pp_rank_;
    model_->set_slot(0, c);
    if (q > 0) ctx_->pp()->recv(model_->stage_input(), bytes, prev, act_tag(q, micro, micros));
    const float l = model_->forward(q == 0 ? tokens : nullptr, q == Q - 1 ? targets : nullptr, B, T);
    if (q == Q - 1) loss = l;
    if (q < Q - 1) ctx_->pp()->send(model_->stage_output(), bytes, next, act_tag(q + 1, micro, micros));
  }
  return loss;
}

float Trainer::pipeline_evaluate_batch(const size_t* offsets, int64_t micro_count, const uint16_t* stream) {
  // Forward only, one micro-batch after another through the (virtual) stages.
  const int64_t B = opt_.micro_batch, T = opt_.seq_len;
  const bool first = model_->is_first_stage(), last = model_->is_last_stage();
  double sum = 0;
  for (int64_t j = 0; j < micro_count; ++j) {
    if (first || last)
      gather_batch(stream, offsets + j * B, B, T, tokens_.as<int32_t>(), targets_.as<int32_t>());
    sum += pipeline_forward(tokens_.as<int32_t>(), targets_.as<int32_t>(), B, T, static_cast<int>(j), micro_count);
  }
  float loss = last ? static_cast<float>(sum) : 0.f;
  ctx_->pp()->broadcast(&loss, 1, DType::f32, pp_size_ - 1);
  return loss;
}

}  // namespace braid::train
