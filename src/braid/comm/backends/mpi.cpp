#include "braid/comm/backends/mpi.h"

#include <mpi.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "braid/comm/comm_base.h"
#include "braid/comm/reduce.h"
#include "braid/core/error.h"

/// Throws braid::Error("file:line: <call> failed: <MPI error string>") unless the call
/// returned MPI_SUCCESS.
#define BRAID_MPI_CHECK(call)                                                              \
  do {                                                                                     \
    int braid_rc_ = (call);                                                                \
    if (braid_rc_ != MPI_SUCCESS) {                                                        \
      char braid_s_[MPI_MAX_ERROR_STRING];                                                 \
      int braid_l_ = 0;                                                                    \
      MPI_Error_string(braid_rc_, braid_s_, &braid_l_);                                    \
      throw ::braid::Error(::braid::detail::concat(__FILE__, ":", __LINE__, ": ", #call,   \
                                                   " failed: ", std::string(braid_s_, braid_l_))); \
    }                                                                                      \
  } while (0)

namespace braid::comm {
namespace {

// Largest single MPI message; bigger payloads go as several messages of this size.
constexpr size_t kMaxPiece = size_t{1} << 30;

size_t n_pieces(size_t bytes) { return bytes == 0 ? 1 : (bytes + kMaxPiece - 1) / kMaxPiece; }
int piece_len(size_t bytes, size_t i) {
  return static_cast<int>(std::min(kMaxPiece, bytes - i * kMaxPiece));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

// Completes every request, polling so that a passed deadline or a cancellation
// (poll_signals) ends the wait; MPI_Wait itself cannot be interrupted. On an exception
// the requests are cancelled first, so none outlives its buffer.
int wait_requests(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& st);
constexpr unsigned kPollsPerYield = 64;  // as the shared-memory waits (shared_memory.cpp)

// Cancels what is still pending and waits until MPI no longer writes to the buffers.
// Receives cancel at once. A send MPI cannot cancel (OpenMPI's ob1 cannot) is given
// 100 ms to complete and is then released: this happens only on the way to aborting
// the job, and a send only reads its buffer.
void cancel_requests(std::vector<MPI_Request>& reqs) {
  for (auto& r : reqs)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  for (auto& r : reqs) {
    while (r != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&r, &flag, &st) != MPI_SUCCESS || flag) break;
      if (std::chrono::steady_clock::now() > until) {
        MPI_Request_free(&r);
        break;
      }
    }
  }
}

int wait_requests(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& st) {
  st.resize(reqs.size());
  try {
    for (unsigned polls = 1;; ++polls) {
      int flag = 0;
      const int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, st.data());
      if (rc != MPI_SUCCESS || flag) return rc;
      poll_signals();
      // Ranks may outnumber cores (or share them with progress threads): a waiter
      // gives its core up every few polls, or it starves the rank it waits for.
      if (polls % kPollsPerYield == 0) std::this_thread::yield();
    }
  } catch (...) {
    cancel_requests(reqs);
    throw;
  }
}

std::string mpi_error(int rc, const char* what) {
  char s[MPI_MAX_ERROR_STRING];
  int l = 0;
  MPI_Error_string(rc, s, &l);
  return detail::concat(__FILE__, ":", __LINE__, ": ", what, " failed: ", std::string(s, l));
}

// Passes the monitor's progress fence (watchdog.h) once this thread's request
// completed, so TSan sees the order MPI made; null: the monitor's own comm.
void pass_fence(std::mutex* fence) {
  if (fence) std::lock_guard<std::mutex> g(*fence);
}

