// The Communicator interface: point-to-point transport plus collectives written
// once over it (algorithms/), with the transport's own collectives selectable as
// Algorithm::native for comparison. Backends: local (ranks as threads in one
// process, for tests) and mpi (one process per rank).
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "braid/comm/topology.h"
#include "braid/core/dtype.h"
#include "braid/core/span_sink.h"

namespace braid::comm {

enum class ReduceOp : uint8_t { sum, avg, max, min };

/// Which implementation runs a collective: ours over send/recv (ring for
/// all-reduce / all-gather / reduce-scatter, pairwise for all-to-all, binomial
/// tree for broadcast), or the transport's own (MPI_Allreduce, ...). The local
/// backend has no native collectives and runs ours for both.
enum class Algorithm : uint8_t { ring, native };

const char* reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(const std::string& s);        // throws ConfigError
Algorithm parse_algorithm(const std::string& s);       // "ring" | "native"; throws ConfigError

/// Settings of a world communicator and every group split from it.
struct CommOptions {
  /// Deadline of every blocking wait (collective, point-to-point, Work::wait,
  /// barrier), seconds. When it passes, the job ends naming the ranks that never
  /// reached the operation (see watchdog.h).
  double timeout_s = 600;
  /// Before every collective the group checks that all ranks called the same one
  /// (sequence number, op, count, dtype, root); a mismatch fails naming both calls.
  bool debug_collectives = false;
  /// Where a rank writes flight_record_rank<R>.json when a deadline passes ("" none).
  std::string record_dir;
  /// The stop signal this process received (0: none), polled by the monitor:
  /// a rank blocked in communication for over a second when one arrives (a
  /// launcher ending the job, a scheduler's SIGTERM) says where it waits, once.
  std::function<int()> stop_signal;

  /// Throws ConfigError naming the field and the fix when a value is out of range.
  void validate() const;
};

/// Handle of an asynchronous operation. wait() blocks until done and rethrows
/// any error the operation raised; test() polls. Waiting twice is allowed.
/// A handle dropped before completion never leaves the operation pending on its
/// buffers: a receive not yet matched is withdrawn, anything else is waited for
/// (and cancelled first while an exception unwinds).
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
  /// Stops the operation if it has not completed: a receive not yet matched is
  /// withdrawn, a queued collective is dropped, a running one is made to fail. On
  /// return the operation no longer touches its buffers. wait() then throws.
  virtual void cancel() {}
};
using WorkPtr = std::shared_ptr<Work>;

/// For an owner about to free the buffers of an operation it may still have in flight
/// (its destructor): cancels the operation while an exception unwinds (a peer may be
/// gone), otherwise waits for it; errors are dropped, the owner is going away.
inline void settle(const WorkPtr& w) noexcept {
  if (!w) return;
  try {
    if (std::uncaught_exceptions() > 0)
      w->cancel();
    else
      w->wait();
  } catch (...) {
  }
}

/// A backend's memory behind a SharedBuffer (comm_base.h defines it).
class SharedAllocation;

/// Memory that every rank of the communicator that allocated it can address
/// directly when the group's processes share a node (MPI-3 shared-memory windows;
/// threads of the local backend). Collectives whose buffers lie in one, at the same
/// offset on every rank, run zero-copy: each rank reads its peers' blocks where they
/// are instead of receiving copies (NCCL's registered user buffers, in spirit), so an
/// all-reduce moves each byte through memory about as often as one memcpy does.
/// zero_copy() is false when the group spans nodes or the file system behind the
/// shared memory lacks room for it: the memory is then private and collectives on it
/// take their usual path. Move-only; destroyed on every rank in the
/// same order (freeing an MPI window is collective), before or after its communicator.
class SharedBuffer {
 public:
  SharedBuffer();
  explicit SharedBuffer(std::unique_ptr<SharedAllocation> a);
  ~SharedBuffer();
  SharedBuffer(SharedBuffer&&) noexcept;
  SharedBuffer& operator=(SharedBuffer&&) noexcept;

  /// This rank's block, 4096-byte aligned when zero_copy() (64 otherwise); null when empty.
  void* data() const;
  size_t bytes() const;
  bool zero_copy() const;
  template <typename T> T* as() const { return static_cast<T*>(data()); }

