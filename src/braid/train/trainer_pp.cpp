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
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

void Trainer::sync_tied_embedding() {
  // wte is used by the embedding on the first stage and by the head on the
  // last; each stage holds a copy, and the copies get the sum of both
  // gradients, so they stay bitwise equal (Shoeybi et al. 2019, sec. 3).
  // Under mixed precision the engine holds the (DP-reduced) half gradients.
  if (pp_size_ == 1 || !(pp_rank_ == 0 || pp_rank_ == pp_size_ - 1)) return;
  if (engine_) {
    engine_->sum_unit_grads(0, *ctx_->emb());
    return;
  }
  const size_t n0 = model_->unit_end(0);
  ctx_->emb()->all_reduce(model_->grads(), model_->grads(), n0, DType::f32, comm::ReduceOp::sum);
}

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
  if (engine_) {
    // Mixed precision: the engine accumulates the half gradients and reduces
    // them once, after this stage's last backward.
    engine_->begin_step();
    engine_->set_sync(false);
  } else {
    model_->zero_grad();
  }
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
      if (engine_ && i == last_b[static_cast<size_t>(c)] && opt_.inject_inf_rank == world_.rank() &&
          opt_.inject_inf_step == step)
        engine_->inject_inf_once();
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
  if (engine_) {
    engine_->reduce_accumulated();
    engine_->finish_grads();
    sync_tied_embedding();
  } else {
    sync_tied_embedding();
    if (zero_) {
      zero_->begin_sync();
      zero_->on_ready(0, model_->num_params());
      zero_->finish_sync();
    } else {
      ddp_->begin_sync();
      ddp_->on_ready(0, model_->num_params());
      ddp_->finish_sync();
    }
  }
  // The loss lives on the last stage: broadcast it along the pipeline, average over DP.
  float loss = last ? static_cast<float>(loss_sum / static_cast<double>(m)) : 0.f;
  ctx_->pp()->broadcast(&loss, 1, DType::f32, pp_size_ - 1);
  if (dp_size_ > 1) ctx_->dp().all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);
  BRAID_CONFIG_CHECK(std::isfinite(loss), "the loss became ", loss, " at step ", step,
                     "; training diverged: lower --lr (now ", opt_.lr, ") or raise --warmup");
  r.loss = loss;
  const double s1 = now_us();
  trace("gradient sync", -1, "comm", s0, s1);
  if (engine_) {
    engine_update(r);
  } else {
    r.grad_norm = clip_and_norm();
    r.lr = sched_.at(step);
    adamw(r.lr, step + 1);
  }
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
  if (opt_.trace_out.empty()) return;  // the name is built only when tracing
  std::string name = index < 0 ? std::string(what) : span_name(what, index);
  if (chunk >= 0 && model_->num_chunks() > 1) {
    name += ".c";
    name += std::to_string(chunk);
  }
  trace_.push_back({std::move(name), cat, t0 - trace_origin_, t1 - t0});
}

void Trainer::write_trace() {
  if (opt_.trace_out.empty()) return;
  // Every rank serialises its spans (pid = world rank, tid = 0) with its start
  // on rank 0's clock; rank 0 receives them in rank order, shifts each rank's
  // spans by its start and writes one file (rename: atomic).
  nlohmann::json events = nlohmann::json::array();
  for (const auto& e : trace_)
    events.push_back({{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"ts", e.ts}, {"dur", e.dur},
                      {"pid", world_.rank()}, {"tid", 0}});
  nlohmann::json mine = {{"start_us", trace_origin_ + trace_clock_.offset_us},
                         {"offset_us", trace_clock_.offset_us},
                         {"error_us", trace_clock_.error_us},
                         {"events", std::move(events)}};
  if (world_.rank() != 0) {
    const std::string text = mine.dump();
    const uint64_t len = text.size();
    world_.send(&len, sizeof len, 0, 7001);
    world_.send(text.data(), len, 0, 7002);
    return;
  }
  std::vector<nlohmann::json> ranks{std::move(mine)};
  for (int q = 1; q < world_.size(); ++q) {
    uint64_t len = 0;
    world_.recv(&len, sizeof len, q, 7001);
    std::string buf(len, '\0');
    world_.recv(buf.data(), len, q, 7002);
    ranks.push_back(nlohmann::json::parse(buf));
  }
  // Time zero is the earliest start over the ranks, on rank 0's clock.
  double base = ranks[0]["start_us"].get<double>();
  for (const auto& r : ranks) base = std::min(base, r["start_us"].get<double>());
  nlohmann::json all = nlohmann::json::array(), offsets = nlohmann::json::array(), errors = nlohmann::json::array();
  double max_error = 0;
  for (auto& r : ranks) {
    const double shift = r["start_us"].get<double>() - base;
    for (auto& e : r["events"]) {
      e["ts"] = e["ts"].get<double>() + shift;
      all.push_back(std::move(e));
    }
    offsets.push_back(r["offset_us"]);
    errors.push_back(r["error_us"]);
    max_error = std::max(max_error, r["error_us"].get<double>());
  }
  for (int q = 0; q < world_.size(); ++q) {
    all.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", q},
                   {"args", {{"name", span_name("rank ", q)}}}});
  }
  // otherData: the trace format's free-form metadata.
  const nlohmann::json meta = {{"clock", "steady clock of rank 0"},
                               {"clock_max_error_us", max_error},
                               {"clock_offset_us", offsets},
                               {"clock_error_us", errors}};
  const std::string tmp = opt_.trace_out + ".tmp";
  {
    std::ofstream f(tmp);
    f << nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}, {"otherData", meta}}.dump();
    BRAID_CONFIG_CHECK(f.good(), "cannot write --trace-out ", opt_.trace_out);
  }
  std::filesystem::rename(tmp, opt_.trace_out);
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
