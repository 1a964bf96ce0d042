// The composability matrix: every combination of
//   data parallelism {DDP, ZeRO-1, ZeRO-2, ZeRO-3, FSDP, HSDP}
//   x tensor parallelism {1, 2, 2 + sequence parallelism}
//   x pipeline {none, 2 stages with each schedule of the registry that the
//     matrix covers: 1F1B, interleaved (v = 2), ZB-H1, ...}
//   x precision {fp32, bf16, fp16} x recompute {none, full}
//   x context parallelism {1, 2 ring, 2 all-to-all}
//   x model {GPT-2 block, Llama block: RMSNorm, rotary positions, SwiGLU,
//     2 key/value heads for 4 query heads, no biases, untied head}
// (3,240 cells with today's four schedules) either trains the single-rank run of its model in its precision
// or is refused with its reason. DP is 2 (HSDP: 4, in shard groups of 2), so a cell runs on
// DP x TP x PP x CP ranks, up to 32 threads.
//
// CI runs every cell's construction (braid plan equals each rank's ledger) and
// the training of a fixed set of cells that covers every pair of values;
// scripts/matrix.sh trains every cell (Matrix.DISABLED_EveryCellTrains).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/schedule.h"
#include "parallel/harness.h"

using namespace braid;

namespace {

constexpr std::array<const char*, 6> kDp = {"ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp"};
constexpr std::array<const char*, 3> kTp = {"tp1", "tp2", "tp2+sp"};
// "pp1", then the registry's schedules that the matrix covers.
const std::vector<const char*>& pp_axis() {
  static const std::vector<const char*> axis = [] {
    std::vector<const char*> a = {"pp1"};
    for (const auto& d : parallel::schedules())
      if (d.in_matrix) a.push_back(d.name);
    return a;
  }();
  return axis;
}
constexpr std::array<const char*, 3> kPrec = {"fp32", "bf16", "fp16"};
constexpr std::array<const char*, 2> kRec = {"none", "full"};
constexpr std::array<const char*, 3> kCp = {"cp1", "cp2", "cp2-a2a"};
constexpr std::array<const char*, 2> kModel = {"gpt2", "llama"};
constexpr int kNumAxes = 7;

// One cell: an index into each axis.
struct Cell {
  std::array<int, kNumAxes> v;  // dp, tp, pp, precision, recompute, cp, model
  std::string name() const {
    return std::string(kDp[size_t(v[0])]) + " " + kTp[size_t(v[1])] + " " + pp_axis()[size_t(v[2])] + " " +
           kPrec[size_t(v[3])] + " recompute=" + kRec[size_t(v[4])] + " " + kCp[size_t(v[5])] + " " +
           kModel[size_t(v[6])];
  }
};
const std::array<int, kNumAxes> kAxis = {6, 3, int(pp_axis().size()), 3, 2, 3, 2};

std::vector<Cell> all_cells() {
  std::vector<Cell> out;
  for (int a = 0; a < kAxis[0]; ++a)
    for (int b = 0; b < kAxis[1]; ++b)
      for (int c = 0; c < kAxis[2]; ++c)
        for (int d = 0; d < kAxis[3]; ++d)
          for (int e = 0; e < kAxis[4]; ++e)
            for (int f = 0; f < kAxis[5]; ++f)
              for (int g = 0; g < kAxis[6]; ++g) out.push_back({{a, b, c, d, e, f, g}});
  return out;
}

// A covering set of every pair of values of two axes, chosen greedily (the cell
// covering most uncovered pairs first, ties to the first in enumeration order):
// deterministic, and far smaller than the product.
std::vector<Cell> pairwise_cells() {
  std::set<std::array<int, 4>> uncovered;  // (axis i, value, axis j, value)
  for (int i = 0; i < kNumAxes; ++i)
    for (int j = i + 1; j < kNumAxes; ++j)
      for (int x = 0; x < kAxis[size_t(i)]; ++x)
        for (int y = 0; y < kAxis[size_t(j)]; ++y) uncovered.insert({i, x, j, y});
  const auto cells = all_cells();
  std::vector<Cell> out;
  while (!uncovered.empty()) {
    size_t best = 0, best_n = 0;
    for (size_t k = 0; k < cells.size(); ++k) {
      size_t n = 0;
      for (int i = 0; i < kNumAxes; ++i)
        for (int j = i + 1; j < kNumAxes; ++j) n += uncovered.count({i, cells[k].v[size_t(i)], j, cells[k].v[size_t(j)]});
      if (n > best_n) best = k, best_n = n;
    }
    for (int i = 0; i < kNumAxes; ++i)
      for (int j = i + 1; j < kNumAxes; ++j) uncovered.erase({i, cells[best].v[size_t(i)], j, cells[best].v[size_t(j)]});
    out.push_back(cells[best]);
  }
  return out;
}

// tiny (or llama-tiny) with 4 layers (2 stages x 2 chunks interleaved), a
// small vocabulary and clipping that fires; the options of cell c.
train::TrainOptions base_options(int model = 0) {
  auto o = testing_harness::tiny_options(41);
  o.model = model == 0 ? "tiny" : "llama-tiny";
  o.n_layer = 4;
  o.vocab_size = 1001;
  o.global_batch = 8;
  o.micro_batch = 1;
  o.steps = 3;
  return o;
}

train::TrainOptions cell_options(const Cell& c, int* ranks) {
  auto o = base_options(c.v[6]);
  const int dpm = c.v[0], tpm = c.v[1], ppm = c.v[2];
  o.zero = dpm >= 1 && dpm <= 3 ? dpm : 0;
  o.fsdp = dpm >= 4;
  o.fsdp_shard_size = dpm == 5 ? 2 : 0;
  o.tp = tpm == 0 ? 1 : 2;
  o.sequence_parallel = tpm == 2;
  o.pp = ppm == 0 ? 1 : 2;
  o.schedule = ppm == 0 ? "1f1b" : pp_axis()[size_t(ppm)];
  const int chunks = parallel::find_schedule(o.schedule).chunks;
  o.virtual_stages = ppm == 0 ? 1 : chunks == 0 ? 2 : chunks;  // interleaved: v = 2
  o.precision = kPrec[size_t(c.v[3])];
  o.recompute = kRec[size_t(c.v[4])];
  o.cp = c.v[5] == 0 ? 1 : 2;  // seq_len 16: 2 x CP = 4 chunks of 4
  o.cp_comm = c.v[5] == 2 ? "a2a" : "ring";  // tiny's 4 heads over TP x CP <= 4
  const int dp = dpm == 5 ? 4 : 2;
  *ranks = dp * o.tp * o.pp * o.cp;
  return o;
}

// The reason a cell is refused, or "" when it must train.
std::string expected_refusal(const Cell& c) {
  // All-to-all attention splits each TP rank's heads over CP: the Llama
  // block's 2 key/value heads leave one per rank at TP 2, none to split.
  if (c.v[6] == 1 && c.v[1] != 0 && c.v[5] == 2) return "key/value heads of each TP rank";
  // The schedule's own refusal (ZB-H1 defers each weight gradient past the
  // input gradient's pass, which needs the block's matmul inputs that full
  // recomputation drops: "zb-h1 keeps the matmul inputs ...").
  if (c.v[2] == 0) return "";
  const auto& d = parallel::find_schedule(pp_axis()[size_t(c.v[2])]);
  return d.refuse ? d.refuse({kRec[size_t(c.v[4])]}) : "";
}

// Tolerances against one rank in the same precision (test_mixed_precision.cpp
// derives them): fp32 1e-5; half precision rounds each gradient element once
// more per reduction order.
struct Tol {
  double loss, norm;
};
Tol tolerance(const std::string& prec) {
  if (prec == "bf16") return {1e-3, 1e-2};
  if (prec == "fp16") return {1.2e-4, 1.2e-3};
  return {1e-5, 1e-5};
}

std::vector<uint16_t> tokens() {
  auto t = testing_harness::synthetic_tokens(20000, 91);
  for (auto& x : t) x = static_cast<uint16_t>(x % 1001);
  return t;
}

struct Outcome {
  bool refused = false, equal = false;
  std::string reason;
};

// Trains cell c, compares with `ref` (one rank, same precision) and checks
// braid plan against every rank's ledger.
Outcome train_cell(const Cell& c, const std::vector<uint16_t>& data,
                   std::map<std::string, std::vector<train::StepRecord>>& refs) {
  int ranks = 0;
  const auto o = cell_options(c, &ranks);
  const std::string want = expected_refusal(c);
  Outcome out;
  if (!want.empty()) {
    const std::string msg = testing_harness::config_error(o, ranks, data);
    EXPECT_NE(msg.find(want), std::string::npos) << c.name() << ": " << msg;
    out.refused = true;
    out.reason = msg;
    return out;
  }
  const std::string key = o.precision + " " + o.model;
  if (!refs.count(key)) {
    auto one = base_options(c.v[6]);
    one.precision = o.precision;
    refs[key] = testing_harness::run(one, 1, data).steps[0];
  }
  const auto& ref = refs[key];
  const Tol tol = tolerance(o.precision);
  const auto got = testing_harness::run(o, ranks, data, [&](train::Trainer& t, int r) {
    testing_harness::expect_plan_is_ledger(o, ranks, r, t, c.name());
  });
  const auto& s = got.steps[0];
  EXPECT_EQ(s.size(), ref.size()) << c.name();
  out.equal = s.size() == ref.size();
  for (size_t i = 0; i < s.size() && i < ref.size(); ++i) {
    const bool ok = std::fabs(s[i].loss - ref[i].loss) <= tol.loss * ref[i].loss &&
                    std::fabs(s[i].grad_norm - ref[i].grad_norm) <= tol.norm * ref[i].grad_norm + 1e-7;
    EXPECT_TRUE(ok) << c.name() << " step " << i << ": loss " << s[i].loss << " vs " << ref[i].loss << ", norm "
                    << s[i].grad_norm << " vs " << ref[i].grad_norm;
    out.equal = out.equal && ok;
  }
  return out;
}

void train_cells(const std::vector<Cell>& cells) {
  const auto data = tokens();
  std::map<std::string, std::vector<train::StepRecord>> refs;
  size_t equal = 0, refused = 0;
  std::map<std::string, size_t> reasons;
  for (const auto& c : cells) {
    std::fprintf(stderr, "cell %s\n", c.name().c_str());  // a crash then names its cell
    const Outcome r = train_cell(c, data, refs);
    equal += r.equal;
    refused += r.refused;
    if (r.refused) ++reasons[expected_refusal(c)];
  }
  std::printf("matrix: %zu cells run, %zu train the single-rank run, %zu refused", cells.size(), equal, refused);
  for (const auto& [why, n] : reasons) std::printf(" (%zu: %s)", n, why.c_str());
  std::printf("\n");
  EXPECT_EQ(equal + refused, cells.size());
}

}  // namespace