class MpiWork final : public Work {
 public:
  // expected[i] = bytes request i must receive, or -1 for a send.
  // fence: the monitor's progress fence (watchdog.h), passed once the requests
  // complete; null for the monitor's own communicator.
  MpiWork(std::vector<MPI_Request> reqs, std::vector<int> expected, std::mutex* fence)
      : reqs_(std::move(reqs)), expected_(std::move(expected)), fence_(fence) {}
  // Dropped before completion: a receive not yet matched is withdrawn (no message may
  // land in a buffer its owner frees next); sends are completed, or cancelled while an
  // exception unwinds (the peer may be gone).
  ~MpiWork() override {
    if (done_) return;
    if (std::uncaught_exceptions() > 0) {
      cancel();
      return;
    }
    for (size_t i = 0; i < reqs_.size(); ++i)
      if (expected_[i] >= 0 && reqs_[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs_[i]);
    std::vector<MPI_Status> st;
    try {
      wait_requests(reqs_, st);
    } catch (...) {
    }
  }
  void wait() override {
    if (done_) {
      if (!err_.empty()) throw Error(err_);
      return;
    }
    std::vector<MPI_Status> st;
    int rc;
    try {
      rc = wait_requests(reqs_, st);
    } catch (const std::exception& e) {
      done_ = true;
      err_ = e.what();
      throw;
    }
    done_ = true;
    pass_fence(fence_);
    finish(rc, st);
  }
  bool test() override {
    if (done_) {
      if (!err_.empty()) throw Error(err_);
      return true;
    }
    std::vector<MPI_Status> st(reqs_.size());
    int flag = 0;
    int rc = MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, st.data());
    if (rc == MPI_SUCCESS && !flag) return false;
    done_ = true;
    pass_fence(fence_);
    finish(rc, st);
    return true;
  }
  void cancel() override {
    if (done_) return;
    cancel_requests(reqs_);
    done_ = true;
    err_ = "operation was cancelled";
  }

 private:
  void finish(int rc, std::vector<MPI_Status>& st) {
    if (rc != MPI_SUCCESS) {
      err_ = mpi_error(rc, "MPI_Testall");
      throw Error(err_);
    }
    for (size_t i = 0; i < expected_.size(); ++i) {
      if (expected_[i] < 0) continue;
      int got = 0;
      MPI_Get_count(&st[i], MPI_BYTE, &got);
      if (got != expected_[i]) {
        err_ = detail::concat(__FILE__, ":", __LINE__, ": message size mismatch: expected ",
                              expected_[i], " bytes from rank ", st[i].MPI_SOURCE, ", got ", got);
        throw Error(err_);
      }
    }
  }
  std::vector<MPI_Request> reqs_;
  std::vector<int> expected_;
  std::mutex* fence_;
  bool done_ = false;
  std::string err_;
};

// Whether the file system behind OpenMPI's shared-memory windows (its MCA parameter
// osc_sm_backing_directory, /dev/shm by default) has `bytes` free. A tmpfs too
// small for a window would fail its pages with SIGBUS when first touched.
bool backing_room(size_t bytes) {
  const char* dir = std::getenv("OMPI_MCA_osc_sm_backing_directory");
  struct statvfs st;
  if (statvfs(dir && *dir ? dir : "/dev/shm", &st) != 0) return false;
  return static_cast<size_t>(st.f_bavail) * st.f_frsize >= bytes;
}

