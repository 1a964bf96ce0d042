// Collective test bodies written once, parameterised on a Communicator&, and run both
// on the local backend (tests/dist, ranks as threads, world sizes 1..8) and under
// mpirun (tests/mpi, np 2/3/4). Data is closed-form, value = f(seed, rank, index),
// small integers so every sum is exact in f32, bf16 and f16 and results are compared
// bit for bit (nccl-tests "verifiable" / gloo test style).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "braid/comm/comm_base.h"
#include "braid/comm/communicator.h"
#include "braid/comm/shared_memory.h"
#include "braid/core/error.h"
#include "braid/core/span_sink.h"
#include "braid/core/dtype.h"

namespace braid::test_cases {

using comm::Algorithm;
using comm::Communicator;
using comm::ReduceOp;

/// Integer in [-4, 4]: |sum over 8 ranks| <= 32, exact in every dtype.
inline float value(int seed, int rank, size_t i) {
  return static_cast<float>(static_cast<int>((rank * 131 + i * 7 + seed * 17) % 9) - 4);
}

/// Elements stored in `dtype` in a byte vector.
struct Buf {
  DType dt;
  std::vector<std::byte> b;
  Buf(DType t, size_t n) : dt(t), b(n * dtype_size(t) + 1) {}  // +1: never a null data()
  void* data() { return b.data(); }
  std::byte* at(size_t i) { return b.data() + i * dtype_size(dt); }
  void set(size_t i, float v) { store_from_f32(b.data(), i, dt, v); }
  float get(size_t i) const { return load_as_f32(b.data(), i, dt); }
};

/// v stored in dtype `dt` in `out` (at most 4 bytes): the bytes Buf::set writes,
/// without a heap allocation (the oracles call this once per element, and an
/// allocation per element dominated the suites under ASan).
inline void encode(DType dt, float v, std::byte* out) { store_from_f32(out, 0, dt, v); }

inline float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::max: return a > b ? a : b;
    case ReduceOp::min: return a < b ? a : b;
    default: return a + b;
  }
}

/// Expected op over ranks 0..n-1 of value(seed, r, i), rounded to dtype exactly as
/// the implementation does (f32 arithmetic, avg divides the f32 sum once).
inline float expected_reduce(int seed, int n, size_t i, ReduceOp op, DType dt) {
  float acc = value(seed, 0, i);
  for (int r = 1; r < n; ++r) acc = combine(op, acc, value(seed, r, i));
  if (op == ReduceOp::avg) acc = acc / static_cast<float>(n);
  std::byte t[4];
  encode(dt, acc, t);
  return load_as_f32(t, 0, dt);
}

/// Compares bit patterns element by element; reports the first few mismatches.
inline void expect_elems(const Buf& got, const std::vector<float>& want, size_t offset,
                         const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    std::byte w[4];
    encode(got.dt, want[i], w);
    if (std::memcmp(got.b.data() + (offset + i) * dtype_size(got.dt), w, dtype_size(got.dt)) != 0) {
      if (++bad <= 3)
        ADD_FAILURE() << what << ": element " << i << " = " << got.get(offset + i) << ", want "
                      << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

inline std::string ctx(const Communicator& c, const char* name, size_t count, DType dt,
                       Algorithm a, bool inplace, const char* op = "") {
  return std::string(name) + " rank " + std::to_string(c.rank()) + "/" + std::to_string(c.size()) +
         " count " + std::to_string(count) + " " + dtype_name(dt) + " " + op +
         (a == Algorithm::ring ? " ring" : " native") + (inplace ? " in-place" : "");
}

// ---- single cases ----

inline void all_reduce_case(Communicator& c, size_t count, DType dt, ReduceOp op, Algorithm a,
                            bool inplace, int seed = 1) {
  const int n = c.size(), r = c.rank();
  Buf in(dt, count), out(dt, count);
  for (size_t i = 0; i < count; ++i) in.set(i, value(seed, r, i));
  std::vector<float> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = expected_reduce(seed, n, i, op, dt);
  if (inplace) {
    c.all_reduce(in.data(), in.data(), count, dt, op, a);
    expect_elems(in, want, 0, ctx(c, "all_reduce", count, dt, a, true, comm::reduce_op_name(op)));
  } else {
    const Buf before = in;
    c.all_reduce(in.data(), out.data(), count, dt, op, a);
    expect_elems(out, want, 0, ctx(c, "all_reduce", count, dt, a, false, comm::reduce_op_name(op)));
    EXPECT_TRUE(before.b == in.b) << "all_reduce modified its send buffer";
  }
}

inline void all_gather_case(Communicator& c, size_t count, DType dt, Algorithm a, bool inplace,
                            int seed = 2) {
  const int n = c.size(), r = c.rank();
  Buf out(dt, count * n), in(dt, count);
  std::vector<float> want(count * n);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) want[q * count + i] = value(seed, q, i);
  for (size_t i = 0; i < count; ++i) {
    in.set(i, value(seed, r, i));
    if (inplace) out.set(r * count + i, value(seed, r, i));
  }
  const void* send = inplace ? static_cast<const void*>(out.at(r * count)) : in.data();
  c.all_gather(send, out.data(), count, dt, a);
  expect_elems(out, want, 0, ctx(c, "all_gather", count, dt, a, inplace));
}

inline void reduce_scatter_case(Communicator& c, size_t count, DType dt, ReduceOp op, Algorithm a,
                                bool inplace, int seed = 3) {
  const int n = c.size(), r = c.rank();
  Buf in(dt, count * n), out(dt, count);
  for (size_t i = 0; i < count * n; ++i) in.set(i, value(seed, r, i));
  std::vector<float> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = expected_reduce(seed, n, r * count + i, op, dt);
  const std::string what = ctx(c, "reduce_scatter", count, dt, a, inplace, comm::reduce_op_name(op));
  if (inplace) {
    const Buf before = in;
    c.reduce_scatter(in.data(), in.at(r * count), count, dt, op, a);
    expect_elems(in, want, r * count, what);
    // Blocks other than ours are left untouched.
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      EXPECT_EQ(0, std::memcmp(in.at(q * count), before.b.data() + q * count * dtype_size(dt),
                               count * dtype_size(dt)))
          << what << ": block " << q << " modified";
    }
  } else {
    c.reduce_scatter(in.data(), out.data(), count, dt, op, a);
    expect_elems(out, want, 0, what);
  }
}