 private:
  std::unique_ptr<SharedAllocation> a_;
};

/// A group of ranks. All counts are in elements of `dtype` unless named *_bytes.
/// Buffers may alias (in-place) where noted. Collectives must be called by every
/// rank of the group in the same order. Reductions in bf16/f16 accumulate in f32.
/// Every collective returns bitwise-identical results on all ranks.
/// Errors: throws braid::Error on transport failure or when the job is aborted
/// because another rank failed (so no rank hangs).
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "local" or "mpi".
  virtual std::string backend() const = 0;
  /// Which node each rank of the group is on (topology.h); one node unless the group
  /// spans hosts (or the local backend was given a map).
  virtual const NodeMap& node_map() const = 0;

  // ---- point-to-point (raw bytes) ----
  virtual void send(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual void recv(void* buf, size_t bytes, int peer, int tag) = 0;
  virtual WorkPtr isend(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual WorkPtr irecv(void* buf, size_t bytes, int peer, int tag) = 0;
  /// Simultaneous send to dst and receive from src (deadlock-free in a ring).
  virtual void sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes,
                        int src, int tag) = 0;

  /// New communicator of the ranks with the same color, ordered by (key, rank).
  /// Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  /// Collective: `bytes` of memory on every rank (the same value on all; 0 gives an
  /// empty buffer) that the group's collectives can use zero-copy (SharedBuffer).
  /// Throws braid::Error when ranks pass different sizes or the system refuses the
  /// allocation.
  virtual SharedBuffer alloc_shared(size_t bytes) = 0;

  // ---- collectives (blocking) ----
  /// recv[i] = op over ranks of send[i], i < count. send == recv is in-place.
  virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          Algorithm algo = Algorithm::ring) = 0;
  /// recv (size*count) = concat over ranks of send (count). send may equal
  /// recv + rank*count (in-place).
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype,
                          Algorithm algo = Algorithm::ring) = 0;
  /// send holds size*count elements; rank r receives block r of the reduction
  /// (count elements). recv may equal send + rank*count (in-place).
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                              Algorithm algo = Algorithm::ring) = 0;
  /// send holds size blocks of count; block j goes to rank j; recv block i came
  /// from rank i. Out-of-place only.
  virtual void all_to_all(const void* send, void* recv, size_t count, DType dtype,
                          Algorithm algo = Algorithm::ring) = 0;
  /// buf on root is copied to buf on every rank.
  virtual void broadcast(void* buf, size_t count, DType dtype, int root,
                         Algorithm algo = Algorithm::ring) = 0;
  virtual void barrier() = 0;

  // ---- collectives (asynchronous) ----
  /// Queued on this communicator's progress thread and run in FIFO order; the
  /// buffers must stay valid and untouched until wait() returns.
  virtual WorkPtr all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, Algorithm algo = Algorithm::ring) = 0;
  virtual WorkPtr all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                                   Algorithm algo = Algorithm::ring) = 0;
  virtual WorkPtr reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, Algorithm algo = Algorithm::ring) = 0;

  /// Bytes this rank has sent through this communicator (payload only), for
  /// traffic accounting.
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;

  // ---- what a trace and the flight record say about this group ----
  /// Names the group's role ("dp", "tp", ...): its progress thread's lane in a trace.
  virtual void set_name(std::string name) = 0;
  virtual std::string name() const = 0;
  /// Every collective of this communicator from now on is a span in `sink` (null:
  /// none): blocking ones on lane "main", asynchronous ones on "comm <name>".
  virtual void set_span_sink(std::shared_ptr<SpanSink> sink) = 0;
  /// The sink set_span_sink gave (null: none), for the work a strand runs over
  /// this group to report its own spans (ring attention's steps).
  virtual std::shared_ptr<SpanSink> span_sink() const { return nullptr; }
  /// The next collective called on this communicator carries `label` ("DDP bucket
  /// 3") in its record, its trace span and any timeout report about it.
  virtual void set_next_label(std::string label) = 0;
};

/// Broadcasts the bytes of `s` from `root` (its size first); collective over `comm`.
void broadcast_string(Communicator& comm, std::string& s, int root);

}  // namespace braid::comm
