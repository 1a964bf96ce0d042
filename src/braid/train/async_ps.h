// The asynchronous parameter server (the synchronous one is a GradSync:
// parallel/data_parallel/ps_sync.h): rank 0 holds the parameters and the AdamW
// state; workers (ranks 1..N-1) push gradients and pull parameters. The server
// applies each push as it arrives under a stale-synchronous bound (Ho et al.
// 2013): a worker may start iteration i only when every worker has finished
// iteration i - k - 1, so a gradient misses at most 2k+1 updates of each other
// worker. A stop signal (preemption.h) ends the run by the server's decision:
// workers report theirs in the push header, the server stops releasing them
// and marks each one's next reply as its last.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/train/run_log.h"

namespace braid::train {

class AsyncParameterServer {
 public:
  /// What the loop asks of the trainer.
  struct Hooks {
    /// Worker: iteration i's gradient into the gradient buffer; returns its loss.
    std::function<float(int64_t i)> gradient;
    /// Server: one update (number `version` + 1) with the gradient buffer at
    /// learning rate lr; returns the gradient norm.
    std::function<float(int64_t version, float lr)> apply;
    /// The learning rate of step s.
    std::function<float(int64_t s)> lr;
    /// Test hook: called with each step number (worker iterations, server rounds).
    std::function<void(int64_t s)> before_step;
    /// Fills a record's timing, throughput and traffic since (sent0, recv0).
    std::function<void(StepRecord& r, double seconds, uint64_t sent0, uint64_t recv0)> record;
  };

  /// params / grads: the model's f32 flat buffers (n elements), which must
  /// outlive the object; iters: iterations per worker; staleness: k >= 0.
  AsyncParameterServer(comm::Communicator& world, float* params, float* grads, size_t n, int64_t iters,
                       int64_t staleness);

  /// Runs from step `start` on every rank: a worker's records are its
  /// iterations, the server's its rounds of W updates. Afterwards every rank
  /// holds the server's final parameters. Collective over the world.
  std::vector<StepRecord> run(int64_t start, const Hooks& h);
  /// After run(): the step a stop signal ended it at (rounds of W updates
  /// completed) and the signal, or -1 and 0.
  int64_t stopped_at() const { return stopped_at_; }
  int ending_signal() const { return stop_signal_; }

 private:
  struct Server;
  std::vector<StepRecord> run_worker(int64_t start, const Hooks& h);
  std::vector<StepRecord> run_server(int64_t start, const Hooks& h);
  /// Server: applies the push of worker w that has arrived.
  void take_push(Server& s, int w, const Hooks& h, std::vector<StepRecord>& out);
  /// Server: replies to the waiting workers the bound lets go on (all of them once stopping).
  bool release_workers(Server& s, const Hooks& h);

  comm::Communicator& world_;
  float* params_;
  float* grads_;
  size_t n_;
  int64_t iters_, staleness_;
  int W_;
  int64_t stopped_at_ = -1;
  int stop_signal_ = 0;
};

}  // namespace braid::train