inline void all_to_all_case(Communicator& c, size_t count, DType dt, Algorithm a, int seed = 4) {
  const int n = c.size(), r = c.rank();
  Buf in(dt, count * n), out(dt, count * n);
  // Block j of rank q holds value(seed, q, j*count + i).
  for (size_t i = 0; i < count * n; ++i) in.set(i, value(seed, r, i));
  std::vector<float> want(count * n);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) want[q * count + i] = value(seed, q, r * count + i);
  c.all_to_all(in.data(), out.data(), count, dt, a);
  expect_elems(out, want, 0, ctx(c, "all_to_all", count, dt, a, false));
}

inline void broadcast_case(Communicator& c, size_t count, DType dt, int root, Algorithm a,
                           int seed = 5) {
  Buf buf(dt, count);
  for (size_t i = 0; i < count; ++i) buf.set(i, c.rank() == root ? value(seed, root, i) : 99.f);
  std::vector<float> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = value(seed, root, i);
  c.broadcast(buf.data(), count, dt, root, a);
  expect_elems(buf, want, 0, ctx(c, "broadcast", count, dt, a, false) + " root " + std::to_string(root));
}

// ---- suites ----

inline std::vector<size_t> counts_for(int n) {
  return {0, 1, 2, 7, 13, 1021, static_cast<size_t>(5 * n + 1)};
}
constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
constexpr Algorithm kAlgos[] = {Algorithm::ring, Algorithm::native};

/// Sets the ring chunk size (bytes) when the communicator is one of ours; returns the
/// old value. Small chunks drive the pipelining / hazard paths with small counts.
inline size_t set_chunk(Communicator& c, size_t bytes) {
  auto* b = dynamic_cast<comm::CommBase*>(&c);
  if (!b) return 0;
  size_t old = b->ring_options().chunk_bytes;
  b->ring_options().chunk_bytes = bytes;
  return old;
}

/// Which all-reduce algorithm "ours" uses: the default size-based choice, the ring at
/// every size, or recursive halving/doubling at every size (power-of-two groups > 2).
enum class ArMode { defaults, ring_only, halving };
inline void set_all_reduce_mode(Communicator& c, ArMode m) {
  auto* b = dynamic_cast<comm::CommBase*>(&c);
  if (!b) return;
  const comm::algo::RingOptions d;
  auto& o = b->ring_options();
  o.doubling_all_reduce_max_bytes = m == ArMode::defaults ? d.doubling_all_reduce_max_bytes : 0;
  o.doubling_all_reduce_max_bytes_2ranks =
      m == ArMode::defaults ? d.doubling_all_reduce_max_bytes_2ranks : 0;
  o.halving_all_reduce_max_bytes = m == ArMode::defaults ? d.halving_all_reduce_max_bytes
                                   : m == ArMode::halving ? size_t{1} << 40
                                                          : 0;
}
inline void set_doubling(Communicator& c, bool on) {
  set_all_reduce_mode(c, on ? ArMode::defaults : ArMode::ring_only);
}

