#include "braid/parallel/pipeline/executor.h"

#include <chrono>
#include <cstring>

#include "braid/core/error.h"

namespace braid::parallel {

namespace {
using Clock = std::chrono::steady_clock;
double now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}
// Tags name the receiving virtual stage q and the micro-batch, so every
// message between two ranks is distinct.
int act_tag(int q, int micro, int m) { return 2 * (q * m + micro); }
int grad_tag(int q, int micro, int m) { return 2 * (q * m + micro) + 1; }
}  // namespace

// Per (chunk, micro-batch): its activation slot and the send of its output;
// per chunk the free slots; the gradient sends in flight, and per ring buffer
// the virtual stage and micro-batch of a gradient handed over locally (q < 0: none).
struct PipelineExecutor::Pass {
  StageModel& model;
  const SpanFn& span;
  std::vector<int64_t> slot_of;
  std::vector<comm::WorkPtr> act_send;
  std::vector<std::vector<int64_t>> free_slots;
  std::vector<comm::WorkPtr> grad_send;
  std::vector<std::pair<int, int>> local_grad;
  size_t grad_sends = 0;
  Result result;
  size_t id(int chunk, int micro, int m) const { return static_cast<size_t>(chunk * m + micro); }
  void trace(const char* what, int64_t index, const char* cat, double t0, double t1, int chunk) const {
    if (span) span(what, index, cat, t0, t1, chunk);
  }
};

PipelineExecutor::PipelineExecutor(StageProgram program, int P, int m, int v, comm::Communicator* pp,
                                   size_t boundary_bytes, MemoryLedger* ledger)
    : PipelineExecutor(std::move(program), StageMap(P, v), m, pp, boundary_bytes, ledger) {}

PipelineExecutor::PipelineExecutor(StageProgram program, const StageMap& map, int m, comm::Communicator* pp,
                                   size_t boundary_bytes, MemoryLedger* ledger)
    : program_(std::move(program)), map_(map), P_(map.P()), m_(m), v_(map.v()), rank_(pp ? pp->rank() : 0), pp_(pp),
      bytes_(boundary_bytes) {
  BRAID_CHECK(P_ == 1 || pp, "a pipeline of ", P_, " stages needs its group");
  const size_t ring = grad_ring_bytes(P_, v_, rank_, boundary_bytes);
  if (ring) ring_ = Buffer(ring, MemCategory::comm, ledger);
  // Sums over a group (TP's sequence-parallel gradients) run once per chunk:
  // in its last input-gradient pass and its last weight pass.
  last_b_.assign(static_cast<size_t>(v_), SIZE_MAX);
  last_w_.assign(static_cast<size_t>(v_), SIZE_MAX);
  for (size_t i = 0; i < program_.size(); ++i) {
    const auto op = program_[i].op;
    const size_t c = static_cast<size_t>(program_[i].chunk);
    if (op == PipeOp::backward_weight) {
      last_w_[c] = i;
    } else if (op != PipeOp::forward) {
      last_b_[c] = i;
      if (op == PipeOp::backward) last_w_[c] = i;
    }
  }
}

size_t PipelineExecutor::grad_ring_bytes(int P, int v, int stage, size_t boundary_bytes) {
  return P > 1 && (stage > 0 || v > 1) ? static_cast<size_t>(kGradSendBuffers) * boundary_bytes : 0;
}

PipelineExecutor::Result PipelineExecutor::run(StageModel& model, const SpanFn& span) {
  Pass s{model, span, {}, {}, {}, {}, {}, 0, {}};
  s.slot_of.assign(static_cast<size_t>(v_ * m_), -1);
  s.act_send.resize(static_cast<size_t>(v_ * m_));
  s.free_slots.resize(static_cast<size_t>(v_));
  for (int c = 0; c < v_; ++c)
    for (int64_t k = model.chunk_slots(c) - 1; k >= 0; --k) s.free_slots[static_cast<size_t>(c)].push_back(k);
  // Gradients leave from a ring of send buffers (the checker proved this ring
  // cannot deadlock the tables even when every send waits for its receive).
  s.grad_send.resize(static_cast<size_t>(kGradSendBuffers));
  s.local_grad.assign(static_cast<size_t>(kGradSendBuffers), {-1, 0});
  for (size_t i = 0; i < program_.size(); ++i) {
    if (program_[i].op == PipeOp::forward) {
      run_forward(s, program_[i]);
    } else {
      run_backward(s, program_[i], i);
    }
  }
  for (auto& w : s.grad_send)
    if (w) w->wait();
  return s.result;
}

float PipelineExecutor::forward_only(StageModel& model, int micro, int micros) {
  const size_t bytes = model.boundary_bytes();
  const int Q = map_.Q();
  float loss = 0;
  // A rank's chunks hold increasing virtual stages: visiting them in order
  // follows the activation through the pipeline.
  for (int c = 0; c < v_; ++c) {
    const int q = map_.stage(rank_, c);
    if (q > 0 && map_.rank_of(q - 1) == rank_) {
      model.set_slot(0, map_.chunk_of(q - 1));
      const void* out = model.stage_output();
      model.set_slot(0, c);
      std::memcpy(model.stage_input(), out, bytes);
    } else {
      model.set_slot(0, c);
      if (q > 0) pp_->recv(model.stage_input(), bytes, map_.rank_of(q - 1), act_tag(q, micro, micros));
    }
    const float l = model.forward(micro, q == 0, q == Q - 1);
    if (q == Q - 1) loss = l;
    if (q < Q - 1 && map_.rank_of(q + 1) != rank_)
      pp_->send(model.stage_output(), bytes, map_.rank_of(q + 1), act_tag(q + 1, micro, micros));
  }
  return loss;
}

