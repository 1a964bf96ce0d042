// Ring and all-to-all attention over a CP group (parallel/context/) against
// the fused kernel on whole sequences: each CP rank holds chunks r and
// 2 CP - 1 - r of every sequence; its output rows and q, k, v gradients are
// the single-rank ones at those positions, for CP = 1..4, f32 and bf16, with
// uneven heads and chunk lengths that are not multiples of a tile.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/comm/communicator.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/parallel/context/ring_attention.h"
#include "braid/parallel/context/ulysses_attention.h"
#include "kernels/normal_values.h"

namespace ctx = braid::parallel::context;
namespace k = braid::kernels;
using braid::DType;

namespace {

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(b[i]) * b[i];
  return std::sqrt(num / (den > 0 ? den : 1));
}

// Rows (b, t) of a (B, T_seq, width) tensor at this rank's positions, in layout order.
std::vector<float> local_rows(const std::vector<float>& full, const braid::model::SequenceLayout& l, int64_t B,
                              int64_t width) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b)
    for (const auto& sp : l.spans)
      out.insert(out.end(), full.begin() + (b * l.T_seq + sp.first) * width,
                 full.begin() + (b * l.T_seq + sp.first + sp.count) * width);
  return out;
}

std::vector<float> stored(const std::vector<float>& x, DType t) {
  std::vector<float> s((x.size() * braid::dtype_size(t) + 3) / 4);
  k::cast_from_f32(s.data(), t, x.data(), x.size());
  return s;
}

struct Case {
  int64_t B, T_seq, C, NH;
  DType t;
};

// The CP group's attention (ring, or all-to-all with a2a) against the fused
// kernel on whole sequences.
void check_ring(const Case& c, int cp, bool a2a = false) {
  const int64_t T = c.T_seq / cp;
  auto qkv = testing_data::normal_values(size_t(c.B * c.T_seq * 3 * c.C), 21, 1);
  k::round_to_dtype(qkv.data(), c.t, qkv.size());
  const auto dout = testing_data::normal_values(size_t(c.B * c.T_seq * c.C), 21, 2);
  // The single rank: the fused kernel on whole sequences.
  const size_t full = size_t(c.B * c.T_seq * c.C);
  std::vector<float> out1(full), lse1(k::flash_attention_lse_floats(c.B, c.T_seq, c.NH)), dqkv1(3 * full);
  {
    auto qkv_s = stored(qkv, c.t);
    std::vector<float> qkvr(qkv_s.size()), scratch(k::flash_attention_backward_scratch_floats(c.B, c.T_seq, c.C, c.NH, c.t));
    k::flash_attention_forward(out1.data(), qkvr.data(), lse1.data(), qkv_s.data(), c.t, c.B, c.T_seq, c.C, c.NH, c.t);
    std::vector<float> kept = out1;
    k::round_to_dtype(kept.data(), c.t, kept.size());
    auto out_s = stored(kept, c.t);
    k::flash_attention_backward(dqkv1.data(), scratch.data(), dout.data(), out_s.data(), qkvr.data(), lse1.data(),
                                c.t, c.B, c.T_seq, c.C, c.NH, c.t);
  }
  std::mutex mu;
  braid::comm::run_local(cp, [&](braid::comm::Communicator& g) {
    const auto layout = ctx::chunk_layout(c.T_seq, cp, g.rank());
    const ctx::RingShape s{c.B, T, c.C, c.NH, c.t, c.t, c.T_seq};
    const size_t part = size_t(c.B * T * c.C);
    auto qkv_s = stored(local_rows(qkv, layout, c.B, 3 * c.C), c.t);
    std::vector<float> out(part), qkvr(qkv_s.size()), lse(size_t(c.B * c.NH * T)), dqkv(3 * part);
    std::vector<float> scratch(a2a ? ctx::ulysses_attention_scratch_floats(s, cp) : ctx::ring_attention_scratch_floats(s));
    if (a2a)
      ctx::ulysses_attention_forward(g, out.data(), qkvr.data(), lse.data(), scratch.data(), qkv_s.data(), s);
    else
      ctx::ring_attention_forward(g, out.data(), qkvr.data(), lse.data(), scratch.data(), qkv_s.data(), s);
    std::vector<float> kept = out;
    k::round_to_dtype(kept.data(), c.t, kept.size());
    auto out_s = stored(kept, c.t);
    const auto dout_l = local_rows(dout, layout, c.B, c.C);
    if (a2a)
      ctx::ulysses_attention_backward(g, dqkv.data(), scratch.data(), dout_l.data(), out_s.data(), qkvr.data(),
                                      lse.data(), s);
    else
      ctx::ring_attention_backward(g, dqkv.data(), scratch.data(), dout_l.data(), out_s.data(), qkvr.data(),
                                   lse.data(), s);
    // f32: only the order of the sums differs. bf16: the probabilities are
    // rounded relative to the running maximum of the keys seen so far, which
    // the block order changes, so the two runs differ by up to bf16's unit
    // roundoff 2^-8 (measured 3e-4 .. 1e-3); a wrong block or mask is O(1).
    const double tol = c.t == DType::f32 ? 1e-6 : std::ldexp(1.0, -8);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_LT(rel_l2(out, local_rows(out1, layout, c.B, c.C)), tol) << "CP=" << cp << " rank " << g.rank();
    EXPECT_LT(rel_l2(dqkv, local_rows(dqkv1, layout, c.B, 3 * c.C)), c.t == DType::f32 ? 10 * tol : tol) << "CP=" << cp << " rank " << g.rank();
  });
}

}  // namespace

