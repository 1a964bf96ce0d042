// Fault test bodies shared by the local backend (tests/dist) and MPI (tests/mpi):
// no pending receive outlives its buffer, and mismatched collectives are caught by
// the desync check (the communicator must run with debug_collectives on).
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/error.h"

namespace braid::test_cases {

using comm::Communicator;

// The interleaving behind a heap corruption once seen under load: a rank posts a
// receive, frees its buffer while unwinding an exception, and only then does the peer
// send. Forced here in that order (the barrier), on both ways a handle can be dropped.
// The withdrawn receives must take nothing: the message goes to the next receive.
inline void dropped_receive_is_withdrawn(Communicator& c) {
  if (c.size() < 2) return;
  constexpr int kTag = 77;
  constexpr size_t kBytes = 4096;
  std::vector<char> sentinel(kBytes, 'S');
  if (c.rank() == 0) {
    { auto w = c.irecv(sentinel.data(), kBytes, 1, kTag); }  // dropped, never waited
    try {
      auto buf = std::make_unique<std::vector<char>>(kBytes, 'F');
      auto w = c.irecv(buf->data(), kBytes, 1, kTag);
      throw Error("unwinding with a receive posted");
    } catch (const Error&) {
    }
  }
  c.barrier();  // both receives are gone before rank 1 sends
  if (c.rank() == 1) {
    std::vector<char> msg(kBytes, 'M');
    c.send(msg.data(), kBytes, 0, kTag);
  }
  if (c.rank() == 0) {
    std::vector<char> got(kBytes, 0);
    c.recv(got.data(), kBytes, 1, kTag);
    EXPECT_EQ(got, std::vector<char>(kBytes, 'M'));
    EXPECT_EQ(sentinel, std::vector<char>(kBytes, 'S')) << "a dropped receive took the message";
  }
  c.barrier();
}

// Runs `body` where rank `odd` calls `theirs` and every other rank calls `ours`; every
// rank must throw the desync error naming both calls and which ranks made each.
inline void expect_mismatch(Communicator& c, int odd, const std::function<void()>& ours,
                            const std::function<void()>& theirs, const std::string& ours_text,
                            const std::string& theirs_text) {
  try {
    (c.rank() == odd ? theirs : ours)();
    ADD_FAILURE() << "rank " << c.rank() << ": no mismatch reported";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("collective mismatch"), std::string::npos) << w;
    EXPECT_NE(w.find("rank " + std::to_string(odd) + " called " + theirs_text), std::string::npos) << w;
    EXPECT_NE(w.find(ours_text), std::string::npos) << w;
  }
}

// Mismatched op, count, dtype, root, and a rank that skipped a collective.
inline void mismatch_suite(Communicator& c) {
  if (c.size() < 2) return;
  const int odd = c.size() - 1;
  std::vector<float> a(64 * static_cast<size_t>(c.size()), 1.f), b(a.size());
  const auto sum = comm::ReduceOp::sum;
  auto all_reduce = [&](size_t n, DType t) { return [&, n, t] { c.all_reduce(a.data(), a.data(), n, t, sum); }; };
  c.barrier();
  expect_mismatch(c, odd, all_reduce(16, DType::f32),
                  [&] { c.all_gather(a.data(), b.data(), 16, DType::f32); },
                  "all_reduce #", "all_gather #");
  expect_mismatch(c, odd, all_reduce(16, DType::f32), all_reduce(17, DType::f32),
                  "(16 x f32, sum)", "all_reduce #");
  expect_mismatch(c, odd, all_reduce(16, DType::f32), all_reduce(16, DType::bf16),
                  "(16 x f32, sum)", "all_reduce #");
  expect_mismatch(c, odd, [&] { c.broadcast(a.data(), 8, DType::f32, 0); },
                  [&] { c.broadcast(a.data(), 8, DType::f32, 1); }, "root 0", "broadcast #");
  // Rank `odd` skips an all-reduce and goes on to the barrier the others call next.
  expect_mismatch(c, odd, all_reduce(16, DType::f32), [&] { c.barrier(); },
                  "all_reduce #", "barrier #");
  // After the errors the group is in step again: a correct collective works.
  std::vector<float> one(4, 1.f);
  c.all_reduce(one.data(), one.data(), one.size(), DType::f32, sum);
  EXPECT_EQ(one[0], static_cast<float>(c.size()));
}

}  // namespace braid::test_cases