// Every rank's block of one MPI-3 shared-memory window, mapped in this process.
class MpiMapping final : public SharedMapping {
 public:
  MpiMapping(MPI_Comm comm, int size, size_t block_bytes) {
    MPI_Info info;
    BRAID_MPI_CHECK(MPI_Info_create(&info));
    // Each rank's block on its own pages (OpenMPI's osc/sm honours it).
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    // OpenMPI aligns the blocks to 8 bytes only: ask for a page more and align each
    // block up to a page (the segment is mapped page-aligned in every process, so the
    // aligned addresses name the same bytes everywhere).
    std::byte* base = nullptr;
    const int rc =
        MPI_Win_allocate_shared(static_cast<MPI_Aint>(block_bytes + kSharedPage), 1, info, comm, &base, &win_);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS)
      throw Error(mpi_error(rc, "MPI_Win_allocate_shared") +
                  " (a shared-memory buffer for zero-copy collectives: is its file system, OpenMPI's "
                  "osc_sm_backing_directory, full? `braid train --no-zero-copy` reduces by messages)");
    for (int q = 0; q < size; ++q) {
      MPI_Aint got = 0;
      int unit = 0;
      void* p = nullptr;
      BRAID_MPI_CHECK(MPI_Win_shared_query(win_, q, &got, &unit, &p));
      BRAID_CHECK(static_cast<size_t>(got) == block_bytes + kSharedPage, "MPI shared window: rank ", q,
                  "'s block is ", got, " bytes, want ", block_bytes + kSharedPage);
      block.push_back(page_aligned(p));
    }
  }
  // Faults in rank `me`'s block writable (MADV_POPULATE_WRITE, Linux 5.14). False
  // when the file system behind it is full; true when the kernel cannot tell.
  bool populate(int me, size_t block_bytes) const {
    if (madvise(block[static_cast<size_t>(me)], block_bytes, MADV_POPULATE_WRITE) == 0) return true;
    return errno == EINVAL;  // an older kernel: statvfs's answer stands
  }
  // Freeing a window is collective; a failing process leaves it to the job's abort.
  ~MpiMapping() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && std::uncaught_exceptions() == 0) MPI_Win_free(&win_);
  }

 private:
  MPI_Win win_ = MPI_WIN_NULL;
};

class MpiComm final : public CommBase {
 public:
  MpiComm(MPI_Comm comm, std::shared_ptr<Monitor> monitor, std::shared_ptr<CommState> state)
      : CommBase(std::move(monitor), std::move(state)), comm_(comm) {
    BRAID_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    BRAID_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    BRAID_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    set_node_map(NodeMap::one_node(size_));
  }
  ~MpiComm() override {
    const bool unwinding = std::uncaught_exceptions() > 0;
    // While a failing process unwinds, a queued collective may be blocked on peers
    // that will never answer; leave it to MPI_Abort rather than hang here.
    stop_progress(/*detach=*/unwinding && progress_busy());
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && !unwinding) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

