#include "braid/parallel/data_parallel/ps_sync.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/hash.h"
#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/registry.h"

namespace braid::parallel {

ParameterServerSync::ParameterServerSync(comm::Communicator& world, MemoryLedger* ledger)
    : world_(world), ledger_(ledger) {}

ParameterServerSync::~ParameterServerSync() = default;

void ParameterServerSync::attach(model::GPT& model) {
  FlatBufferSync::attach(model);
  const size_t n = model.num_params();
  if (world_.rank() == 0) {
    owned_.push_back({0, n, 0});  // the server updates everything
    recv_ = Buffer(n * sizeof(float), MemCategory::comm, ledger_);
  }
}

void ParameterServerSync::begin_step(int64_t step) {
  step_ = step;
  model_->zero_grad();
}

void ParameterServerSync::reduce_accumulated(comm::Communicator*) {
  BRAID_CHECK(false, "a parameter server runs without pipeline parallelism");
}

float ParameterServerSync::finish(float local_loss) {
  const size_t n = model_->num_params();
  const size_t bytes = n * sizeof(float);
  if (world_.rank() != 0) {
    const PushHeader h{step_, step_, local_loss, 0};
    world_.send(&h, sizeof h, 0, kTagPushHeader);
    world_.send(model_->grads(), bytes, 0, kTagPushGrads);
    return local_loss;
  }
  // Sum the pushes in worker order (deterministic), then divide once, as the
  // ring's average does (divide, not multiply by 1/W).
  float* acc = model_->grads();
  float loss_sum = 0;
  for (int w = 1; w < world_.size(); ++w) {
    PushHeader h{};
    world_.recv(&h, sizeof h, w, kTagPushHeader);
    float* dst = w == 1 ? acc : recv_.as<float>();
    world_.recv(dst, bytes, w, kTagPushGrads);
    if (w > 1) {
      const float* g = recv_.as<float>();
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < n; ++i) acc[i] += g[i];
    }
    loss_sum += h.loss;
  }
  const float W = static_cast<float>(world_.size() - 1);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) acc[i] /= W;
  return static_cast<float>(loss_sum) / W;
}

void ParameterServerSync::after_update(StepScalars& s) {
  const size_t bytes = model_->num_params() * sizeof(float);
  PullHeader pull{s.step + 1, s.loss, s.grad_norm, s.lr, 0};
  if (world_.rank() == 0) {
    for (int w = 1; w < world_.size(); ++w) {
      world_.send(&pull, sizeof pull, w, kTagPullHeader);
      world_.send(model_->params(), bytes, w, kTagPullParams);
    }
    return;
  }
  world_.recv(&pull, sizeof pull, 0, kTagPullHeader);
  world_.recv(model_->params(), bytes, 0, kTagPullParams);
  s.loss = pull.loss;
  s.grad_norm = pull.grad_norm;
  s.lr = pull.lr;
}


// ---- the mode this class runs ----

namespace {

void validate_parameter_server(const DataParallelFlags& f) {
  BRAID_CONFIG_CHECK(f.world >= 2, "--dp-mode ps needs at least 2 ranks (1 server + workers) but the job has ",
                     f.world, "; launch with mpirun -np 2 or more");
  BRAID_CONFIG_CHECK(f.zero == 0, "--zero ", f.zero, " shards over DP ranks, but with "
                     "--dp-mode ps the server holds the optimizer; use --zero 0");
  BRAID_CONFIG_CHECK(f.precision == "fp32" && !f.fsdp, "--dp-mode ps runs in fp32 "
                     "without sharding; drop ", f.fsdp ? "--fsdp" : "--precision " + f.precision);
  BRAID_CONFIG_CHECK(f.tp == 1, "--dp-mode ps runs without tensor parallelism; drop --tp ", f.tp);
  BRAID_CONFIG_CHECK(f.pp == 1, "--pp ", f.pp, " runs with DDP or ZeRO-1 over the DP group; drop --dp-mode ps");
}

// The server (rank 0) holds the AdamW moments and a receive buffer for pushed
// gradients; workers hold no optimizer state.
SyncMemory plan_parameter_server(const SyncPlanInputs& in) {
  SyncMemory m;
  if (in.rank != 0) return m;
  m.optimizer_elems = in.model_params;
  m.bytes[static_cast<size_t>(MemCategory::comm)] = in.model_params * sizeof(float);
  return m;
}

}  // namespace

extern const DataParallelMode kParameterServerMode{
    "ps", "rank 0 serves the parameters and the optimizer; the other ranks push gradients and pull parameters", 0,
    {Holding::replica, Holding::replica, Holding::server}, false, false, false, true,
    [](const DataParallelFlags& f) { return f.dp_mode == "ps"; }, validate_parameter_server, shard_over_dp,
    [](const GradSyncInputs& in) -> std::unique_ptr<GradSync> {
      return std::make_unique<ParameterServerSync>(in.world, in.ledger);
    },
    plan_parameter_server};

}  // namespace braid::parallel
