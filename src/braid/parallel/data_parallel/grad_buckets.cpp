#include "braid/parallel/data_parallel/grad_buckets.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"

namespace braid::parallel {

std::vector<GradBuckets::Bucket> GradBuckets::make_buckets(size_t n, size_t N, size_t bucket_bytes,
                                                           BucketReduce mode, size_t esz, size_t cut) {
  BRAID_CONFIG_CHECK(bucket_bytes >= esz, "--bucket-mb gives a bucket of ", bucket_bytes,
                     " bytes; a bucket must hold at least one gradient (use a larger --bucket-mb, e.g. 4)");
  const bool scatter = mode == BucketReduce::reduce_scatter;
  // Scattered buckets hold a multiple of N elements so only the lowest one needs padding.
  const size_t per = scatter ? std::max<size_t>(bucket_bytes / esz / N, 1) * N : bucket_bytes / esz;
  std::vector<Bucket> buckets;
  size_t staged_off = 0;
  auto range = [&](size_t top, size_t bottom) {
    for (size_t hi = top; hi > bottom;) {
      const size_t lo = hi - bottom > per ? hi - per : bottom;
      const size_t c = scatter ? (hi - lo + N - 1) / N : hi - lo;
      const bool staged = scatter && (hi - lo) % N != 0;
      buckets.push_back({lo, hi, c, staged, staged ? staged_off : 0, nullptr});
      if (staged) staged_off += N * c;
      hi = lo;
    }
  };
  const size_t k = cut < n ? cut : 0;
  range(n, k);
  range(k, 0);
  return buckets;
}

GradBuckets::Plan GradBuckets::plan(size_t n, int world, int rank, size_t bucket_bytes, BucketReduce mode,
                                    BucketDTypes dtypes, size_t cut) {
  BRAID_CONFIG_CHECK(world >= 1 && rank >= 0 && rank < world, "gradient buckets: rank ", rank,
                     " outside a group of ", world, " ranks");
  const size_t N = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  const std::vector<Bucket> buckets = make_buckets(n, N, bucket_bytes, mode, dtype_size(dtypes.grads), cut);
  Plan p;
  if (mode == BucketReduce::all_reduce) {
    p.owned.push_back({0, n, 0});
    p.shard_size = n;
    return p;
  }
  size_t staged_elems = 0;
  for (const auto& b : buckets)
    if (b.staged) staged_elems += N * b.c;
  // Owned segments in increasing offset order (the optimizer walks them).
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const size_t a = std::min(it->lo + r * it->c, it->hi);
    const size_t b = std::min(it->lo + (r + 1) * it->c, it->hi);
    if (b > a) {
      p.owned.push_back({a, b - a, p.shard_size});
      p.shard_size += b - a;
    }
  }
  // The staging buffer pads gradients for the reduce-scatter and parameters for the all-gather.
  const size_t esz = std::max(dtype_size(dtypes.grads), dtype_size(dtypes.params));
  if (staged_elems > 0 && N > 1) p.staging_bytes = staged_elems * esz;
  return p;
}

GradBuckets::GradBuckets(comm::Communicator& dp, void* params, void* grads, size_t n, size_t bucket_bytes,
                         bool overlap, comm::Algorithm algo, BucketReduce mode, BucketDTypes dtypes,
                         MemoryLedger* ledger, size_t cut)
    : dp_(dp), params_(static_cast<char*>(params)), grads_(static_cast<char*>(grads)), n_(n), dt_(dtypes),
      gesz_(dtype_size(dtypes.grads)), pesz_(dtype_size(dtypes.params)), overlap_(overlap), algo_(algo),
      mode_(mode) {
  Plan p = plan(n, dp.size(), dp.rank(), bucket_bytes, mode, dtypes, cut);
  buckets_ = make_buckets(n, static_cast<size_t>(dp.size()), bucket_bytes, mode, gesz_, cut);
  owned_ = std::move(p.owned);
  shard_size_ = p.shard_size;
  if (p.staging_bytes > 0) staging_ = Buffer(p.staging_bytes, MemCategory::comm, ledger);
  ready_lo_ = n_;
}

GradBuckets::~GradBuckets() {
  for (auto& b : buckets_) comm::settle(b.work);
}