 protected:
  void do_send(const void* buf, size_t bytes, int peer, int tag) override {
    std::vector<MPI_Request> reqs;
    std::vector<int> exp;
    post_send(buf, bytes, peer, tag, reqs, exp);
    MpiWork(std::move(reqs), std::move(exp), fence()).wait();
  }
  void do_recv(void* buf, size_t bytes, int peer, int tag) override {
    std::vector<MPI_Request> reqs;
    std::vector<int> exp;
    post_recv(buf, bytes, peer, tag, reqs, exp);
    MpiWork(std::move(reqs), std::move(exp), fence()).wait();
  }
  WorkPtr do_isend(const void* buf, size_t bytes, int peer, int tag) override {
    std::vector<MPI_Request> reqs;
    std::vector<int> exp;
    post_send(buf, bytes, peer, tag, reqs, exp);
    return std::make_shared<MpiWork>(std::move(reqs), std::move(exp), fence());
  }
  WorkPtr do_irecv(void* buf, size_t bytes, int peer, int tag) override {
    std::vector<MPI_Request> reqs;
    std::vector<int> exp;
    post_recv(buf, bytes, peer, tag, reqs, exp);
    return std::make_shared<MpiWork>(std::move(reqs), std::move(exp), fence());
  }
  void do_sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes, int src,
                   int tag) override {
    std::vector<MPI_Request> reqs;
    std::vector<int> exp;
    post_recv(rbuf, rbytes, src, tag, reqs, exp);
    post_send(sbuf, sbytes, dst, tag, reqs, exp);
    MpiWork(std::move(reqs), std::move(exp), fence()).wait();
  }

 public:
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> result;
    run_collective(split_record(), [&] {
      const uint64_t seq = split_seq_++;
      MPI_Comm nc = MPI_COMM_NULL;
      BRAID_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &nc));
      if (nc == MPI_COMM_NULL) return;
      std::vector<int> members;
      auto c = std::make_unique<MpiComm>(nc, monitor(), child(nc, detail::concat(seq, ":", color), members));
      c->set_node_map(node_map().restrict(members));
      result = std::move(c);
    });
    return result;
  }

 protected:
  void native_all_reduce(const void* send, void* recv, size_t count, DType dtype,
                         ReduceOp op) override {
    if (count == 0) return;
    if (count > static_cast<size_t>(INT_MAX))
      return CommBase::native_all_reduce(send, recv, count, dtype, op);
    const float div = op == ReduceOp::avg ? static_cast<float>(size_) : 0.f;
    const int c = static_cast<int>(count);
    if (dtype == DType::f32) {
      BRAID_MPI_CHECK(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, c, MPI_FLOAT,
                                    mpi_op(op), comm_));
      pass_fence(fence());
      if (div > 0.f) divide_elems(recv, recv, count, dtype, div);
    } else {
      auto* f = static_cast<float*>(workspace_.get(2, count * 4));
      to_f32(f, send, count, dtype);
      BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, f, c, MPI_FLOAT, mpi_op(op), comm_));
      pass_fence(fence());
      from_f32(recv, f, count, dtype, div);
    }
  }

  void native_all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t bytes = count * dtype_size(dtype);
    if (bytes == 0) return;
    if (bytes > static_cast<size_t>(INT_MAX))
      return CommBase::native_all_gather(send, recv, count, dtype);
    const int b = static_cast<int>(bytes);
    const bool in_place = send == static_cast<std::byte*>(recv) + static_cast<size_t>(rank_) * bytes;
    BRAID_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_));
    pass_fence(fence());
  }

  void native_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                             ReduceOp op) override {
    if (count == 0) return;
    const size_t total = count * static_cast<size_t>(size_);
    if (total > static_cast<size_t>(INT_MAX))
      return CommBase::native_reduce_scatter(send, recv, count, dtype, op);
    const float div = op == ReduceOp::avg ? static_cast<float>(size_) : 0.f;
    const bool in_place =
        recv == static_cast<const std::byte*>(send) + static_cast<size_t>(rank_) * count * dtype_size(dtype);
    if (dtype == DType::f32 && !in_place) {
      BRAID_MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), MPI_FLOAT,
                                               mpi_op(op), comm_));
      pass_fence(fence());
      if (div > 0.f) divide_elems(recv, recv, count, dtype, div);
      return;
    }
    // In place or 16-bit: reduce an f32 copy in place (result lands in its block 0),
    // so the caller's other blocks stay untouched.
    auto* f = static_cast<float*>(workspace_.get(2, total * 4));
    to_f32(f, send, total, dtype);
    BRAID_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, f, static_cast<int>(count), MPI_FLOAT,
                                             mpi_op(op), comm_));
    pass_fence(fence());
    from_f32(recv, f, count, dtype, div);
  }

  void native_all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t bytes = count * dtype_size(dtype);
    if (bytes == 0) return;
    if (bytes * static_cast<size_t>(size_) > static_cast<size_t>(INT_MAX))
      return CommBase::native_all_to_all(send, recv, count, dtype);
    const int b = static_cast<int>(bytes);
    BRAID_MPI_CHECK(MPI_Alltoall(send, b, MPI_BYTE, recv, b, MPI_BYTE, comm_));
    pass_fence(fence());
  }

  void native_broadcast(void* buf, size_t count, DType dtype, int root) override {
    const size_t bytes = count * dtype_size(dtype);
    if (bytes == 0) return;
    if (bytes > static_cast<size_t>(INT_MAX))
      return CommBase::native_broadcast(buf, count, dtype, root);
    BRAID_MPI_CHECK(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, comm_));
    pass_fence(fence());
  }

  void native_barrier() override { BRAID_MPI_CHECK(MPI_Barrier(comm_)); }

  // A window when every rank of the group runs on this node and the window's
  // backing file system has room for every rank's block; otherwise none.
  std::unique_ptr<SharedMapping> map_shared(size_t block_bytes) override {
    if (node_map().nodes() > 1) return nullptr;
    // Every rank decides alike: one short of room makes all keep private memory.
    int room = backing_room(block_bytes * static_cast<size_t>(size_) + (size_t{1} << 20)) ? 1 : 0;
    BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &room, 1, MPI_INT, MPI_MIN, comm_));
    if (!room) return nullptr;
    auto m = std::make_unique<MpiMapping>(comm_, size_, block_bytes);
    // The room may have gone to another job since: each rank faults its block in
    // now, where a full file system is an error rather than a SIGBUS later.
    int placed = m->populate(rank_, block_bytes) ? 1 : 0;
    BRAID_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &placed, 1, MPI_INT, MPI_MIN, comm_));
    if (!placed) return nullptr;  // freeing the window is collective: every rank is here
    return m;
  }

 private:
  std::mutex* fence() const { return monitor() ? &monitor()->progress_fence() : nullptr; }
  void post_send(const void* buf, size_t bytes, int peer, int tag, std::vector<MPI_Request>& reqs,
                 std::vector<int>& exp) {
    const auto* p = static_cast<const std::byte*>(buf);
    for (size_t i = 0; i < n_pieces(bytes); ++i) {
      MPI_Request r;
      BRAID_MPI_CHECK(MPI_Isend(p + i * kMaxPiece, piece_len(bytes, i), MPI_BYTE, peer, tag, comm_, &r));
      reqs.push_back(r);
      exp.push_back(-1);
    }
    count_sent(bytes);
  }
  void post_recv(void* buf, size_t bytes, int peer, int tag, std::vector<MPI_Request>& reqs,
                 std::vector<int>& exp) {
    auto* p = static_cast<std::byte*>(buf);
    for (size_t i = 0; i < n_pieces(bytes); ++i) {
      MPI_Request r;
      BRAID_MPI_CHECK(MPI_Irecv(p + i * kMaxPiece, piece_len(bytes, i), MPI_BYTE, peer, tag, comm_, &r));
      reqs.push_back(r);
      exp.push_back(piece_len(bytes, i));
    }
    count_received(bytes);
  }

  // The state of group nc split from this communicator: its members as our ranks.
  // `members` gets them too.
  std::shared_ptr<CommState> child(MPI_Comm nc, const std::string& suffix, std::vector<int>& members) const {
    MPI_Group mine, theirs;
    BRAID_MPI_CHECK(MPI_Comm_group(comm_, &mine));
    BRAID_MPI_CHECK(MPI_Comm_group(nc, &theirs));
    int n = 0, me = 0;
    BRAID_MPI_CHECK(MPI_Group_size(theirs, &n));
    BRAID_MPI_CHECK(MPI_Comm_rank(nc, &me));
    std::vector<int> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
    BRAID_MPI_CHECK(MPI_Group_translate_ranks(theirs, n, in.data(), mine, out.data()));
    MPI_Group_free(&mine);
    MPI_Group_free(&theirs);
    members = out;
    return state() ? child_state(suffix, out, me) : nullptr;
  }

  // Which node each rank is on: the world rank of the first rank of its
  // MPI_COMM_TYPE_SHARED split, gathered from every rank. Collective.
 public:
  void discover_nodes() {
    MPI_Comm node;
    BRAID_MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    int first = rank_;
    BRAID_MPI_CHECK(MPI_Bcast(&first, 1, MPI_INT, 0, node));
    MPI_Comm_free(&node);
    std::vector<int> ids(static_cast<size_t>(size_));
    BRAID_MPI_CHECK(MPI_Allgather(&first, 1, MPI_INT, ids.data(), 1, MPI_INT, comm_));
    set_node_map(NodeMap::from_ids(std::vector<long long>(ids.begin(), ids.end())));
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  uint64_t split_seq_ = 0;
};

}  // namespace