inline void all_reduce_suite(Communicator& c) {
  for (ArMode m : {ArMode::defaults, ArMode::ring_only, ArMode::halving}) {
    set_all_reduce_mode(c, m);
    for (size_t count : counts_for(c.size()))
      for (DType dt : kDtypes)
        for (ReduceOp op : kOps)
          for (Algorithm a : kAlgos)
            for (bool ip : {false, true}) all_reduce_case(c, count, dt, op, a, ip);
  }
  // Ring only from here. Many chunks per segment, odd chunk sizes, depth > chunks and
  // < chunks.
  set_all_reduce_mode(c, ArMode::ring_only);
  const size_t old = set_chunk(c, 12);
  for (size_t count : {size_t{7}, size_t{13}, size_t{1021}})
    for (DType dt : kDtypes)
      for (bool ip : {false, true}) all_reduce_case(c, count, dt, ReduceOp::avg, Algorithm::ring, ip);
  set_chunk(c, 256);
  for (bool ip : {false, true}) all_reduce_case(c, 1021, DType::bf16, ReduceOp::sum, Algorithm::ring, ip);
  set_chunk(c, old);
  set_doubling(c, true);
}

inline void all_reduce_large(Communicator& c) {
  const size_t count = (size_t{1} << 20) + 3;  // several 1 MiB chunks per segment
  for (Algorithm a : kAlgos)
    for (bool ip : {false, true}) all_reduce_case(c, count, DType::f32, ReduceOp::sum, a, ip);
  all_reduce_case(c, count, DType::bf16, ReduceOp::avg, Algorithm::ring, false);
  // Recursive doubling at a size with several chunks of the ring (when it applies).
  auto* b = dynamic_cast<comm::CommBase*>(&c);
  if (b) {
    const auto saved = b->ring_options();
    b->ring_options().doubling_all_reduce_max_bytes = size_t{1} << 30;
    b->ring_options().doubling_all_reduce_max_bytes_2ranks = size_t{1} << 30;
    for (bool ip : {false, true}) all_reduce_case(c, count, DType::f32, ReduceOp::max, Algorithm::ring, ip);
    b->ring_options() = saved;
    set_all_reduce_mode(c, ArMode::halving);
    for (bool ip : {false, true}) all_reduce_case(c, count + 2, DType::bf16, ReduceOp::avg, Algorithm::ring, ip);
    b->ring_options() = saved;
  }
}

/// Runs `body` once per algorithm variant of "ours", forced through the tuning
/// options (so every code path is tested, not only the one the size picks), then
/// restores the defaults.
template <typename Set, typename Body>
inline void for_each_variant(Communicator& c, std::initializer_list<Set> sets, Body body) {
  auto* b = dynamic_cast<comm::CommBase*>(&c);
  if (!b) {
    body();
    return;
  }
  const auto saved = b->ring_options();
  for (const Set& set : sets) {
    b->ring_options() = saved;
    set(b->ring_options());
    body();
  }
  b->ring_options() = saved;
}
using OptSet = void (*)(comm::algo::RingOptions&);

inline void all_gather_suite(Communicator& c) {
  const OptSet defaults = [](comm::algo::RingOptions&) {};
  const OptSet ring = [](comm::algo::RingOptions& o) {
    o.doubling_all_gather_max_bytes = 0;
    o.direct_all_gather_max_bytes = 0;
  };
  const OptSet direct = [](comm::algo::RingOptions& o) {
    o.doubling_all_gather_max_bytes = 0;
    o.direct_all_gather_max_bytes = size_t{1} << 40;
  };
  const OptSet doubling = [](comm::algo::RingOptions& o) { o.doubling_all_gather_max_bytes = size_t{1} << 40; };
  for_each_variant(c, {defaults, ring, direct, doubling}, [&] {
    for (size_t count : counts_for(c.size()))
      for (DType dt : kDtypes)
        for (Algorithm a : kAlgos)
          for (bool ip : {false, true}) all_gather_case(c, count, dt, a, ip);
  });
  const size_t old = set_chunk(c, 12);
  for (bool ip : {false, true}) all_gather_case(c, 1021, DType::f16, Algorithm::ring, ip);
  set_chunk(c, old);
  all_gather_case(c, (size_t{1} << 18) + 3, DType::f32, Algorithm::ring, false);
}

