#include "braid/parallel/data_parallel/ps_sync.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/hash.h"
#include "braid/model/gpt.h"

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

}  // namespace braid::parallel
