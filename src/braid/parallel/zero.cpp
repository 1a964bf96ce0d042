#include "braid/parallel/zero.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"

namespace braid::parallel {

ZeroStage1::ZeroStage1(comm::Communicator& dp, float* params, float* grads, size_t n,
                       size_t bucket_bytes, bool overlap, comm::Algorithm algo,
                       MemoryLedger* ledger)
    : dp_(dp), params_(params), grads_(grads), n_(n), overlap_(overlap), algo_(algo) {
  BRAID_CONFIG_CHECK(bucket_bytes >= sizeof(float), "--bucket-mb gives a bucket of ", bucket_bytes,
                     " bytes; a bucket must hold at least one f32 gradient (use a size > 0)");
  const size_t N = static_cast<size_t>(dp.size());
  const size_t r = static_cast<size_t>(dp.rank());
  // Full buckets hold a multiple of N elements so only the lowest one needs padding.
  size_t per = std::max<size_t>(bucket_bytes / sizeof(float) / N, 1) * N;
  size_t staged_elems = 0;
  for (size_t hi = n; hi > 0;) {
    const size_t lo = hi > per ? hi - per : 0;
    const size_t c = (hi - lo + N - 1) / N;
    const bool staged = (hi - lo) % N != 0;
    if (staged) staged_elems = std::max(staged_elems, N * c);
    buckets_.push_back({lo, hi, c, staged, nullptr});
    hi = lo;
  }
  // Owned segments in increasing offset order (the optimizer walks them).
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const size_t a = std::min(it->lo + r * it->c, it->hi);
    const size_t b = std::min(it->lo + (r + 1) * it->c, it->hi);
    if (b > a) {
      owned_.push_back({a, b - a, shard_size_});
      shard_size_ += b - a;
    }
  }
  if (staged_elems > 0 && N > 1) {
    staging_ = Buffer(staged_elems * sizeof(float), MemCategory::comm, ledger);
  }
  ready_lo_ = n_;
}

void ZeroStage1::begin_sync() {
  ready_lo_ = n_;
  next_ = 0;
}

void ZeroStage1::launch_reduce(size_t k) {
  Bucket& b = buckets_[k];
  const size_t r = static_cast<size_t>(dp_.rank());
  float* src = grads_ + b.lo;
  if (b.staged) {
    // Pad to N*c with zeros so every rank's slice has the same length.
    float* s = staging_.as<float>();
    std::memcpy(s, src, (b.hi - b.lo) * sizeof(float));
    std::memset(s + (b.hi - b.lo), 0, (dp_.size() * b.c - (b.hi - b.lo)) * sizeof(float));
    src = s;
  }
  b.work = dp_.reduce_scatter_async(src, src + r * b.c, b.c, DType::f32, comm::ReduceOp::avg, algo_);
}

void ZeroStage1::unstage_grads(size_t k) {
  Bucket& b = buckets_[k];
  if (!b.staged) return;
  const size_t r = static_cast<size_t>(dp_.rank());
  const size_t a = std::min(b.lo + r * b.c, b.hi), e = std::min(b.lo + (r + 1) * b.c, b.hi);
  if (e > a) std::memcpy(grads_ + a, staging_.as<float>() + r * b.c, (e - a) * sizeof(float));
}

void ZeroStage1::on_ready(size_t begin, size_t end) {
  BRAID_CHECK(end == ready_lo_ && begin <= end,
              "gradient ranges must arrive contiguous and decreasing: got [", begin, ",", end,
              ") while [", ready_lo_, ",", n_, ") is ready");
  ready_lo_ = begin;
  if (!overlap_ || dp_.size() == 1) return;
  while (next_ < buckets_.size() && buckets_[next_].lo >= ready_lo_) {
    // The staging buffer serves one bucket at a time: it is the lowest bucket,
    // so it is launched last and nothing else waits behind it.
    launch_reduce(next_++);
  }
}

void ZeroStage1::finish_sync() {
  if (dp_.size() > 1) {
    while (next_ < buckets_.size()) launch_reduce(next_++);
    for (size_t k = 0; k < buckets_.size(); ++k) {
      if (buckets_[k].work) buckets_[k].work->wait();
      buckets_[k].work.reset();
      unstage_grads(k);
    }
  }
  ready_lo_ = n_;
  next_ = 0;
}

void ZeroStage1::gather_params() {
  if (dp_.size() == 1) return;
  const size_t r = static_cast<size_t>(dp_.rank());
  for (auto& b : buckets_) {
    if (b.staged) continue;
    b.work = dp_.all_gather_async(params_ + b.lo + r * b.c, params_ + b.lo, b.c, DType::f32, algo_);
  }
  for (auto& b : buckets_) {
    if (!b.staged) {
      b.work->wait();
      b.work.reset();
      continue;
    }
    float* s = staging_.as<float>();
    const size_t a = std::min(b.lo + r * b.c, b.hi), e = std::min(b.lo + (r + 1) * b.c, b.hi);
    std::memset(s + r * b.c, 0, b.c * sizeof(float));
    if (e > a) std::memcpy(s + r * b.c, params_ + a, (e - a) * sizeof(float));
    dp_.all_gather(s + r * b.c, s, b.c, DType::f32, algo_);
    std::memcpy(params_ + b.lo, s, (b.hi - b.lo) * sizeof(float));
  }
}

}  // namespace braid::parallel