inline void reduce_scatter_suite(Communicator& c) {
  for (size_t count : counts_for(c.size()))
    for (DType dt : kDtypes)
      for (ReduceOp op : kOps)
        for (Algorithm a : kAlgos)
          for (bool ip : {false, true}) reduce_scatter_case(c, count, dt, op, a, ip);
  const size_t old = set_chunk(c, 12);
  for (bool ip : {false, true})
    for (DType dt : kDtypes) reduce_scatter_case(c, 1021, dt, ReduceOp::sum, Algorithm::ring, ip);
  set_chunk(c, old);
  reduce_scatter_case(c, (size_t{1} << 18) + 3, DType::f32, ReduceOp::sum, Algorithm::ring, false);
}

inline void all_to_all_suite(Communicator& c) {
  const OptSet direct = [](comm::algo::RingOptions& o) { o.direct_all_to_all = true; };
  const OptSet pairwise = [](comm::algo::RingOptions& o) { o.direct_all_to_all = false; };
  for_each_variant(c, {direct, pairwise}, [&] {
    for (size_t count : counts_for(c.size()))
      for (DType dt : kDtypes)
        for (Algorithm a : kAlgos) all_to_all_case(c, count, dt, a);
  });
}

inline void broadcast_suite(Communicator& c) {
  const OptSet defaults = [](comm::algo::RingOptions&) {};
  const OptSet tree_or_chain = [](comm::algo::RingOptions& o) {
    o.flat_broadcast_max_bytes = 0;
    o.scatter_broadcast_max_bytes = 0;
  };
  const OptSet flat = [](comm::algo::RingOptions& o) { o.flat_broadcast_max_bytes = size_t{1} << 40; };
  const OptSet scatter = [](comm::algo::RingOptions& o) {
    o.flat_broadcast_max_bytes = 0;
    o.scatter_broadcast_max_bytes = size_t{1} << 40;
  };
  for_each_variant(c, {defaults, tree_or_chain, flat, scatter}, [&] {
    for (int root = 0; root < c.size(); ++root)
      for (size_t count : counts_for(c.size()))
        for (Algorithm a : kAlgos) broadcast_case(c, count, DType::f32, root, a);
  });
  // Pipelined chain: above chain_broadcast_min_bytes, several chunks.
  const size_t old = set_chunk(c, 4096);
  for_each_variant(c, {tree_or_chain}, [&] {
    for (int root : {0, c.size() - 1})
      for (DType dt : {DType::f32, DType::bf16})
        broadcast_case(c, (size_t{1} << 17) + 5, dt, root, Algorithm::ring);
  });
  set_chunk(c, old);
  broadcast_case(c, (size_t{1} << 20) + 3, DType::f32, 0, Algorithm::ring);
}

inline void barrier_suite(Communicator& c) {
  for (int i = 0; i < 5; ++i) c.barrier();
}

/// Ring of point-to-point messages: blocking, non-blocking, sendrecv, tag matching.
inline void p2p_suite(Communicator& c) {
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4099}, size_t{1} << 20}) {
    std::vector<uint8_t> s(bytes), got(bytes), want(bytes);
    for (size_t i = 0; i < bytes; ++i) {
      s[i] = static_cast<uint8_t>(r * 31 + i);
      want[i] = static_cast<uint8_t>(prev * 31 + i);
    }
    // isend + irecv, waited in reverse order.
    auto rw = c.irecv(got.data(), bytes, prev, 7);
    auto sw = c.isend(s.data(), bytes, next, 7);
    rw->wait();
    sw->wait();
    rw->wait();  // waiting twice is allowed
    EXPECT_TRUE(got == want) << "isend/irecv " << bytes << " bytes rank " << r;
    // sendrecv
    std::fill(got.begin(), got.end(), 0);
    c.sendrecv(s.data(), bytes, next, got.data(), bytes, prev, 8);
    EXPECT_TRUE(got == want) << "sendrecv " << bytes << " bytes rank " << r;
  }
  // Tags keep messages apart: two tags received in the opposite order they were sent.
  if (n > 1) {
    int a = 100 + r, b = 200 + r, ga = -1, gb = -1;
    auto s1 = c.isend(&a, sizeof a, next, 1);
    auto s2 = c.isend(&b, sizeof b, next, 2);
    c.recv(&gb, sizeof gb, prev, 2);
    c.recv(&ga, sizeof ga, prev, 1);
    s1->wait();
    s2->wait();
    EXPECT_EQ(ga, 100 + prev);
    EXPECT_EQ(gb, 200 + prev);
    // Blocking send / recv between rank 0 and the last rank (even/odd ordering avoids
    // relying on buffering).
    int v = 42 + r, g = -1;
    if (r == 0) {
      c.send(&v, sizeof v, n - 1, 3);
      c.recv(&g, sizeof g, n - 1, 3);
      EXPECT_EQ(g, 42 + n - 1);
    } else if (r == n - 1) {
      c.recv(&g, sizeof g, 0, 3);
      c.send(&v, sizeof v, 0, 3);
      EXPECT_EQ(g, 42);
    }
  }
}

