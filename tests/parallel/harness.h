// Shared helpers for the parallel tests: a synthetic token stream with
// learnable structure, and a runner that trains on N local ranks.
#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/core/rng.h"
#include "braid/parallel/plan_memory.h"
#include "braid/train/trainer.h"

namespace braid::testing_harness {

/// A path in the temporary directory, unique to this process (a --save directory).
inline std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))).string();
}

/// GPT-2's vocabulary (tiny's default) and the small one of the layout-parity
/// tests that do not depend on the head's size (`small_vocab`).
inline constexpr uint64_t kGpt2Vocab = 50257;
inline constexpr uint64_t kSmallVocab = 1001;

/// `n` tokens in [0, vocab): repeating phrases (ids (100 + k) mod vocab, k in
/// [0, 997)) with 20 % uniform noise over the vocabulary.
inline std::vector<uint16_t> synthetic_tokens(size_t n, uint64_t seed, uint64_t vocab = kGpt2Vocab) {
  std::vector<uint16_t> t(n);
  Rng rng(seed);
  for (size_t i = 0; i < n; ++i) {
    t[i] = rng.uniform() < 0.2f ? static_cast<uint16_t>(rng.below(vocab))
                                : static_cast<uint16_t>(((i * 7 + (i / 13) * 31) % 997 + 100) % vocab);
  }
  return t;
}

/// How far the loss falls over tiny_options' 20 steps at least, on the small
/// vocabulary (from ln 1001 = 6.9 to about 6.7; with GPT-2's it fell more than
/// 0.5 from 10.8, mostly by learning which ids never occur). It guards that
/// the runs compared really train: 0.1 is 10^4 times the parity rule's 1e-5.
inline constexpr float kSmallVocabLossDrop = 0.1f;

/// `o` with the 1,001-token vocabulary (padded to 1,024). With GPT-2's 50,257
/// the head and embedding hold 97 % of tiny's parameters and most of its
/// FLOPs; a layout-parity test loses no power with the smaller one (every
/// parameter tensor is still sharded, split and reduced, and the vocabulary is
/// still not a multiple of any degree) and runs about ten times faster. Train
/// it on synthetic_tokens(n, seed, kSmallVocab).
inline train::TrainOptions small_vocab(train::TrainOptions o) {
  o.vocab_size = static_cast<int64_t>(kSmallVocab);
  return o;
}

/// The tiny model on short sequences with clipping that fires: the base of the
/// parity tests (each test overrides what it varies).
inline train::TrainOptions tiny_options(uint64_t seed) {
  train::TrainOptions o;
  o.model = "tiny";
  o.steps = 20;
  o.global_batch = 12;
  o.micro_batch = 1;
  o.seq_len = 16;
  o.lr = 3e-3f;
  o.min_lr = 3e-4f;
  o.warmup_steps = 3;
  o.grad_clip = 0.5f;  // low enough that clipping fires
  o.val_every = 0;
  o.verbose = false;
  o.check_replicas = true;
  o.seed = seed;
  return o;
}

struct RankRuns {
  std::vector<std::vector<train::StepRecord>> steps;  // per rank
  std::vector<uint64_t> hash;                         // final parameter hash per rank
  std::vector<size_t> optimizer_bytes;                // peak optimizer bytes per rank
  std::vector<std::string> transport;                 // Trainer::data_parallel_transport per rank
};

/// Trains with `o` on `ranks` threads (local backend); rethrows a rank's failure.
/// `after(trainer, rank)` then runs on every rank, outside any lock (it may call
/// collectives such as evaluate() or sample(); it guards what it shares).
inline RankRuns run_ranks(const train::TrainOptions& o, int ranks, const std::vector<uint16_t>& data,
                          const std::function<void(train::Trainer&, int)>& after = {},
                          const std::vector<uint16_t>* val = nullptr) {
  RankRuns res;
  res.steps.resize(static_cast<size_t>(ranks));
  res.hash.resize(static_cast<size_t>(ranks));
  res.optimizer_bytes.resize(static_cast<size_t>(ranks));
  res.transport.resize(static_cast<size_t>(ranks));
  std::mutex mu;
  comm::run_local(ranks, [&](comm::Communicator& w) {
    train::Trainer t(o, w, data, val);
    auto recs = t.run();
    const uint64_t h = t.param_hash();  // collective under ZeRO-3: outside the lock
    {
      std::lock_guard<std::mutex> lk(mu);
      const auto r = static_cast<size_t>(w.rank());
      res.hash[r] = h;
      res.steps[r] = std::move(recs);
      res.optimizer_bytes[r] = t.ledger().peak(MemCategory::optimizer);
      res.transport[r] = t.data_parallel_transport();
    }
    if (after) after(t, w.rank());
  });
  return res;
}

/// run_ranks under the short name the tests use (a lambda keeps its defaults).
inline constexpr auto run = [](auto&&... args) { return run_ranks(std::forward<decltype(args)>(args)...); };

/// `braid plan`'s bytes per category for this rank equal the trainer's ledger peaks.
inline void expect_plan_is_ledger(const train::TrainOptions& o, int ranks, int rank, const train::Trainer& t,
                                  const std::string& what) {
  const auto p = parallel::plan_memory(o, ranks, rank);
  for (size_t c = 0; c < kNumMemCategories; ++c)
    EXPECT_EQ(p.bytes[c], t.ledger().peak(static_cast<MemCategory>(c)))
        << what << " rank " << rank << " " << mem_category_name(static_cast<MemCategory>(c));
}

/// Rank 0's records and every rank's final hash.
struct Rank0Run {
  std::vector<train::StepRecord> steps;
  std::vector<uint64_t> hash;
  std::string transport;  // rank 0's Trainer::data_parallel_transport
};

inline Rank0Run run_rank0(const train::TrainOptions& o, int ranks, const std::vector<uint16_t>& data) {
  auto r = run_ranks(o, ranks, data);
  return {r.steps[0], r.hash, r.transport[0]};
}

/// Per-step loss and global gradient norm of a layout against a reference run
/// (the parity rule: rtol 1e-5 in fp32).
inline void expect_close(const std::vector<train::StepRecord>& a, const std::vector<train::StepRecord>& b,
                         const std::string& what, double rtol = 1e-5) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i].loss, b[i].loss, rtol * std::fabs(b[i].loss)) << what << " step " << i;
    EXPECT_NEAR(a[i].grad_norm, b[i].grad_norm, rtol * b[i].grad_norm + 1e-7) << what << " step " << i;
  }
}

/// The message a Trainer with `o` on `ranks` local ranks fails with ("" if none).
inline std::string config_error(const train::TrainOptions& o, int ranks, const std::vector<uint16_t>& data) {
  std::string msg;
  try {
    comm::run_local(ranks, [&](comm::Communicator& w) { train::Trainer t(o, w, data, nullptr); });
  } catch (const std::exception& e) {
    msg = e.what();
  }
  return msg;
}

}  // namespace braid::testing_harness