void GradBuckets::begin_sync() {
  ready_lo_ = n_;
  next_ = 0;
  overlapped_ = 0;
}

void GradBuckets::launch(size_t k) {
  Bucket& b = buckets_[k];
  char* src = grads_at(b.lo);
  dp_.set_next_label(detail::concat("bucket ", k));
  if (mode_ == BucketReduce::all_reduce) {
    b.work = dp_.all_reduce_async(src, src, b.hi - b.lo, dt_.grads, comm::ReduceOp::avg, algo_);
    return;
  }
  if (b.staged) {
    // Pad to N*c with zeros so every rank's slice has the same length.
    char* s = stage_at(b);
    std::memcpy(s, src, (b.hi - b.lo) * gesz_);
    std::memset(s + (b.hi - b.lo) * gesz_, 0, (dp_.size() * b.c - (b.hi - b.lo)) * gesz_);
    src = s;
  }
  const size_t r = static_cast<size_t>(dp_.rank());
  b.work = dp_.reduce_scatter_async(src, src + r * b.c * gesz_, b.c, dt_.grads, comm::ReduceOp::avg, algo_);
}

void GradBuckets::unstage_grads(size_t k) {
  Bucket& b = buckets_[k];
  if (!b.staged) return;
  const size_t r = static_cast<size_t>(dp_.rank());
  const size_t a = std::min(b.lo + r * b.c, b.hi), e = std::min(b.lo + (r + 1) * b.c, b.hi);
  if (e > a) std::memcpy(grads_at(a), stage_at(b) + r * b.c * gesz_, (e - a) * gesz_);
}

void GradBuckets::on_ready(size_t begin, size_t end) {
  BRAID_CHECK(end == ready_lo_ && begin <= end, "gradient ranges must arrive contiguous and decreasing: got [", begin,
              ",", end, ") while [", ready_lo_, ",", n_, ") is ready");
  ready_lo_ = begin;
  if (!overlap_ || dp_.size() == 1) return;
  // Each staged bucket has its own place in the staging buffer.
  while (next_ < buckets_.size() && buckets_[next_].lo >= ready_lo_) {
    launch(next_++);
    ++overlapped_;
  }
}

void GradBuckets::finish_sync() {
  if (dp_.size() > 1) {
    while (next_ < buckets_.size()) launch(next_++);
    for (size_t k = 0; k < buckets_.size(); ++k) {
      if (buckets_[k].work) {
        ScopedSpan wait(sink_, "wait bucket ", static_cast<int64_t>(k), "comm wait");
        buckets_[k].work->wait();
      }
      buckets_[k].work.reset();
      unstage_grads(k);
    }
  }
  ready_lo_ = n_;  // keep overlapped_ for reporting until the next begin_sync()
  next_ = 0;
}

void GradBuckets::gather_params() {
  if (mode_ == BucketReduce::all_reduce || dp_.size() == 1) return;
  const size_t r = static_cast<size_t>(dp_.rank());
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (b.staged) continue;
    dp_.set_next_label(detail::concat("bucket ", k, " parameters"));
    b.work = dp_.all_gather_async(params_at(b.lo + r * b.c), params_at(b.lo), b.c, dt_.params, algo_);
  }
  for (size_t k = 0; k < buckets_.size(); ++k) {
    Bucket& b = buckets_[k];
    if (!b.staged) {
      ScopedSpan wait(sink_, "wait bucket parameters ", static_cast<int64_t>(k), "comm wait");
      b.work->wait();
      b.work.reset();
      continue;
    }
    char* s = stage_at(b);
    const size_t a = std::min(b.lo + r * b.c, b.hi), e = std::min(b.lo + (r + 1) * b.c, b.hi);
    std::memset(s + r * b.c * pesz_, 0, b.c * pesz_);
    if (e > a) std::memcpy(s + r * b.c * pesz_, params_at(a), (e - a) * pesz_);
    dp_.set_next_label(detail::concat("bucket ", k, " parameters"));
    dp_.all_gather(s + r * b.c * pesz_, s, b.c, dt_.params, algo_);
    std::memcpy(params_at(b.lo), s, (b.hi - b.lo) * pesz_);
  }
}

}  // namespace braid::parallel