/// Several async collectives in flight, then waited (in reverse order), plus a
/// blocking collective queued behind them.
inline void async_suite(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (Algorithm a : kAlgos) {
    const size_t count = 1021;
    Buf ar1(DType::f32, count), ar2(DType::bf16, count + 5), ag_in(DType::f32, 13),
        ag_out(DType::f32, 13 * n), rs_in(DType::f16, 7 * n), rs_out(DType::f16, 7);
    for (size_t i = 0; i < count; ++i) ar1.set(i, value(11, r, i));
    for (size_t i = 0; i < count + 5; ++i) ar2.set(i, value(12, r, i));
    for (size_t i = 0; i < 13; ++i) ag_in.set(i, value(13, r, i));
    for (size_t i = 0; i < 7 * static_cast<size_t>(n); ++i) rs_in.set(i, value(14, r, i));
    std::vector<comm::WorkPtr> ws;
    ws.push_back(c.all_reduce_async(ar1.data(), ar1.data(), count, DType::f32, ReduceOp::sum, a));
    ws.push_back(c.all_reduce_async(ar2.data(), ar2.data(), count + 5, DType::bf16, ReduceOp::max, a));
    ws.push_back(c.all_gather_async(ag_in.data(), ag_out.data(), 13, DType::f32, a));
    ws.push_back(c.reduce_scatter_async(rs_in.data(), rs_out.data(), 7, DType::f16, ReduceOp::avg, a));
    // A blocking collective issued while the queue is busy runs after it, not interleaved.
    all_reduce_case(c, 13, DType::f32, ReduceOp::min, a, false, 15);
    for (auto it = ws.rbegin(); it != ws.rend(); ++it) (*it)->wait();
    for (auto& w : ws) EXPECT_TRUE(w->test());
    std::vector<float> w1(count), w2(count + 5), w3(13 * n), w4(7);
    for (size_t i = 0; i < count; ++i) w1[i] = expected_reduce(11, n, i, ReduceOp::sum, DType::f32);
    for (size_t i = 0; i < count + 5; ++i) w2[i] = expected_reduce(12, n, i, ReduceOp::max, DType::bf16);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < 13; ++i) w3[q * 13 + i] = value(13, q, i);
    for (size_t i = 0; i < 7; ++i) w4[i] = expected_reduce(14, n, r * 7 + i, ReduceOp::avg, DType::f16);
    expect_elems(ar1, w1, 0, "async all_reduce f32");
    expect_elems(ar2, w2, 0, "async all_reduce bf16 max");
    expect_elems(ag_out, w3, 0, "async all_gather");
    expect_elems(rs_out, w4, 0, "async reduce_scatter f16 avg");
  }
}

/// Even / odd sub-groups (and a reversed-key split), collectives inside them.
inline void split_suite(Communicator& c) {
  const int n = c.size(), r = c.rank();
  auto sub = c.split(r % 2, r);
  ASSERT_TRUE(sub);
  const int sub_n = (n + 1 - r % 2) / 2;
  EXPECT_EQ(sub->size(), sub_n);
  EXPECT_EQ(sub->rank(), r / 2);
  // Sum of global ranks within the group, in every dtype and algorithm.
  for (Algorithm a : kAlgos) {
    float v[3] = {static_cast<float>(r), 1.f, static_cast<float>(-r)};
    sub->all_reduce(v, v, 3, DType::f32, ReduceOp::sum, a);
    float want = 0;
    for (int q = r % 2; q < n; q += 2) want += static_cast<float>(q);
    EXPECT_EQ(v[0], want);
    EXPECT_EQ(v[1], static_cast<float>(sub_n));
    EXPECT_EQ(v[2], -want);
    all_reduce_case(*sub, 1021, DType::bf16, ReduceOp::avg, a, true);
    all_gather_case(*sub, 13, DType::f16, a, false);
    reduce_scatter_case(*sub, 7, DType::f32, ReduceOp::sum, a, false);
    all_to_all_case(*sub, 5, DType::f32, a);
    broadcast_case(*sub, 1021, DType::f32, sub->size() - 1, a);
  }
  async_suite(*sub);
  // The parent keeps working while the child exists.
  all_reduce_case(c, 13, DType::f32, ReduceOp::sum, Algorithm::ring, false);
  // Reversed key: new rank order is the reverse of the global one.
  auto rev = c.split(0, -r);
  ASSERT_TRUE(rev);
  EXPECT_EQ(rev->size(), n);
  EXPECT_EQ(rev->rank(), n - 1 - r);
  int g[64] = {};
  int me = r;
  rev->all_gather(&me, g, 1, DType::f32, Algorithm::ring);  // 4-byte carrier, bits only
  for (int q = 0; q < n; ++q) EXPECT_EQ(g[q], n - 1 - q);
  // Negative colour: not a member.
  auto none = c.split(r == 0 ? -1 : 1, 0);
  EXPECT_EQ(none == nullptr, r == 0);
  if (none) {
    EXPECT_EQ(none->size(), n - 1);
    all_reduce_case(*none, 7, DType::f32, ReduceOp::max, Algorithm::ring, false);
  }
}

