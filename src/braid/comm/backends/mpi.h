// MPI backend: one process per rank. Point-to-point maps to MPI_Send/Recv/Isend/Irecv
// (messages over 1 GiB are sent as several MPI messages, so sizes above INT_MAX work);
// Algorithm::native maps to MPI_Allreduce / MPI_Allgather / MPI_Reduce_scatter_block /
// MPI_Alltoall / MPI_Bcast. Native bf16/f16 reductions widen to an f32 scratch buffer,
// reduce with MPI_FLOAT and narrow back (exact f32 accumulation, twice the bytes on the
// wire). Native calls whose counts exceed INT_MAX fall back to our algorithms.
// Every MPI return code is checked (errors return, they do not abort) and turned into
// braid::Error with file:line.
#pragma once
#include <memory>

#include "braid/comm/communicator.h"

namespace braid::comm {

/// RAII owner of MPI: MPI_Init_thread(MPI_THREAD_MULTIPLE) in the constructor (the
/// progress threads call MPI concurrently), MPI_Finalize in the destructor. If MPI is
/// already initialised it is neither initialised nor finalised here. When destroyed
/// during exception unwinding MPI is left initialised so that the caller can
/// MPI_Abort the job (finalising would block on the peers).
/// Under a launcher (mpirun's daemon or mpirun itself the parent), the process
/// is killed when its parent dies (PR_SET_PDEATHSIG): a rank whose daemon is
/// gone can neither report nor be stopped, and must not run on alone.
/// Errors: braid::Error if the library does not provide MPI_THREAD_MULTIPLE.
class MpiRuntime {
 public:
  explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  /// A communicator over a duplicate of MPI_COMM_WORLD, with this rank's monitor
  /// (watchdog.h) configured by `options` (its control channel is a second
  /// duplicate). Must be destroyed before the runtime.
  std::unique_ptr<Communicator> world(const CommOptions& options = {});
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }

 private:
  bool owned_ = false;
  int rank_ = 0, size_ = 1;
};

/// Ends the whole job with exit code `code` (MPI_Abort). An abort that cannot
/// reach the launcher (a cut link, a lost daemon) may block for ever, so this
/// process ends itself with `code` 5 s later whatever MPI does: a failed rank
/// never outlives its report. A rank under a remote launcher daemon (orted)
/// also leaves a short-lived process that kills that daemon if it is still
/// there 5 s later (a daemon cut off from mpirun would otherwise linger).
[[noreturn]] void abort_job(int code);

}  // namespace braid::comm