namespace {
// A rank started by a launcher dies with its parent (mpirun or its daemon), and
// not of SIGPIPE: a write to a peer whose host died fails with EPIPE instead, so
// the launcher reports the lost host, not this rank, as the cause.
void die_with_launcher() {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMI_SIZE")) return;
  signal(SIGPIPE, SIG_IGN);
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(static_cast<int>(ExitCode::rank_failure));  // it died before the call
}
}  // namespace

// The launcher daemon this rank runs under on a remote host (OpenMPI's orted,
// PRRTE's prted), 0 when the parent is something else (mpirun itself, a shell).
pid_t launcher_daemon() {
  const pid_t parent = getppid();
  std::FILE* f = std::fopen(("/proc/" + std::to_string(parent) + "/comm").c_str(), "r");
  if (!f) return 0;
  char name[32] = {0};
  const bool ok = std::fgets(name, sizeof name, f) != nullptr;
  std::fclose(f);
  const std::string comm = ok ? std::string(name, std::strcspn(name, "\n")) : "";
  return comm == "orted" || comm == "prted" ? parent : 0;
}

// A process, left behind by an aborting rank, that kills this host's launcher
// daemon if it is still there `after_s` seconds later. An abort that reaches
// mpirun ends the daemon within a second or two; one cut off from mpirun (a
// cut link) keeps its unacknowledged output queued, so TCP keepalive never
// fires and it would wait for TCP's retransmission timeout (about 15 minutes
// by default). The fork of a threaded process may only call async-signal-safe
// functions, as here.
void leave_daemon_reaper(pid_t daemon, int after_s) {
  if (daemon <= 0 || fork() != 0) return;
  setsid();  // not in the daemon's kill of its process group
  timespec ts{after_s, 0};
  while (nanosleep(&ts, &ts) != 0) {
  }
  if (kill(daemon, 0) == 0) kill(daemon, SIGKILL);
  _exit(0);
}