TEST(Matrix, PairwiseCoverIsSmallAndCoversEveryPair) {
  const auto cells = pairwise_cells();
  EXPECT_LE(cells.size(), 40u);
  std::set<std::array<int, 4>> seen;
  for (const auto& c : cells)
    for (int i = 0; i < kNumAxes; ++i)
      for (int j = i + 1; j < kNumAxes; ++j) seen.insert({i, c.v[size_t(i)], j, c.v[size_t(j)]});
  size_t pairs = 0;
  for (int i = 0; i < kNumAxes; ++i)
    for (int j = i + 1; j < kNumAxes; ++j) pairs += size_t(kAxis[size_t(i)] * kAxis[size_t(j)]);
  EXPECT_EQ(seen.size(), pairs);
}

// Construction only: on every cell, braid plan's prediction equals each rank's
// ledger (so `braid plan` and `braid train` resolve the same layout), and the
// refused cells fail with their reason. One test per data-parallel mode, so the
// cells spread over the cores.
class MatrixPlan : public ::testing::TestWithParam<int> {};

TEST_P(MatrixPlan, PlanEqualsTheLedgerOnEveryCell) {
  const auto data = tokens();
  size_t built = 0;
  for (const auto& c : all_cells()) {
    if (c.v[0] != GetParam()) continue;
    int ranks = 0;
    const auto o = cell_options(c, &ranks);
    if (!expected_refusal(c).empty()) {
      EXPECT_THROW(parallel::plan_memory(o, ranks, 0), ConfigError) << c.name();
      continue;
    }
    std::mutex mu;
    comm::run_local(ranks, [&](comm::Communicator& w) {
      train::Trainer t(o, w, data, nullptr);
      std::lock_guard<std::mutex> lk(mu);
      testing_harness::expect_plan_is_ledger(o, ranks, w.rank(), t, c.name());
    });
    ++built;
  }
  EXPECT_GT(built, 0u);
}

INSTANTIATE_TEST_SUITE_P(Matrix, MatrixPlan, ::testing::Range(0, int(kDp.size())),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(kDp[size_t(i.param)]); });

TEST(Matrix, PairwiseCellsTrainTheSingleRankRun) { train_cells(pairwise_cells()); }

// scripts/matrix.sh: every cell.
TEST(Matrix, DISABLED_EveryCellTrains) { train_cells(all_cells()); }
