// Bucketed gradient reduction over a flat f32 gradient buffer, for DDP and
// ZeRO-1: one class that all-reduces or reduce-scatters each bucket by a flag
// (as Megatron-LM's distributed optimizer does). The buffer is cut into buckets
// from its end, because backward finishes parameters from last to first, and
// each bucket is launched asynchronously as soon as backward has finished it,
// overlapping the rest of backward (Li et al. 2020, "PyTorch Distributed",
// sec. 3.2.3). With gradient accumulation only the last micro-batch's backward
// reports readiness, so the reduction happens once per step.
//
// Gradients and parameters each have their own dtype: under mixed precision
// the parameters (compute copies, all-gathered by ZeRO-1) are bf16 / fp16 while
// the gradients are reduced in f32 by default (PyTorch FSDP's reduce_dtype,
// Megatron-LM's fp32 gradient accumulation) or, opted in, in the compute dtype
// (half the traffic, as PyTorch DDP's buckets of a bf16 model). Buckets hold
// bucket_bytes of gradients.
//
// all_reduce (DDP): every rank ends with the DP average of every gradient.
//
// reduce_scatter (ZeRO-1, Rajbhandari et al. 2020, sec. 5.1): each rank ends
// with the average of the slice it owns, updates only those parameters, and
// gather_params() all-gathers them. Traffic per rank per step equals DDP's ring
// all-reduce: Ψ(N−1)/N for the reduce-scatter plus Ψ(N−1)/N for the all-gather.
// Full buckets hold a multiple of N elements; rank r owns slice r of every
// bucket: [lo + r·c, lo + (r+1)·c) ∩ [lo, hi) with c = ceil((hi−lo)/N). A rank
// may own nothing of a small bucket; the lowest bucket, when N does not divide
// it, is padded in a staging buffer, never in the parameters (with a cut, the
// lowest bucket of each range).
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/dtype.h"
#include "braid/core/memory.h"

namespace braid::parallel {

enum class BucketReduce : uint8_t { all_reduce, reduce_scatter };

/// Element types of the buffers GradBuckets works on.
struct BucketDTypes {
  DType grads = DType::f32;   // gradients and their reduction's traffic
  DType params = DType::f32;  // parameters (ZeRO-1's all-gather)
};

class GradBuckets {
 public:
  /// One contiguous piece of the flat buffer owned by this rank.
  struct Segment {
    size_t offset;  // element offset in params/grads
    size_t len;     // elements
    size_t shard;   // element offset in the rank's packed shard (optimizer state)
  };

  /// What rank `rank` of a DP group of `world` ranks owns and allocates for an
  /// n-element flat buffer cut into buckets of bucket_bytes; computed without
  /// allocating, by the same bucket logic the constructor uses. all_reduce:
  /// the whole buffer, no staging.
  struct Plan {
    std::vector<Segment> owned;  // increasing offsets, packed shard offsets
    size_t shard_size = 0;       // elements owned (optimizer state per moment)
    size_t staging_bytes = 0;    // comm staging buffer: N x c elements (the wider of
                                 // the two dtypes) of the lowest bucket when N does
                                 // not divide its size, else 0
  };
  /// Throws ConfigError for a bucket smaller than one gradient element,
  /// world < 1 or rank outside [0, world).
  /// cut > 0: buckets never straddle element `cut` ([cut, n) and [0, cut) are
  /// bucketed apart, each from its end), so that [0, cut) is bucketed the same
  /// in any buffer that starts with it (the tied embedding on the first and
  /// the last pipeline stage).
  static Plan plan(size_t n, int world, int rank, size_t bucket_bytes, BucketReduce mode,
                   BucketDTypes dtypes = {}, size_t cut = 0);

  /// dp: the data-parallel group. params/grads: (n,) of dtypes.params /
  /// dtypes.grads, must outlive
  /// this object (params is only used by gather_params). overlap=false defers
  /// every bucket to finish_sync() (the no-overlap baseline). Throws
  /// ConfigError for a bucket smaller than one element.
  GradBuckets(comm::Communicator& dp, void* params, void* grads, size_t n, size_t bucket_bytes, bool overlap,
              comm::Algorithm algo, BucketReduce mode, BucketDTypes dtypes = {}, MemoryLedger* ledger = nullptr,
              size_t cut = 0);
  /// Reductions still in flight write into grads or staging: they end first.
  ~GradBuckets();

  /// Resets readiness for a new step; call before the last micro-batch's backward.
  void begin_sync();
  /// Backward callback: grads[begin, end) are final. Ranges must arrive in
  /// decreasing, contiguous order (GPT::backward guarantees it); throws
  /// braid::Error otherwise. Launches every bucket that is now complete.
  void on_ready(size_t begin, size_t end);
  /// Launches what is left and waits: afterwards grads hold the DP average
  /// (reduce_scatter: the owned segments do; the rest of grads is scratch).
  void finish_sync();
  /// reduce_scatter: all-gathers every bucket so all ranks hold the full,
  /// identical parameters. all_reduce: nothing to do.
  void gather_params();

  const std::vector<Segment>& owned() const { return owned_; }
  /// Elements this rank owns (the size of its optimizer state).
  size_t shard_size() const { return shard_size_; }
  size_t num_buckets() const { return buckets_.size(); }
  /// Buckets launched while backward was still running in the last step.
  size_t buckets_overlapped() const { return overlapped_; }
  /// Each wait on a bucket becomes a span "wait bucket k" in `sink` (null: none).
  void set_span_sink(SpanSink* sink) { sink_ = sink; }

 private:
  struct Bucket {
    size_t lo, hi, c;  // range and per-rank slice length (reduce_scatter)
    bool staged;       // (hi-lo) % N != 0: goes through the padded staging buffer
    size_t stage_off;  // its N x c elements' place in the staging buffer
    comm::WorkPtr work;
  };
  static std::vector<Bucket> make_buckets(size_t n, size_t N, size_t bucket_bytes, BucketReduce mode, size_t esz,
                                          size_t cut);
  char* grads_at(size_t i) const { return grads_ + i * gesz_; }
  char* params_at(size_t i) const { return params_ + i * pesz_; }
  /// Bucket b's N x c elements in the staging buffer (the wider dtype's stride).
  char* stage_at(const Bucket& b) { return staging_.as<char>() + b.stage_off * std::max(gesz_, pesz_); }
  void launch(size_t k);
  void unstage_grads(size_t k);

  comm::Communicator& dp_;
  char* params_;
  char* grads_;
  size_t n_;
  BucketDTypes dt_;
  size_t gesz_, pesz_;  // bytes per gradient / parameter element
  bool overlap_;
  comm::Algorithm algo_;
  BucketReduce mode_;
  std::vector<Bucket> buckets_;  // buckets_[0] is the last range of the buffer
  std::vector<Segment> owned_;
  size_t shard_size_ = 0;
  Buffer staging_;       // N x c of each bucket whose size N does not divide (the lowest of each range)
  size_t ready_lo_ = 0;  // grads[ready_lo_, n) are final
  size_t next_ = 0;      // next bucket to launch
  size_t overlapped_ = 0;
  SpanSink* sink_ = nullptr;
};

}  // namespace braid::parallel
