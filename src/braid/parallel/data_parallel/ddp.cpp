#include "braid/parallel/data_parallel/ddp.h"

#include <algorithm>

#include "braid/core/error.h"

namespace braid::parallel {

DDPGradSync::DDPGradSync(comm::Communicator& dp, float* grads, size_t n, size_t bucket_bytes,
                         bool overlap, comm::Algorithm algo)
    : dp_(dp), grads_(grads), n_(n), overlap_(overlap), algo_(algo) {
  BRAID_CONFIG_CHECK(bucket_bytes >= sizeof(float), "--bucket-mb gives a bucket of ", bucket_bytes,
                     " bytes; a bucket must hold at least one f32 gradient (use a larger --bucket-mb, e.g. 4)");
  const size_t per = bucket_bytes / sizeof(float);
  for (size_t hi = n; hi > 0;) {
    const size_t lo = hi > per ? hi - per : 0;
    buckets_.push_back({lo, hi, nullptr});
    hi = lo;
  }
  ready_lo_ = n_;
}

void DDPGradSync::begin_sync() {
  ready_lo_ = n_;
  next_ = 0;
  overlapped_ = 0;
}

void DDPGradSync::launch(size_t k) {
  Bucket& b = buckets_[k];
  b.work = dp_.all_reduce_async(grads_ + b.lo, grads_ + b.lo, b.hi - b.lo, DType::f32,
                                comm::ReduceOp::avg, algo_);
}

void DDPGradSync::on_ready(size_t begin, size_t end) {
  BRAID_CHECK(end == ready_lo_ && begin <= end,
              "gradient ranges must arrive contiguous and decreasing: got [", begin, ",", end,
              ") while [", ready_lo_, ",", n_, ") is ready");
  ready_lo_ = begin;
  if (!overlap_ || dp_.size() == 1) return;
  while (next_ < buckets_.size() && buckets_[next_].lo >= ready_lo_) {
    launch(next_++);
    ++overlapped_;
  }
}

void DDPGradSync::finish_sync() {
  if (dp_.size() > 1) {
    while (next_ < buckets_.size()) launch(next_++);
    for (auto& b : buckets_) {
      if (b.work) b.work->wait();
      b.work.reset();
    }
  }
  ready_lo_ = n_;  // keep overlapped_ for reporting until the next begin_sync()
  next_ = 0;
}

}  // namespace braid::parallel
