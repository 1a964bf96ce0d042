#include "braid/comm/shared_memory.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "braid/comm/reduce.h"
#include "braid/comm/watchdog.h"
#include "braid/core/error.h"

namespace braid::comm {

SharedBuffer::SharedBuffer() = default;
SharedBuffer::SharedBuffer(std::unique_ptr<SharedAllocation> a) : a_(std::move(a)) {}
SharedBuffer::~SharedBuffer() = default;
SharedBuffer::SharedBuffer(SharedBuffer&&) noexcept = default;
SharedBuffer& SharedBuffer::operator=(SharedBuffer&&) noexcept = default;
void* SharedBuffer::data() const { return a_ && a_->bytes > 0 ? a_->mine() : nullptr; }
size_t SharedBuffer::bytes() const { return a_ ? a_->bytes : 0; }
bool SharedBuffer::zero_copy() const { return a_ && a_->zero_copy(); }

namespace zero_copy {
namespace {

enum class Kind : uint64_t { all_reduce = 1, all_gather, reduce_scatter, all_to_all, broadcast };

const char* kind_name(uint64_t k) {
  switch (static_cast<Kind>(k)) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::all_gather: return "all_gather";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::all_to_all: return "all_to_all";
    case Kind::broadcast: return "broadcast";
  }
  return "?";
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Returns once line >= target. Spins, but yields the core every 64 polls (a peer
/// may need it when ranks outnumber cores) and polls the op's signals and the
/// group's health there.
void wait_at_least(const SharedAllocation& a, const SyncLine& line, uint64_t target) {
  for (uint32_t polls = 1; line.v.load(std::memory_order_acquire) < target; ++polls) {
    if (polls % 64 == 0) {
      poll_signals();
      if (a.check_peers) a.check_peers();
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

/// One zero-copy call on `a`: publishes the arguments, waits until every rank
/// arrived with the same ones; finish() waits until every rank is done reading.
class Call {
 public:
  // in_id: the shared buffer the input is read from (a's own id when in place or
  // copied in), so ranks reading different buffers fail instead of mixing them.
  Call(SharedAllocation& a, Kind kind, size_t off, size_t count, DType dtype, ReduceOp op,
       size_t in_off = 0, uint64_t in_id = ~uint64_t{0})
      : a_(a), k_(++a.calls) {
    SharedControl& me = a.control(a.rank);
    const uint64_t src = in_id == ~uint64_t{0} ? a.id : in_id;
    const uint64_t what = (src + 1) << 32 | static_cast<uint64_t>(kind) << 16 |
                          static_cast<uint64_t>(dtype) << 8 | static_cast<uint64_t>(op);
    me.args[0].v.store(what, std::memory_order_relaxed);
    me.args[1].v.store(off, std::memory_order_relaxed);
    me.args[2].v.store(count, std::memory_order_relaxed);
    me.args[3].v.store(in_off, std::memory_order_relaxed);
    me.arrive.v.store(k_, std::memory_order_release);
    for (int q = 0; q < a.size; ++q) {
      if (q == a.rank) continue;
      wait_at_least(a, a.control(q).arrive, k_);
      // A peer can start call k+1 only after every rank left call k: one that is
      // further on abandoned a call (its rank failed) and queued more.
      const uint64_t at = a.control(q).arrive.v.load(std::memory_order_acquire);
      if (at > k_)
        throw Error(detail::concat("zero-copy collective on a shared buffer: rank ", q, " is at call ", at,
                                   " while rank ", a.rank, " is at call ", k_,
                                   "; rank ", q, " abandoned a call (see its own error)"));
      check_same(q);
    }
  }
  uint64_t k() const { return k_; }
  void finish() {
    a_.control(a_.rank).leave.v.store(k_, std::memory_order_release);
    for (int q = 0; q < a_.size; ++q)
      if (q != a_.rank) wait_at_least(a_, a_.control(q).leave, k_);
  }

 private:
  void check_same(int q) const {
    const SharedControl& me = a_.control(a_.rank);
    const SharedControl& them = a_.control(q);
    uint64_t mine[4], theirs[4];
    for (int i = 0; i < 4; ++i) {
      mine[i] = me.args[i].v.load(std::memory_order_relaxed);
      theirs[i] = them.args[i].v.load(std::memory_order_relaxed);
    }
    if (std::equal(mine, mine + 4, theirs)) return;
    throw Error(detail::concat(
        "zero-copy collective mismatch on a shared buffer (call ", k_, "): rank ", a_.rank, " called ",
        kind_name(mine[0] >> 16 & 0xffff), " at byte offset ", mine[1], " (input ", mine[3], ") with count ", mine[2],
        ", rank ", q, " called ", kind_name(theirs[0] >> 16 & 0xffff), " at byte offset ", theirs[1], " (input ", theirs[3],
        ") with count ", theirs[2],
        " (or another dtype, op or input buffer); every rank must pass the same places in the same buffers and "
        "the same arguments"));
  }
  SharedAllocation& a_;
  uint64_t k_;
};

/// Near-equal split of count into n segments: the first count % n get one more.
struct Segments {
  size_t base, rem;
  Segments(size_t count, int n) : base(count / n), rem(count % n) {}
  size_t lo(int j) const { return j * base + std::min<size_t>(j, rem); }
  size_t hi(int j) const { return lo(j + 1); }
};

/// dst = in[first] op in[first+1] op ... over every rank's copy, in rank order
/// starting at `first` (first = the caller: dst may be its own input), pairwise.
void reduce_over_ranks(void* dst, const std::function<const std::byte*(int)>& in, int first, int n,
                       size_t len, DType dtype, ReduceOp op) {
  const float div = op == ReduceOp::avg ? static_cast<float>(n) : 0.f;
  if (n == 1) {
    if (dst != in(first)) std::memcpy(dst, in(first), len * dtype_size(dtype));
    if (div > 0.f) divide_elems(dst, dst, len, dtype, div);
    return;
  }
  reduce_elems(dst, in(first), in((first + 1) % n), len, dtype, op, n == 2 ? div : 0.f);
  for (int s = 2; s < n; ++s)
    reduce_elems(dst, dst, in((first + s) % n), len, dtype, op, s == n - 1 ? div : 0.f);
}

}  // namespace

void all_reduce(SharedAllocation& out, size_t out_off, const SharedAllocation& in, size_t in_off,
                size_t count, DType dtype, ReduceOp op) {
  Call call(out, Kind::all_reduce, out_off, count, dtype, op, in_off, in.id);
  const int n = out.size, r = out.rank;
  const size_t esz = dtype_size(dtype), C = std::max<size_t>(1, kChunkBytes / esz);
  const Segments seg(count, n);
  auto src = [&](int q, size_t e) { return in.data(q) + in_off + e * esz; };
  auto dst = [&](int q, size_t e) { return out.data(q) + out_off + e * esz; };
  // Only this rank reads or writes segment r of any rank's input and output during
  // the call, so each chunk is pushed to every rank as soon as it is reduced, from
  // this rank's cache, and nobody waits on anybody until the end.
  for (size_t e = seg.lo(r); e < seg.hi(r); e += C) {
    const size_t len = std::min(C, seg.hi(r) - e);
    reduce_over_ranks(dst(r, e), [&](int q) { return src(q, e); }, r, n, len, dtype, op);
    for (int s = 1; s < n; ++s) std::memcpy(dst((r + s) % n, e), dst(r, e), len * esz);
  }
  call.finish();
}

void all_gather(SharedAllocation& out, size_t out_off, const void* own, size_t count, DType dtype) {
  Call call(out, Kind::all_gather, out_off, count, dtype, ReduceOp::sum);
  const size_t blk = count * dtype_size(dtype);
  const int r = out.rank;
  // Block r of every rank's output is written by rank r only: push it everywhere.
  for (int s = 0; s < out.size; ++s) {
    std::byte* to = out.data((r + s) % out.size) + out_off + r * blk;
    if (to != own) std::memcpy(to, own, blk);
  }
  call.finish();
}

void reduce_scatter(SharedAllocation& a, size_t off, void* recv, size_t count, DType dtype,
                    ReduceOp op) {
  Call call(a, Kind::reduce_scatter, off, count, dtype, op);
  const size_t blk = count * dtype_size(dtype);
  const size_t mine = static_cast<size_t>(a.rank) * blk;
  reduce_over_ranks(recv, [&](int q) { return a.data(q) + off + mine; }, a.rank, a.size, count, dtype, op);
  call.finish();
}

void all_to_all(SharedAllocation& a, size_t off, void* recv, size_t count, DType dtype) {
  Call call(a, Kind::all_to_all, off, count, dtype, ReduceOp::sum);
  const size_t blk = count * dtype_size(dtype);
  auto* out = static_cast<std::byte*>(recv);
  for (int s = 0; s < a.size; ++s) {
    const int q = (a.rank + s) % a.size;
    std::memcpy(out + q * blk, a.data(q) + off + static_cast<size_t>(a.rank) * blk, blk);
  }
  call.finish();
}

void all_to_all(SharedAllocation& out, size_t out_off, const void* send, size_t count, DType dtype) {
  Call call(out, Kind::all_to_all, out_off, count, dtype, ReduceOp::sum, ~size_t{0});
  const size_t blk = count * dtype_size(dtype);
  const auto* in = static_cast<const std::byte*>(send);
  const size_t r = static_cast<size_t>(out.rank);
  // Block r of every rank's output is written by rank r only: push it.
  for (int s = 0; s < out.size; ++s) {
    const int q = (out.rank + s) % out.size;
    std::memcpy(out.data(q) + out_off + r * blk, in + static_cast<size_t>(q) * blk, blk);
  }
  call.finish();
}

void broadcast(SharedAllocation& a, size_t off, size_t count, DType dtype, int root) {
  // The root goes in the input-offset slot, so ranks naming different roots fail.
  Call call(a, Kind::broadcast, off, count, dtype, ReduceOp::sum, static_cast<size_t>(root));
  if (a.rank != root) std::memcpy(a.data(a.rank) + off, a.data(root) + off, count * dtype_size(dtype));
  call.finish();
}

}  // namespace zero_copy
}  // namespace braid::comm