TEST(RingAttention, ChunkLayoutBalancesCausalWork) {
  const auto l = ctx::chunk_layout(96, 3, 1);
  ASSERT_EQ(l.spans.size(), 2u);
  EXPECT_EQ(l.spans[0].first, 16);
  EXPECT_EQ(l.spans[1].first, 64);
  EXPECT_EQ(l.spans[1].count, 16);
  EXPECT_EQ(ctx::chunk_layout(7, 1, 0).spans.size(), 1u);
  EXPECT_THROW(ctx::chunk_layout(100, 3, 0), braid::ConfigError);
  EXPECT_THROW(ctx::chunk_layout(96, 3, 3), braid::ConfigError);
}

TEST(RingAttention, MatchesOneRankF32) {
  for (int cp = 1; cp <= 4; ++cp) check_ring({2, 24 * cp, 16, 2, DType::f32}, cp);
  check_ring({1, 2 * 3 * 70, 24, 3, DType::f32}, 3);  // chunks of 70 rows: a tile and a part
}

TEST(RingAttention, MatchesOneRankBf16) {
  for (int cp : {2, 4}) check_ring({2, 16 * cp, 32, 4, DType::bf16}, cp);
}

// All-to-all: the whole sequence of a 1/CP share of the heads on each rank, the
// same kernel on the same tiles as one rank: f32 to the order of its sums.
TEST(UlyssesAttention, MatchesOneRank) {
  for (int cp : {1, 2, 4}) check_ring({2, 24 * cp, 32, 4, DType::f32}, cp, true);
  check_ring({1, 2 * 2 * 70, 48, 6, DType::f32}, 2, true);
  for (int cp : {2, 4}) check_ring({2, 16 * cp, 32, 4, DType::bf16}, cp, true);
  braid::comm::run_local(2, [&](braid::comm::Communicator& g) {
    const ctx::RingShape s{1, 8, 12, 3, DType::f32, DType::f32, 16};  // 3 heads over CP = 2
    std::vector<float> out(96), qkvr(288), lse(24), scratch(ctx::ulysses_attention_scratch_floats(s, 2)), qkv(288);
    EXPECT_THROW(ctx::ulysses_attention_forward(g, out.data(), qkvr.data(), lse.data(), scratch.data(), qkv.data(), s),
                 braid::ConfigError);
  });
}
