#include "braid/core/stopwatch.h"
#include "braid/train/async_ps.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "braid/core/error.h"
#include "braid/parallel/data_parallel/ps_sync.h"
#include "braid/train/preemption.h"

namespace braid::train {

namespace {
using Clock = std::chrono::steady_clock;
using parallel::kTagPullHeader, parallel::kTagPullParams, parallel::kTagPushGrads, parallel::kTagPushHeader;
using parallel::PullHeader, parallel::PushHeader;
}  // namespace

// The server's bookkeeping, per worker w in 1..W (index 0 unused). Pending
// receives are withdrawn if an exception unwinds the loop.
struct AsyncParameterServer::Server {
  int64_t version = 0;                 // updates applied
  std::vector<int64_t> done;           // iterations pushed
  std::vector<bool> waiting, active;   // pushed with no reply yet; still expects a reply
  std::vector<PushHeader> hdr;
  std::vector<comm::WorkPtr> pending;  // the next push header's receive
  int stop = 0;                        // the stop signal of the server or of a worker
  StepRecord round;                    // one record per W updates
  double round_loss = 0;
  int64_t round_count = 0, stale_max = 0;
  Clock::time_point t_round = Clock::now();
  uint64_t sent0 = 0, recv0 = 0;
};

AsyncParameterServer::AsyncParameterServer(comm::Communicator& world, float* params, float* grads, size_t n,
                                           int64_t iters, int64_t staleness)
    : world_(world), params_(params), grads_(grads), n_(n), iters_(iters), staleness_(staleness),
      W_(world.size() - 1) {}

std::vector<StepRecord> AsyncParameterServer::run(int64_t start, const Hooks& h) {
  auto out = world_.rank() == 0 ? run_server(start, h) : run_worker(start, h);
  // Every rank ends with the server's final weights and knows how it ended.
  world_.broadcast(params_, n_, DType::f32, 0);
  int64_t ending[2] = {stopped_at_, stop_signal_};
  world_.broadcast(ending, 4, DType::f32, 0);  // bits copied, no arithmetic
  stopped_at_ = ending[0];
  stop_signal_ = static_cast<int>(ending[1]);
  return out;
}

std::vector<StepRecord> AsyncParameterServer::run_worker(int64_t start, const Hooks& h) {
  const size_t bytes = n_ * sizeof(float);
  std::vector<StepRecord> out;
  PullHeader pull{};
  world_.recv(&pull, sizeof pull, 0, kTagPullHeader);
  world_.recv(params_, bytes, 0, kTagPullParams);
  for (int64_t i = start; i < iters_; ++i) {
    const auto t0 = Clock::now();
    const uint64_t sent0 = world_.bytes_sent(), recv0 = world_.bytes_received();
    h.before_step(i);
    const float loss = h.gradient(i);
    const PushHeader push{pull.version, i, loss, stop_signal()};
    world_.send(&push, sizeof push, 0, kTagPushHeader);
    world_.send(grads_, bytes, 0, kTagPushGrads);
    world_.recv(&pull, sizeof pull, 0, kTagPullHeader);
    world_.recv(params_, bytes, 0, kTagPullParams);
    StepRecord r;
    r.step = i;
    r.loss = loss;
    r.grad_norm = pull.grad_norm;
    r.lr = pull.lr;
    h.record(r, seconds_since(t0), sent0, recv0);
    out.push_back(r);
    if (pull.stop) break;
  }
  return out;
}

std::vector<StepRecord> AsyncParameterServer::run_server(int64_t start, const Hooks& h) {
  const size_t W = static_cast<size_t>(W_);
  Server s;
  s.version = start * W_;
  s.done.assign(W + 1, start);
  s.waiting.assign(W + 1, false);
  s.active.assign(W + 1, start < iters_);
  s.hdr.resize(W + 1);
  s.pending.resize(W + 1);
  // Every worker starts from the same weights.
  const PullHeader pull{s.version, 0.f, 0.f, h.lr(start), 0};
  for (int w = 1; w <= W_; ++w) {
    world_.send(&pull, sizeof pull, w, kTagPullHeader);
    world_.send(params_, n_ * sizeof(float), w, kTagPullParams);
    if (start < iters_) s.pending[size_t(w)] = world_.irecv(&s.hdr[size_t(w)], sizeof(PushHeader), w, kTagPushHeader);
  }
  s.sent0 = world_.bytes_sent();
  s.recv0 = world_.bytes_received();
  std::vector<StepRecord> out;
  while (std::find(s.active.begin() + 1, s.active.end(), true) != s.active.end()) {
    bool progressed = false;
    for (int w = 1; w <= W_; ++w) {
      auto& p = s.pending[size_t(w)];
      if (!p || !p->test()) continue;
      p->wait();
      p.reset();
      progressed = true;
      take_push(s, w, h, out);
    }
    if (s.stop == 0) s.stop = stop_signal();  // this process's signal (preemption.h)
    progressed |= release_workers(s, h);
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // Stopped early: the step is the rounds of W updates completed (updates
  // past the last whole round stay in the weights).
  if (s.stop != 0 && s.version < iters_ * W_) {
    stop_signal_ = s.stop;
    stopped_at_ = s.version / W_;
  }
  return out;
}

void AsyncParameterServer::take_push(Server& s, int w, const Hooks& h, std::vector<StepRecord>& out) {
  if (s.version % W_ == 0) h.before_step(s.version / W_);  // the server's round
  const PushHeader push = s.hdr[size_t(w)];
  if (s.stop == 0) s.stop = push.stop;
  world_.recv(grads_, n_ * sizeof(float), w, kTagPushGrads);
  BRAID_CONFIG_CHECK(std::isfinite(push.loss), "the loss became ", push.loss, " on worker ", w, " at iteration ",
                     push.iteration, "; training diverged: lower --lr");
  s.stale_max = std::max(s.stale_max, s.version - push.version);
  const float lr = h.lr(s.version / W_);
  s.round.grad_norm = h.apply(s.version, lr);
  s.round.lr = lr;
  ++s.version;
  ++s.done[size_t(w)];
  s.waiting[size_t(w)] = true;
  s.round_loss += push.loss;
  if (++s.round_count < W_) return;
  s.round.step = s.version / W_ - 1;
  s.round.loss = static_cast<float>(s.round_loss / W_);
  s.round.staleness_max = s.stale_max;
  h.record(s.round, seconds_since(s.t_round), s.sent0, s.recv0);
  out.push_back(s.round);
  s.round = StepRecord{};
  s.round_loss = 0;
  s.round_count = 0;
  s.stale_max = 0;
  s.t_round = Clock::now();
  s.sent0 = world_.bytes_sent();
  s.recv0 = world_.bytes_received();
}

bool AsyncParameterServer::release_workers(Server& s, const Hooks& h) {
  int64_t slowest = iters_;
  for (int w = 1; w <= W_; ++w) slowest = std::min(slowest, s.done[size_t(w)]);
  bool released = false;
  for (int w = 1; w <= W_; ++w) {
    if (!s.waiting[size_t(w)]) continue;
    const int64_t next = s.done[size_t(w)];  // the iteration it would start
    if (s.stop == 0 && next < iters_ && next - slowest > staleness_) continue;
    s.waiting[size_t(w)] = false;
    const PullHeader pull{s.version, s.hdr[size_t(w)].loss, s.round.grad_norm, h.lr(s.version / W_), s.stop};
    world_.send(&pull, sizeof pull, w, kTagPullHeader);
    world_.send(params_, n_ * sizeof(float), w, kTagPullParams);
    released = true;
    if (next < iters_ && s.stop == 0) {
      s.pending[size_t(w)] = world_.irecv(&s.hdr[size_t(w)], sizeof(PushHeader), w, kTagPushHeader);
    } else {
      s.active[size_t(w)] = false;
    }
  }
  return released;
}

}  // namespace braid::train
