// Classic parameter-server data parallelism (Li et al. 2014, "Scaling
// Distributed Machine Learning with the Parameter Server"), synchronous: rank 0
// holds the parameters and the optimizer; workers (ranks 1..N-1) push their
// gradients and pull the parameters. The server sums the W pushes in worker
// order and divides once: the same run as DDP with W ranks. The asynchronous
// mode is a loop of its own (the trainer's run_ps_async) over the same messages.
#pragma once
#include <cstdint>

#include "braid/core/memory.h"
#include "braid/parallel/data_parallel/grad_sync.h"

namespace braid::parallel {

constexpr int kTagPushHeader = 7101, kTagPushGrads = 7102, kTagPullHeader = 7103, kTagPullParams = 7104;

/// A worker's push: its gradient follows (num_params f32).
struct PushHeader {
  int64_t version;  // server version of the weights the gradient was computed on
  int64_t iteration;
  float loss;
  int32_t stop;  // async: the stop signal this worker received, or 0
};
/// The server's reply: the parameters follow (num_params f32).
struct PullHeader {
  int64_t version;
  float loss;  // mean loss of the step (sync) or of the last update (async)
  float grad_norm;
  float lr;
  int32_t stop;  // async: the run ends by this signal; the worker's last reply
};

class ParameterServerSync final : public FlatBufferSync {
 public:
  /// world: rank 0 serves, the others work; must outlive this object.
  ParameterServerSync(comm::Communicator& world, MemoryLedger* ledger);
  ~ParameterServerSync() override;

  void attach(model::GPT& model) override;
  void begin_step(int64_t step) override;
  GradReadyHook backward_hook(bool) override { return {}; }
  std::string transport() const override { return "messages (to and from the parameter server)"; }
  /// Throws braid::Error: a parameter server runs without a pipeline.
  void reduce_accumulated(comm::Communicator* tied) override;
  /// Worker: pushes its gradient and loss, returns its own loss (the server's
  /// mean arrives with the pull). Server: the mean of the pushes.
  float finish(float local_loss) override;
  /// Server: sends the scalars and the parameters to every worker. Worker:
  /// receives them (s takes the server's loss, norm and learning rate).
  void after_update(StepScalars& s) override;

  bool computes() const override { return world_.rank() != 0; }
  const std::vector<OwnedRange>& owned() const override { return owned_; }
  size_t state_elems() const override { return owned_.empty() ? 0 : owned_[0].len; }
  bool counts_in_norm() const override { return world_.rank() == 0; }
  comm::Communicator* norm_group() override { return nullptr; }


 private:
  comm::Communicator& world_;
  MemoryLedger* ledger_;
  std::vector<OwnedRange> owned_;
  Buffer recv_;  // server: (num_params) f32, one pushed gradient
  int64_t step_ = 0;
};

}  // namespace braid::parallel
