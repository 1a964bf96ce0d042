#include "braid/parallel/data_parallel/zero.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"

namespace braid::parallel {

std::vector<ZeroStage1::Bucket> ZeroStage1::make_buckets(size_t n, size_t N, size_t bucket_bytes) {
  BRAID_CONFIG_CHECK(bucket_bytes >= sizeof(float), "--bucket-mb gives a bucket of ", bucket_bytes,
                     " bytes; a bucket must hold at least one f32 gradient (use a larger --bucket-mb, e.g. 4)");
  // Full buckets hold a multiple of N elements so only the lowest one needs padding.
  const size_t per = std::max<size_t>(bucket_bytes / sizeof(float) / N, 1) * N;
  std::vector<Bucket> buckets;
  for (size_t hi = n; hi > 0;) {
    const size_t lo = hi > per ? hi - per : 0;
    const size_t c = (hi - lo + N - 1) / N;
    buckets.push_back({lo, hi, c, (hi - lo) % N != 0, nullptr});
    hi = lo;
  }
  return buckets;
}

ZeroStage1::Plan ZeroStage1::plan(size_t n, int world, int rank, size_t bucket_bytes) {
  BRAID_CONFIG_CHECK(world >= 1 && rank >= 0 && rank < world, "ZeRO-1 plan: rank ", rank,
                     " outside a group of ", world, " ranks");
  const size_t N = static_cast<size_t>(world);
  const size_t r = static_cast<size_t>(rank);
  const std::vector<Bucket> buckets = make_buckets(n, N, bucket_bytes);
  Plan p;
  size_t staged_elems = 0;
  for (const auto& b : buckets)
    if (b.staged) staged_elems = std::max(staged_elems, N * b.c);
  // Owned segments in increasing offset order (the optimizer walks them).
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const size_t a = std::min(it->lo + r * it->c, it->hi);
    const size_t b = std::min(it->lo + (r + 1) * it->c, it->hi);
    if (b > a) {
      p.owned.push_back({a, b - a, p.shard_size});
      p.shard_size += b - a;
    }
  }
  if (staged_elems > 0 && N > 1) p.staging_bytes = staged_elems * sizeof(float);
  return p;
}

ZeroStage1::~ZeroStage1() {
  for (auto& b : buckets_) comm::settle(b.work);
}

ZeroStage1::ZeroStage1(comm::Communicator& dp, float* params, float* grads, size_t n,
                       size_t bucket_bytes, bool overlap, comm::Algorithm algo,
                       MemoryLedger* ledger)
    : dp_(dp), params_(params), grads_(grads), n_(n), overlap_(overlap), algo_(algo) {
  Plan p = plan(n, dp.size(), dp.rank(), bucket_bytes);
  buckets_ = make_buckets(n, static_cast<size_t>(dp.size()), bucket_bytes);
  owned_ = std::move(p.owned);
  shard_size_ = p.shard_size;
  if (p.staging_bytes > 0) staging_ = Buffer(p.staging_bytes, MemCategory::comm, ledger);
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