/// The worked examples of the specification, verbatim (2 ranks).
inline void worked_examples(Communicator& c) {
  ASSERT_EQ(c.size(), 2);
  const int r = c.rank();
  for (Algorithm a : kAlgos) {
    std::vector<float> x = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4}, y(2);
    c.all_reduce(x.data(), y.data(), 2, DType::f32, ReduceOp::sum, a);
    EXPECT_EQ(y, (std::vector<float>{4, 6}));
    float z = 0;
    c.reduce_scatter(x.data(), &z, 1, DType::f32, ReduceOp::sum, a);
    EXPECT_EQ(z, r == 0 ? 4.f : 6.f);
    const float A = 10, B = 20, A0 = 1, A1 = 2, B0 = 3, B1 = 4;
    float mine = r == 0 ? A : B, g[2];
    c.all_gather(&mine, g, 1, DType::f32, a);
    EXPECT_EQ(g[0], A);
    EXPECT_EQ(g[1], B);
    float s[2] = {r == 0 ? A0 : B0, r == 0 ? A1 : B1}, o[2];
    c.all_to_all(s, o, 1, DType::f32, a);
    if (r == 0) {
      EXPECT_EQ(o[0], A0);
      EXPECT_EQ(o[1], B0);
    } else {
      EXPECT_EQ(o[0], A1);
      EXPECT_EQ(o[1], B1);
    }
  }
}

/// Traffic accounting: a ring all-reduce of N f32 moves 2 (n-1)/n N elements
/// per rank each way (up to uneven segments); the flat ring also on groups that span
/// nodes (whose own path moves the bytes otherwise).
inline void bytes_suite(Communicator& c) {
  const int n = c.size();
  const size_t count = 1000 * static_cast<size_t>(n);
  std::vector<float> v(count, 1.f);
  set_doubling(c, false);
  auto* b = dynamic_cast<comm::CommBase*>(&c);
  if (b) b->ring_options().hierarchical = false;
  const uint64_t s0 = c.bytes_sent(), r0 = c.bytes_received();
  c.all_reduce(v.data(), v.data(), count, DType::f32, ReduceOp::sum, Algorithm::ring);
  if (b) b->ring_options().hierarchical = true;
  set_doubling(c, true);
  const uint64_t want = n == 1 ? 0 : 2 * static_cast<uint64_t>(n - 1) * 1000 * 4;
  EXPECT_EQ(c.bytes_sent() - s0, want);
  EXPECT_EQ(c.bytes_received() - r0, want);
  for (float x : v) ASSERT_EQ(x, static_cast<float>(n));
}

// ---- shared (zero-copy) buffers ----

/// Elements of `dt` at element offset `off` of a shared buffer.
struct SharedView {
  comm::SharedBuffer& sb;
  DType dt;
  size_t off;
  std::byte* at(size_t i) const { return sb.as<std::byte>() + (off + i) * dtype_size(dt); }
  void set(size_t i, float v) const { store_from_f32(at(0), i, dt, v); }
  /// A copy of n elements, for expect_elems.
  Buf copy(size_t n) const {
    Buf b(dt, n);
    if (n) std::memcpy(b.data(), at(0), n * dtype_size(dt));
    return b;
  }
};