// The input of virtual stage q > 0: received, or copied from the output of
// q-1 on this rank (still in its slot: its backward comes after this forward's).
void PipelineExecutor::receive_activation(Pass& s, int q, int j, int64_t slot, int c) {
  if (map_.rank_of(q - 1) == rank_) {
    const int pc = map_.chunk_of(q - 1);
    s.model.set_slot(s.slot_of[s.id(pc, j, m_)], pc);
    const void* out = s.model.stage_output();
    s.model.set_slot(slot, c);
    std::memcpy(s.model.stage_input(), out, bytes_);
    return;
  }
  pp_->recv(s.model.stage_input(), bytes_, map_.rank_of(q - 1), act_tag(q, j, m_));
}

void PipelineExecutor::run_forward(Pass& s, const PipeAction& a) {
  const int j = a.micro, c = a.chunk, q = map_.stage(rank_, c), Q = map_.Q();
  auto& fs = s.free_slots[static_cast<size_t>(c)];
  BRAID_CHECK(!fs.empty(), "pipeline: no free activation slot for micro-batch ", j, " on chunk ", c);
  const int64_t slot = fs.back();
  fs.pop_back();
  s.slot_of[s.id(c, j, m_)] = slot;
  s.model.set_slot(slot, c);
  const double w0 = now_us();
  if (q > 0) receive_activation(s, q, j, slot, c);
  const double f0 = now_us();
  if (q > 0) s.trace("recv activation ", j, "comm", w0, f0, c);
  const float loss = s.model.forward(j, q == 0, q == Q - 1);
  const double f1 = now_us();
  s.result.compute_s += (f1 - f0) * 1e-6;
  s.trace("F", j, "compute", f0, f1, c);
  if (q == Q - 1) s.result.loss_sum += loss;
  if (q < Q - 1 && map_.rank_of(q + 1) != rank_)
    s.act_send[s.id(c, j, m_)] =
        pp_->isend(s.model.stage_output(), bytes_, map_.rank_of(q + 1), act_tag(q + 1, j, m_));
}

// d(output) of virtual stage q < Q-1: received, or taken out of the ring
// buffer where this rank's backward of q+1 left it.
void PipelineExecutor::receive_gradient(Pass& s, int q, int j) {
  if (map_.rank_of(q + 1) != rank_) {
    pp_->recv(s.model.boundary_grad(), bytes_, map_.rank_of(q + 1), grad_tag(q, j, m_));
    return;
  }
  for (size_t k = 0; k < s.local_grad.size(); ++k) {
    if (s.local_grad[k] != std::make_pair(q, j)) continue;
    std::memcpy(s.model.boundary_grad(), ring_.as<char>() + k * bytes_, bytes_);
    s.local_grad[k] = {-1, 0};
    return;
  }
  BRAID_CHECK(false, "pipeline: the gradient of virtual stage ", q, " micro-batch ", j, " was not handed over");
}

// d(input) of virtual stage q > 0 leaves from the next ring buffer once its
// previous send is done (or its local hand-off taken).
void PipelineExecutor::send_gradient(Pass& s, int q, int j) {
  const size_t k = s.grad_sends++ % s.grad_send.size();
  if (s.grad_send[k]) s.grad_send[k]->wait();
  s.grad_send[k].reset();
  BRAID_CHECK(s.local_grad[k].first < 0, "pipeline: gradient send buffer ", k, " still holds the gradient of "
              "virtual stage ", s.local_grad[k].first, " (a schedule the checker would refuse)");
  char* buf = ring_.as<char>() + k * bytes_;
  std::memcpy(buf, s.model.boundary_grad(), bytes_);
  if (map_.rank_of(q - 1) == rank_) {
    s.local_grad[k] = {q - 1, j};
  } else {
    s.grad_send[k] = pp_->isend(buf, bytes_, map_.rank_of(q - 1), grad_tag(q - 1, j, m_));
  }
}

void PipelineExecutor::run_backward(Pass& s, const PipeAction& a, size_t i) {
  const int j = a.micro, c = a.chunk, q = map_.stage(rank_, c), Q = map_.Q();
  const size_t id = s.id(c, j, m_);
  s.model.set_slot(s.slot_of[id], c);
  if (a.op == PipeOp::backward_weight) {
    const double w0 = now_us();
    s.model.backward(j, a.op, i == last_w_[static_cast<size_t>(c)]);
    const double w1 = now_us();
    s.result.compute_s += (w1 - w0) * 1e-6;
    s.trace("W", j, "compute", w0, w1, c);
    s.free_slots[static_cast<size_t>(c)].push_back(s.slot_of[id]);
    return;
  }
  const bool full = a.op == PipeOp::backward;
  const double w0 = now_us();
  if (q < Q - 1) receive_gradient(s, q, j);
  const double b0 = now_us();
  if (q < Q - 1) s.trace("recv gradient ", j, "comm", w0, b0, c);
  s.model.backward(j, a.op, i == last_b_[static_cast<size_t>(c)]);
  const double b1 = now_us();
  s.result.compute_s += (b1 - b0) * 1e-6;
  s.trace(full ? "B" : "Bi", j, "compute", b0, b1, c);
  if (q > 0) send_gradient(s, q, j);
  // The next stage returned this gradient, so it has the activation: the send is done.
  if (s.act_send[id]) s.act_send[id]->wait();
  s.act_send[id].reset();
  if (full) s.free_slots[static_cast<size_t>(c)].push_back(s.slot_of[id]);
}

}  // namespace braid::parallel
