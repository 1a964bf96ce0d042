// DDP gradient synchronisation: the flat gradient buffer is cut into buckets
// and each bucket is all-reduced (average) asynchronously as soon as backward
// has finished it, overlapping the rest of backward (Li et al. 2020, "PyTorch
// Distributed", sec. 3.2.3). With gradient accumulation only the last
// micro-batch's backward reports readiness, so the sync happens once per step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/comm/communicator.h"

namespace braid::parallel {

/// Buckets over grads[0, n) in elements, built from the end of the buffer
/// because backward finishes parameters from last to first. Bucket k covers
/// [max(0, n-(k+1)*bucket_elems), n-k*bucket_elems).
class DDPGradSync {
 public:
  /// dp: the data-parallel group. grads: (n,) f32, must outlive this object.
  /// bucket_bytes: bucket size in bytes (>= 4). overlap=false defers every
  /// bucket to finish() (the no-overlap baseline).
  /// Throws ConfigError when bucket_bytes < 4.
  DDPGradSync(comm::Communicator& dp, float* grads, size_t n, size_t bucket_bytes, bool overlap,
              comm::Algorithm algo = comm::Algorithm::ring);

  /// Resets readiness for a new step; call before the last micro-batch's backward.
  void begin_sync();
  /// Backward callback: grads[begin, end) are final. Ranges must arrive in
  /// decreasing, contiguous order (GPT::backward guarantees it). Launches every
  /// bucket that is now complete.
  void on_ready(size_t begin, size_t end);
  /// Launches what is left, waits for all buckets. After it grads hold the DP average.
  void finish_sync();

  size_t num_buckets() const { return buckets_.size(); }
  /// Buckets launched while backward was still running in the last step.
  size_t buckets_overlapped() const { return overlapped_; }

 private:
  void launch(size_t k);
  struct Bucket {
    size_t lo, hi;
    comm::WorkPtr work;
  };
  comm::Communicator& dp_;
  float* grads_;
  size_t n_;
  bool overlap_;
  comm::Algorithm algo_;
  std::vector<Bucket> buckets_;  // buckets_[0] is the last range of the buffer
  size_t ready_lo_ = 0;          // grads[ready_lo_, n) are final
  size_t next_ = 0;              // next bucket to launch
  size_t overlapped_ = 0;
};

}  // namespace braid::parallel
