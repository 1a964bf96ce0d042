// ZeRO stage 1 (Rajbhandari et al. 2020, sec. 5.1): AdamW moments are sharded
// over the data-parallel group. Gradients are reduce-scattered bucket by bucket
// while backward runs (each rank receives the average of its slice), each rank
// updates only the parameters it owns, and the parameters are all-gathered.
// Traffic per rank per step equals DDP's ring all-reduce: Ψ(N−1)/N for the
// reduce-scatter plus Ψ(N−1)/N for the all-gather.
//
// Layout: the flat buffer is cut into buckets from its end (as in DDP); rank r
// owns slice r of every bucket: [lo + r·c, lo + (r+1)·c) ∩ [lo, hi) with
// c = ceil((hi−lo)/N). A rank may own nothing of a small bucket; padding lives
// only in a staging buffer, never in the parameters.
#pragma once
#include <cstddef>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/memory.h"

namespace braid::parallel {

class ZeroStage1 {
 public:
  /// One contiguous piece of the flat buffer owned by this rank.
  struct Segment {
    size_t offset;  // element offset in params/grads
    size_t len;     // elements
    size_t shard;   // element offset in the rank's packed shard (optimizer state)
  };

  /// What rank `rank` of a DP group of `world` ranks owns and allocates for an
  /// n-element flat buffer cut into buckets of bucket_bytes; computed without
  /// allocating, by the same bucket logic the constructor uses.
  struct Plan {
    std::vector<Segment> owned;  // increasing offsets, packed shard offsets
    size_t shard_size = 0;       // elements owned (optimizer state per moment)
    size_t staging_bytes = 0;    // comm staging buffer: N x c f32 of the lowest
                                 // bucket when N does not divide its size, else 0
  };
  /// Throws ConfigError for bucket_bytes < 4, world < 1 or rank outside [0, world).
  static Plan plan(size_t n, int world, int rank, size_t bucket_bytes);

  /// params/grads: (n,) f32, must outlive this object. bucket_bytes >= 4.
  /// Throws ConfigError for a bucket smaller than one element.
  ZeroStage1(comm::Communicator& dp, float* params, float* grads, size_t n, size_t bucket_bytes,
             bool overlap, comm::Algorithm algo, MemoryLedger* ledger);
  /// Reduce-scatters still in flight write into staging_: they end before it goes.
  ~ZeroStage1();

  void begin_sync();
  /// Backward callback (decreasing, contiguous ranges): reduce-scatters each
  /// bucket that is now complete.
  void on_ready(size_t begin, size_t end);
  /// Reduce-scatters what is left and waits: afterwards the owned segments of
  /// grads hold the DP average; the rest of grads is scratch.
  void finish_sync();
  /// All-gathers every bucket so all ranks hold the full, identical parameters.
  void gather_params();

  const std::vector<Segment>& owned() const { return owned_; }
  /// Elements this rank owns (the size of its optimizer state).
  size_t shard_size() const { return shard_size_; }

 private:
  struct Bucket {
    size_t lo, hi, c;  // range and per-rank slice length
    bool staged;       // (hi-lo) % N != 0: goes through the padded staging buffer
    comm::WorkPtr work;
  };
  /// Buckets from the end of the buffer; full ones hold a multiple of N elements.
  static std::vector<Bucket> make_buckets(size_t n, size_t N, size_t bucket_bytes);
  void launch_reduce(size_t k);
  void unstage_grads(size_t k);

  comm::Communicator& dp_;
  float* params_;
  float* grads_;
  size_t n_;
  bool overlap_;
  comm::Algorithm algo_;
  std::vector<Bucket> buckets_;
  std::vector<Segment> owned_;
  size_t shard_size_ = 0;
  Buffer staging_;  // (N * c) of the one bucket whose size N does not divide
  size_t ready_lo_ = 0, next_ = 0;
};

}  // namespace braid::parallel