/// Every zero-copy collective on one (count, dtype, op): in place and out of place,
/// the input in the same shared buffer, another one or private memory, at element
/// offsets that differ from 0 and from each other; bitwise against the closed form.
inline void shared_case(Communicator& c, comm::SharedBuffer& A, comm::SharedBuffer& B, size_t count,
                        DType dt, ReduceOp op) {
  const int n = c.size(), r = c.rank();
  const size_t N = count * n;
  const std::string tag = std::string(" on shared buffers, count ") + std::to_string(count) + " " +
                          dtype_name(dt) + " " + comm::reduce_op_name(op) + " rank " + std::to_string(r) +
                          "/" + std::to_string(n);
  std::vector<float> want(count);
  for (size_t i = 0; i < count; ++i) want[i] = expected_reduce(1, n, i, op, dt);
  const SharedView a{A, dt, 3}, b{B, dt, 5}, a2{A, dt, 3 + count + 1};
  // all-reduce in place.
  for (size_t i = 0; i < count; ++i) a.set(i, value(1, r, i));
  c.all_reduce(a.at(0), a.at(0), count, dt, op);
  expect_elems(a.copy(count), want, 0, "all_reduce in place" + tag);
  // Out of place: input in another shared buffer (read where it lies), then in the same
  // one, then private (copied in first). The input stays as it was.
  for (const SharedView* in : {&b, &a2}) {
    for (size_t i = 0; i < count; ++i) in->set(i, value(1, r, i));
    const Buf before = in->copy(count);
    c.all_reduce(in->at(0), a.at(0), count, dt, op);
    expect_elems(a.copy(count), want, 0, "all_reduce out of place" + tag);
    EXPECT_TRUE(before.b == in->copy(count).b) << "all_reduce modified its input" << tag;
  }
  Buf priv(dt, count);
  for (size_t i = 0; i < count; ++i) priv.set(i, value(1, r, i));
  c.all_reduce(priv.data(), a.at(0), count, dt, op);
  expect_elems(a.copy(count), want, 0, "all_reduce from private input" + tag);

  // all-gather into shared memory, in place and from a private block.
  std::vector<float> gathered(N);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) gathered[q * count + i] = value(2, q, i);
  for (bool inplace : {true, false}) {
    for (size_t i = 0; i < N; ++i) a.set(i, 99.f);
    Buf mine(dt, count);
    for (size_t i = 0; i < count; ++i) (inplace ? a.set(r * count + i, value(2, r, i)) : mine.set(i, value(2, r, i)));
    c.all_gather(inplace ? static_cast<void*>(a.at(r * count)) : mine.data(), a.at(0), count, dt);
    expect_elems(a.copy(N), gathered, 0, std::string("all_gather") + (inplace ? " in place" : "") + tag);
  }

  // reduce-scatter and all-to-all from shared memory.
  std::vector<float> block(count), swapped(N);
  for (size_t i = 0; i < count; ++i) block[i] = expected_reduce(3, n, r * count + i, op, dt);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) swapped[q * count + i] = value(4, q, r * count + i);
  for (bool inplace : {false, true}) {
    for (size_t i = 0; i < N; ++i) a.set(i, value(3, r, i));
    const Buf before = a.copy(N);
    Buf out(dt, count);
    c.reduce_scatter(a.at(0), inplace ? static_cast<void*>(a.at(r * count)) : out.data(), count, dt, op);
    const Buf after = a.copy(N);
    expect_elems(inplace ? after : out, block, inplace ? r * count : 0,
                 std::string("reduce_scatter") + (inplace ? " in place" : "") + tag);
    for (int q = 0; q < n; ++q)
      if (q != r || !inplace) {
        EXPECT_EQ(0, std::memcmp(after.b.data() + q * count * dtype_size(dt), before.b.data() + q * count * dtype_size(dt),
                                 count * dtype_size(dt)))
            << "reduce_scatter modified block " << q << " of its input" << tag;
      }
  }
  // all-to-all pulls from a shared input into private memory, and pushes into a
  // shared output (from private or shared memory).
  for (size_t i = 0; i < N; ++i) a.set(i, value(4, r, i));
  Buf out(dt, N), in(dt, N);
  c.all_to_all(a.at(0), out.data(), count, dt);
  expect_elems(out, swapped, 0, "all_to_all from shared memory" + tag);
  for (size_t i = 0; i < N; ++i) in.set(i, value(4, r, i));
  c.all_to_all(in.data(), b.at(0), count, dt);
  expect_elems(b.copy(N), swapped, 0, "all_to_all into shared memory" + tag);
  for (size_t i = 0; i < N; ++i) b.set(i, 99.f);
  c.all_to_all(a.at(0), b.at(0), count, dt);
  expect_elems(b.copy(N), swapped, 0, "all_to_all between shared buffers" + tag);

  for (int root : {0, n - 1}) {
    std::vector<float> bcast(count);
    for (size_t i = 0; i < count; ++i) {
      bcast[i] = value(5, root, i);
      a.set(i, r == root ? bcast[i] : 99.f);
    }
    c.broadcast(a.at(0), count, dt, root);
    expect_elems(a.copy(count), bcast, 0, "broadcast from " + std::to_string(root) + tag);
  }
}

