// The asynchronous parameter server's hooks into the trainer (the loop:
// async_ps.h; the synchronous server is a GradSync: ps_sync.h).
#include <cmath>

#include "braid/train/async_ps.h"
#include "braid/train/trainer.h"

namespace braid::train {

void Trainer::ps_apply(float lr, int64_t t, StepRecord& r) {
  r.grad_norm = static_cast<float>(std::sqrt(optimizer_->global_grad_sumsq(*sync_, 1.0f, 0)));
  r.lr = lr;
  optimizer_->step(*sync_, lr, clip_coef(r.grad_norm), t);
}

std::vector<StepRecord> Trainer::run_ps_async() {
  AsyncParameterServer ps(world_, model_->params(), model_->grads(), model_->num_params(), opt_.steps,
                          opt_.staleness);
  AsyncParameterServer::Hooks h;
  h.gradient = [this](int64_t i) {
    sync_->begin_step(i);
    return static_cast<float>(forward_backward(i));
  };
  h.apply = [this](int64_t version, float lr) {
    StepRecord r;
    ps_apply(lr, version + 1, r);
    return r.grad_norm;
  };
  h.lr = [this](int64_t s) { return sched_.at(s); };
  h.before_step = [this](int64_t s) { maybe_inject_failure(opt_, world_.rank(), s); };
  h.record = [this](StepRecord& r, double seconds, uint64_t sent0, uint64_t recv0) {
    const bool check = opt_.check_replicas;
    opt_.check_replicas = false;  // replicas differ while running asynchronously
    finish_record(r, seconds, sent0, recv0);
    opt_.check_replicas = check;
  };
  auto out = ps.run(start_step_, h);
  stopped_at_ = ps.stopped_at();
  stop_signal_ = ps.ending_signal();
  return out;
}

}  // namespace braid::train