[[noreturn]] void abort_job(int code) {
  leave_daemon_reaper(launcher_daemon(), 5);
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    std::fprintf(stderr, "braid: the job's abort did not end this process within 5 s; exiting with code %d\n", code);
    std::fflush(stderr);
    _exit(code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  die_with_launcher();
  int init = 0;
  BRAID_MPI_CHECK(MPI_Initialized(&init));
  int provided = 0;
  if (!init) {
    BRAID_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owned_ = true;
  } else {
    BRAID_MPI_CHECK(MPI_Query_thread(&provided));
  }
  BRAID_CHECK(provided >= MPI_THREAD_MULTIPLE,
              "MPI library provides thread level ", provided,
              " but braid needs MPI_THREAD_MULTIPLE (progress threads call MPI)");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  BRAID_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  BRAID_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiRuntime::~MpiRuntime() {
  if (!owned_ || std::uncaught_exceptions() > 0) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

namespace {
// Every rank's host name (MPI_Get_processor_name), by rank.
std::vector<std::string> host_names(MPI_Comm comm) {
  int size = 0, len = 0;
  BRAID_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0'), all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  BRAID_MPI_CHECK(MPI_Get_processor_name(mine.data(), &len));
  BRAID_MPI_CHECK(MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                                MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.emplace_back(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  return out;
}
}  // namespace

std::unique_ptr<Communicator> MpiRuntime::world(const CommOptions& options) {
  options.validate();
  MPI_Comm dup, control;
  BRAID_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &control));
  BRAID_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  std::vector<int> ranks(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) ranks[static_cast<size_t>(r)] = r;
  const int me = rank_;
  auto monitor = std::make_shared<Monitor>(
      options, rank_, size_, std::make_unique<MpiComm>(control, nullptr, nullptr),
      [me](const std::string& why) {
        std::fprintf(stderr, "braid: error: rank %d: %s\n", me, why.c_str());
        std::fflush(stderr);
        abort_job(static_cast<int>(ExitCode::rank_failure));
      },
      /*separate_processes=*/true);
  monitor->set_hosts(host_names(MPI_COMM_WORLD));
  auto state = std::make_shared<CommState>("world", std::move(ranks), rank_, monitor->origin());
  auto comm = std::make_unique<MpiComm>(dup, monitor, std::move(state));
  comm->discover_nodes();
  return comm;
}

}  // namespace braid::comm