/// Collectives on memory from alloc_shared: zero-copy on both backends when the ranks
/// share a node, private memory (and the usual paths) when they span nodes; every dtype and op, counts from 0 to several all-reduce
/// chunks per segment.
inline void shared_buffer_suite(Communicator& c) {
  const int n = c.size();
  // f32: every all-reduce segment a full chunk and a few elements more.
  const size_t big = comm::zero_copy::kChunkBytes / 4 * n + 3 * n + 1;
  const size_t bytes = (big * std::max(n, 2) + 64) * 4;  // n blocks, or 2 all-reduce buffers
  comm::SharedBuffer A = c.alloc_shared(bytes), B = c.alloc_shared(bytes);
  ASSERT_EQ(A.zero_copy(), B.zero_copy());
  const bool one_node = c.node_map().nodes() == 1;
  if (!one_node) {
    ASSERT_FALSE(A.zero_copy()) << "a group that spans nodes gets private memory";
  } else if (c.backend() == "local") {
    ASSERT_TRUE(A.zero_copy()) << "threads always share memory";
  }
  if (!A.zero_copy() && one_node) {  // every rank decides alike, so every rank skips
    GTEST_SKIP() << "alloc_shared gave private memory: /dev/shm lacks room for 2 x " << bytes << " bytes on "
                 << n << " ranks";
  }
  ASSERT_EQ(A.bytes(), bytes);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(A.data()) % (A.zero_copy() ? 4096 : 64), 0u);
  for (DType dt : kDtypes)
    for (ReduceOp op : kOps)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1021}, static_cast<size_t>(5 * n + 1)})
        shared_case(c, A, B, count, dt, op);
  shared_case(c, A, B, big, DType::f32, ReduceOp::sum);
  shared_case(c, A, B, big / 2, DType::bf16, ReduceOp::avg);
  if (!one_node) return;
  // Traffic: an all-reduce moves 2 (n-1)/n of the buffer each way, as the ring does.
  const uint64_t s0 = c.bytes_sent();
  c.all_reduce(A.data(), A.data(), 1000 * n, DType::f32, ReduceOp::sum);
  EXPECT_EQ(c.bytes_sent() - s0, 2 * static_cast<uint64_t>(n - 1) * 1000 * 4);
}

/// Ranks that pass different offsets into a shared buffer all fail naming both calls.
inline void shared_mismatch_suite(Communicator& c) {
  if (c.size() < 2) return;
  comm::SharedBuffer A = c.alloc_shared(4096);
  if (!A.zero_copy()) {
    GTEST_SKIP() << "alloc_shared gave private memory: /dev/shm lacks room";
  }
  float* x = A.as<float>() + (c.rank() == 0 ? 0 : 16);
  try {
    c.all_reduce(x, x, 8, DType::f32, ReduceOp::sum);
    ADD_FAILURE() << "rank " << c.rank() << ": a mismatched zero-copy all_reduce did not fail";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("zero-copy collective mismatch"), std::string::npos) << m;
    EXPECT_NE(m.find(c.rank() == 0 ? "at byte offset 0" : "at byte offset 64"), std::string::npos) << m;
  }
  // The same offsets, but rank 0 reads its input from another shared buffer while
  // the others copy theirs in: the ranks would read different buffers.
  comm::SharedBuffer out = c.alloc_shared(4096), in = c.alloc_shared(4096);
  std::vector<float> priv(8, 1.f);
  const float* src = c.rank() == 0 ? in.as<float>() : priv.data();
  EXPECT_THROW(c.all_reduce(src, out.data(), 8, DType::f32, ReduceOp::sum), Error) << "rank " << c.rank();
}

/// A span sink on the communicator does not get in the way of alloc_shared (it is
/// traced like a collective of bytes).
inline void shared_alloc_traced(Communicator& c) {
  struct Count final : SpanSink {
    std::atomic<int> spans{0};
    void span(std::string, const char*, const std::string&, double, double, std::string) override { ++spans; }
  };
  auto sink = std::make_shared<Count>();
  c.set_span_sink(sink);
  comm::SharedBuffer b = c.alloc_shared(4096);
  EXPECT_EQ(b.bytes(), 4096u);
  EXPECT_GE(sink->spans.load(), 1);
  c.set_span_sink(nullptr);
}

}  // namespace braid::test_cases
