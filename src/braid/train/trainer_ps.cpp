// The asynchronous parameter server (the synchronous one is a GradSync:
// parallel/data_parallel/ps_sync.h): rank 0 holds the parameters and the AdamW
// state; workers (ranks 1..N-1) push gradients and pull parameters. It applies
// each push as it arrives under a stale-synchronous bound (Ho et al. 2013): a
// worker may start iteration i only when every worker has finished iteration
// i - k - 1, so a gradient misses at most 2k+1 updates of each other worker.
// A stop signal (preemption.h) ends an asynchronous run by the server's
// decision: workers report theirs in the push header, the server stops
// releasing them and marks each one's next reply as its last.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "braid/core/error.h"
#include "braid/train/preemption.h"
#include "braid/parallel/data_parallel/ps_sync.h"
#include "braid/train/trainer.h"

namespace braid::train {

namespace {
using Clock = std::chrono::steady_clock;
using parallel::kTagPullHeader, parallel::kTagPullParams, parallel::kTagPushGrads, parallel::kTagPushHeader;
using parallel::PullHeader, parallel::PushHeader;
}  // namespace

void Trainer::ps_apply(float lr, int64_t t, StepRecord& r) {
  r.grad_norm = static_cast<float>(std::sqrt(optimizer_->global_grad_sumsq(*sync_, 1.0f, 0)));
  r.lr = lr;
  optimizer_->step(*sync_, lr, clip_coef(r.grad_norm), t);
}

std::vector<StepRecord> Trainer::run_ps_async() {
  const size_t n = model_->num_params();
  const size_t bytes = n * sizeof(float);
  const int W = dp_size_;
  const int64_t iters = opt_.steps;  // per worker; the server applies W * steps updates
  std::vector<StepRecord> out;
  if (world_.rank() != 0) {
    PullHeader pull{};
    world_.recv(&pull, sizeof pull, 0, kTagPullHeader);
    world_.recv(model_->params(), bytes, 0, kTagPullParams);
    for (int64_t i = start_step_; i < iters; ++i) {
      const auto t0 = Clock::now();
      const uint64_t sent0 = world_.bytes_sent(), recv0 = world_.bytes_received();
      maybe_inject_failure(i);
      sync_->begin_step(i);
      const float loss = static_cast<float>(forward_backward(i));
      PushHeader h{pull.version, i, loss, stop_signal()};
      world_.send(&h, sizeof h, 0, kTagPushHeader);
      world_.send(model_->grads(), bytes, 0, kTagPushGrads);
      world_.recv(&pull, sizeof pull, 0, kTagPullHeader);
      world_.recv(model_->params(), bytes, 0, kTagPullParams);
      StepRecord r;
      r.step = i;
      r.loss = loss;
      r.grad_norm = pull.grad_norm;
      r.lr = pull.lr;
      const bool check = opt_.check_replicas;
      opt_.check_replicas = false;  // replicas differ while running asynchronously
      finish_record(r, std::chrono::duration<double>(Clock::now() - t0).count(), sent0, recv0);
      opt_.check_replicas = check;
      out.push_back(r);
      if (pull.stop) break;
    }
  } else {
    // Server: every worker starts from the same weights.
    int64_t version = start_step_ * W;
    PullHeader pull{version, 0.f, 0.f, sched_.at(start_step_), 0};
    for (int w = 1; w <= W; ++w) {
      world_.send(&pull, sizeof pull, w, kTagPullHeader);
      world_.send(model_->params(), bytes, w, kTagPullParams);
    }
    std::vector<int64_t> done(static_cast<size_t>(W + 1), start_step_);  // iterations pushed
    std::vector<bool> waiting(static_cast<size_t>(W + 1), false);        // pushed, no reply yet
    std::vector<PushHeader> hdr(static_cast<size_t>(W + 1));
    std::vector<comm::WorkPtr> pending(static_cast<size_t>(W + 1));
    std::vector<bool> active(static_cast<size_t>(W + 1), start_step_ < iters);  // awaits a reply
    for (int w = 1; w <= W; ++w) {
      if (start_step_ < iters) pending[static_cast<size_t>(w)] = world_.irecv(&hdr[static_cast<size_t>(w)], sizeof(PushHeader), w, kTagPushHeader);
    }
    int stop = 0;  // the stop signal of the server or of a worker, once one arrived
    StepRecord round;  // one record per W updates
    double round_loss = 0;
    int64_t round_count = 0, stale_max = 0;
    auto t_round = Clock::now();
    uint64_t sent0 = world_.bytes_sent(), recv0 = world_.bytes_received();
    auto any_active = [&] { return std::find(active.begin() + 1, active.end(), true) != active.end(); };
    while (any_active()) {
      bool progressed = false;
      for (int w = 1; w <= W; ++w) {
        auto& p = pending[static_cast<size_t>(w)];
        if (!p || !p->test()) continue;
        p->wait();
        p.reset();
        progressed = true;
        if (version % W == 0) maybe_inject_failure(version / W);  // the server's round
        const PushHeader h = hdr[static_cast<size_t>(w)];
        if (stop == 0) stop = h.stop;
        world_.recv(model_->grads(), bytes, w, kTagPushGrads);
        BRAID_CONFIG_CHECK(std::isfinite(h.loss), "the loss became ", h.loss, " on worker ", w,
                           " at iteration ", h.iteration, "; training diverged: lower --lr");
        const int64_t stale = version - h.version;
        stale_max = std::max(stale_max, stale);
        StepRecord r;
        ps_apply(sched_.at(version / W), version + 1, r);
        ++version;
        ++done[static_cast<size_t>(w)];
        waiting[static_cast<size_t>(w)] = true;
        round_loss += h.loss;
        round.grad_norm = r.grad_norm;
        round.lr = r.lr;
        if (++round_count == W) {
          round.step = version / W - 1;
          round.loss = static_cast<float>(round_loss / W);
          round.staleness_max = stale_max;
          const bool check = opt_.check_replicas;
          opt_.check_replicas = false;
          finish_record(round, std::chrono::duration<double>(Clock::now() - t_round).count(), sent0, recv0);
          opt_.check_replicas = check;
          out.push_back(round);
          round = StepRecord{};
          round_loss = 0;
          round_count = 0;
          stale_max = 0;
          t_round = Clock::now();
          sent0 = world_.bytes_sent();
          recv0 = world_.bytes_received();
        }
      }
      if (stop == 0) stop = stop_signal();
      // Release waiting workers whose next iteration respects the bound; once
      // stopping, release every worker with its last reply.
      int64_t slowest = iters;
      for (int w = 1; w <= W; ++w) slowest = std::min(slowest, done[static_cast<size_t>(w)]);
      for (int w = 1; w <= W; ++w) {
        if (!waiting[static_cast<size_t>(w)]) continue;
        const int64_t next = done[static_cast<size_t>(w)];  // the iteration it would start
        if (stop == 0 && next < iters && next - slowest > opt_.staleness) continue;
        waiting[static_cast<size_t>(w)] = false;
        pull = {version, hdr[static_cast<size_t>(w)].loss, round.grad_norm, sched_.at(version / W), stop};
        world_.send(&pull, sizeof pull, w, kTagPullHeader);
        world_.send(model_->params(), bytes, w, kTagPullParams);
        progressed = true;
        if (next < iters && stop == 0) {
          pending[static_cast<size_t>(w)] = world_.irecv(&hdr[static_cast<size_t>(w)], sizeof(PushHeader), w, kTagPushHeader);
        } else {
          active[static_cast<size_t>(w)] = false;
        }
      }
      if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    // Stopped early: the step is the rounds of W updates completed (updates
    // past the last whole round stay in the weights).
    if (stop != 0 && version < iters * W) {
      stop_signal_ = stop;
      stopped_at_ = version / W;
    }
  }
  // Every rank ends with the server's final weights and knows how it ended.
  world_.broadcast(model_->params(), n, DType::f32, 0);
  int64_t ending[2] = {stopped_at_, stop_signal_};
  world_.broadcast(ending, 4, DType::f32, 0);  // bits copied, no arithmetic
  stopped_at_ = ending[0];
  stop_signal_ = static_cast<int>(ending[1]);
  return out;
}

}  // namespace braid::train
