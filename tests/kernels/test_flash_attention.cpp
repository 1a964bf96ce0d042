// The fused causal attention kernel (kernels/cpu/flash_attention.h) against the
// kernel that saves the probabilities, a float64 PyTorch oracle
// (tools/attention_oracle.py), bf16 storage of the same rounded values,
// extreme scores, thread counts, and the block interface a context-parallel
// ring uses (keys in blocks at other positions, merged by the online state).
// Finite differences are in test_kernels_fd.cpp.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "kernels/kernel_checks.h"
#include "kernels/normal_values.h"

namespace k = braid::kernels;
using braid::DType;
using testing_data::normal_values;

using kernel_checks::rel_l2;

namespace {

struct Shape {
  int64_t B, T, C, NH;
  size_t part() const { return size_t(B * T * C); }
};

// Forward and backward of the fused kernel with operands stored in `store`
// (qkv given in f32 and cast) and rounded to `round`.
struct Fused {
  std::vector<float> out, lse, dqkv;
  Fused(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout, DType store = DType::f32,
        DType round = DType::f32) {
    const size_t part = s.part(), words = store == DType::f32 ? 1 : 2;
    std::vector<float> qkv_s((3 * part + words - 1) / words), qkvr(qkv_s.size()), out_s((part + words - 1) / words);
    k::cast_from_f32(qkv_s.data(), store, qkv.data(), 3 * part);
    out.resize(part), lse.resize(k::flash_attention_lse_floats(s.B, s.T, s.NH)), dqkv.resize(3 * part);
    k::flash_attention_forward(out.data(), qkvr.data(), lse.data(), qkv_s.data(), store, s.B, s.T, s.C, s.NH, round);
    std::vector<float> kept = out;  // what a model keeps: the output rounded to the operand dtype
    k::round_to_dtype(kept.data(), round, part);
    k::cast_from_f32(out_s.data(), store, kept.data(), part);
    std::vector<float> scratch(k::flash_attention_backward_scratch_floats(s.B, s.T, s.C, s.NH, store));
    k::flash_attention_backward(dqkv.data(), scratch.data(), dout.data(), out_s.data(), qkvr.data(), lse.data(),
                                store, s.B, s.T, s.C, s.NH, round);
  }
};

// Today's kernel, f32: out and dqkv.
std::pair<std::vector<float>, std::vector<float>> saved_probabilities(const Shape& s, const std::vector<float>& qkv,
                                                                      const std::vector<float>& dout) {
  std::vector<float> out(s.part()), qkvr(3 * s.part()), att(size_t(s.B * s.NH * s.T * s.T)), dqkv(3 * s.part());
  std::vector<float> fs(k::attention_forward_scratch_floats(s.B, s.T, s.C, s.NH));
  std::vector<float> bs(k::attention_backward_scratch_floats(s.B, s.T, s.C, s.NH));
  k::attention_forward(out.data(), qkvr.data(), att.data(), fs.data(), qkv.data(), s.B, s.T, s.C, s.NH);
  k::attention_backward(dqkv.data(), bs.data(), dout.data(), qkvr.data(), att.data(), s.B, s.T, s.C, s.NH);
  return {out, dqkv};
}

}  // namespace

// Shapes inside one tile, across query tiles (64 forward, 128 backward), across
// the key tile (256) and not multiples of any; one token; one head.
TEST(FlashAttention, MatchesTheKernelThatSavesProbabilities) {
  for (const Shape s : {Shape{2, 5, 8, 2}, Shape{1, 1, 8, 2}, Shape{2, 64, 16, 4}, Shape{1, 300, 32, 2},
                        Shape{1, 513, 16, 1}, Shape{3, 129, 24, 3}}) {
    const auto qkv = normal_values(3 * s.part(), 3, 1), dout = normal_values(s.part(), 3, 2);
    const Fused f(s, qkv, dout);
    const auto [out, dqkv] = saved_probabilities(s, qkv, dout);
    const std::string what = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T);
    EXPECT_LT(rel_l2(f.out, out), 2e-6) << what;
    EXPECT_LT(rel_l2(f.dqkv, dqkv), 1e-5) << what;
  }
}

namespace {

bool have_torch() { return std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") == 0; }

// tools/attention_oracle.py on (qkv, dout) with NKV key/value heads: the
// float64 output and the gradient of the packed qkv.
std::pair<std::vector<float>, std::vector<float>> pytorch_attention(const Shape& s, int64_t NKV,
                                                                    const std::vector<float>& qkv,
                                                                    const std::vector<float>& dout) {
  namespace fs = std::filesystem;
  const char* src = std::getenv("BRAID_SOURCE_DIR");
  const fs::path script = fs::path(src ? src : BRAID_SOURCE_DIR) / "tools" / "attention_oracle.py";
  const fs::path dir = fs::temp_directory_path() / ("braid_attn_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "qkv.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(qkv.data()), std::streamsize(qkv.size() * 4));
  std::ofstream(dir / "dout.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(dout.data()), std::streamsize(dout.size() * 4));
  std::string cmd = "/usr/bin/python3 " + script.string() + " " + dir.string();
  for (int64_t v : {s.B, s.T, s.C, s.NH, NKV}) cmd += " " + std::to_string(v);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto read = [&](const char* name, size_t n) {
    std::vector<float> v(n);
    std::ifstream(dir / name, std::ios::binary).read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
    return v;
  };
  auto res = std::make_pair(read("ref_out.bin", dout.size()), read("ref_dqkv.bin", qkv.size()));
  fs::remove_all(dir);
  return res;
}

}  // namespace

// Against PyTorch in float64 (the explicit softmax(QK^T)V): the fp32 rounding only.
TEST(FlashAttention, MatchesPyTorch) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy; skipping the PyTorch oracle";
  const Shape s{2, 300, 32, 4};
  const auto qkv = normal_values(3 * s.part(), 4, 1, 2.0f), dout = normal_values(s.part(), 4, 2);
  const auto [ref_out, ref_dqkv] = pytorch_attention(s, s.NH, qkv, dout);
  const Fused f(s, qkv, dout);
  EXPECT_LT(rel_l2(f.out, ref_out), 2e-6);
  EXPECT_LT(rel_l2(f.dqkv, ref_dqkv), 1e-5);
}

// Grouped-query attention: NKV key/value heads serve NH / NKV query heads each.
// Against the same kernel on the key/value heads repeated (transformers'
// repeat_kv): the output and dq bitwise, dk and dv the sums of the repeated
// heads' gradients (summed in another order: fp32 rounding); and against
// PyTorch in float64.
TEST(FlashAttention, GroupedQueryHeadsShareTheirKeyValueHead) {
  const Shape s{2, 150, 32, 4};
  const int64_t hs = s.C / s.NH;
  for (const int64_t NKV : {int64_t(2), int64_t(1)}) {
    const k::AttentionHeads a{s.NH, NKV, hs};
    const size_t rows = size_t(s.B * s.T), width = size_t(a.qkv_width());
    const auto qkv = normal_values(rows * width, 6, uint64_t(NKV), 2.0f), dout = normal_values(s.part(), 6, 9);
    std::vector<float> out(s.part()), qkvr(rows * width), lse(k::flash_attention_lse_floats(s.B, s.T, s.NH));
    std::vector<float> dqkv(rows * width), scratch(k::flash_attention_backward_scratch_floats(s.B, s.T, a));
    k::flash_attention_forward(out.data(), qkvr.data(), lse.data(), qkv.data(), DType::f32, s.B, s.T, a);
    k::flash_attention_backward(dqkv.data(), scratch.data(), dout.data(), out.data(), qkvr.data(), lse.data(),
                                DType::f32, s.B, s.T, a);
    // The repeated layout: [q | k_0..k_0 k_1.. | v ...], each kv head copied group times.
    const int64_t group = s.NH / NKV;
    std::vector<float> rep(3 * s.part());
    for (size_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < s.NH; ++h)
        for (int64_t d = 0; d < hs; ++d) {
          const size_t src = r * width, dst = r * 3 * size_t(s.C);
          rep[dst + size_t(h * hs + d)] = qkv[src + size_t(h * hs + d)];
          rep[dst + size_t(s.C + h * hs + d)] = qkv[src + size_t(s.C + (h / group) * hs + d)];
          rep[dst + size_t(2 * s.C + h * hs + d)] = qkv[src + size_t(s.C + NKV * hs + (h / group) * hs + d)];
        }
    const Fused m(s, rep, dout);
    EXPECT_EQ(out, m.out) << "NKV " << NKV;
    std::vector<float> dk_sum(rows * size_t(2 * NKV * hs), 0.0f), dk_got(dk_sum.size());
    for (size_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < s.C; ++c)
        EXPECT_EQ(dqkv[r * width + size_t(c)], m.dqkv[r * 3 * size_t(s.C) + size_t(c)]) << "dq NKV " << NKV;
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < s.NH; ++h)
          for (int64_t d = 0; d < hs; ++d)
            dk_sum[r * size_t(2 * NKV * hs) + size_t(part * NKV * hs + (h / group) * hs + d)] +=
                m.dqkv[r * 3 * size_t(s.C) + size_t((1 + part) * s.C + h * hs + d)];
      for (int64_t c = 0; c < 2 * NKV * hs; ++c)
        dk_got[r * size_t(2 * NKV * hs) + size_t(c)] = dqkv[r * width + size_t(s.C + c)];
    }
    EXPECT_LT(rel_l2(dk_got, dk_sum), 1e-6) << "NKV " << NKV;
    if (!have_torch()) continue;
    const auto [ref_out, ref_dqkv] = pytorch_attention(s, NKV, qkv, dout);
    EXPECT_LT(rel_l2(out, ref_out), 2e-6) << "NKV " << NKV;
    EXPECT_LT(rel_l2(dqkv, ref_dqkv), 1e-5) << "NKV " << NKV;
  }
  EXPECT_THROW(k::flash_attention_forward(nullptr, nullptr, nullptr, nullptr, DType::f32, 1, 1,
                                          k::AttentionHeads{4, 3, 8}),
               braid::Error);
}

// bf16 storage (oneDNN's bf16 products) against f32 storage of the same rounded
// values: only the order of the f32 sums differs. Against the unrounded f32
// kernel the bf16 rounding shows.
TEST(FlashAttention, Bf16StorageMatchesF32OnTheRoundedValues) {
  const Shape s{2, 200, 32, 4};
  auto qkv = normal_values(3 * s.part(), 5, 1);
  k::round_to_dtype(qkv.data(), DType::bf16, qkv.size());
  const auto dout = normal_values(s.part(), 5, 2);
  const Fused h(s, qkv, dout, DType::bf16, DType::bf16), r(s, qkv, dout, DType::f32, DType::bf16),
      f(s, qkv, dout);
  EXPECT_LT(rel_l2(h.out, r.out), 1e-5);
  EXPECT_LT(rel_l2(h.dqkv, r.dqkv), 1e-4);
  EXPECT_GT(rel_l2(r.out, f.out), 1e-4);
  EXPECT_LT(rel_l2(r.out, f.out), 1e-2);
  EXPECT_THROW(Fused(s, qkv, dout, DType::bf16, DType::f16), braid::Error);
  EXPECT_THROW(Fused({1, 4, 9, 2}, normal_values(108, 1, 1), normal_values(36, 1, 2)), braid::Error);
}

// Scores of +-1e4: the online softmax subtracts the running maximum, so every
// output is finite and each row attends (to float precision) to its largest
// score. One token sees one key: the output is its value, lse its score.
TEST(FlashAttention, ExtremeScoresStayFinite) {
  const Shape s{1, 300, 8, 1};
  const int64_t C = s.C, T = s.T;
  std::vector<float> qkv(3 * s.part(), 0.0f), dout = normal_values(s.part(), 6, 2);
  // q_t = 100 * e0 and k_j = +-100 * e0 (sign alternating), scaled by 1/sqrt(8): scores +-3.5e3 .. 1e4.
  for (int64_t t = 0; t < T; ++t) {
    qkv[size_t(t * 3 * C)] = 300.0f;
    qkv[size_t(t * 3 * C + C)] = (t % 2 ? -1.0f : 1.0f) * 100.0f;
    for (int64_t c = 0; c < C; ++c) qkv[size_t(t * 3 * C + 2 * C + c)] = float(t * 10 + c);
  }
  const Fused f(s, qkv, dout);
  for (const float x : f.out) ASSERT_TRUE(std::isfinite(x));
  for (const float x : f.dqkv) ASSERT_TRUE(std::isfinite(x));
  for (int64_t t = 0; t < T; ++t) {
    // The visible keys of largest score are the even ones, equal: their mean value.
    const int64_t evens = t / 2 + 1;
    const double mean_pos = 2.0 * (evens - 1) / 2.0 * 10;  // mean of 10 * (0, 2, 4, ..)
    EXPECT_NEAR(f.out[size_t(t * C)], mean_pos, 1e-3 * (1 + mean_pos)) << "row " << t;
  }
  const Shape one{2, 1, 8, 2};
  const auto q1 = normal_values(3 * one.part(), 7, 1, 1e4f);
  const Fused g(one, q1, normal_values(one.part(), 7, 2));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(g.out[size_t(b * 8 + c)], q1[size_t(b * 24 + 16 + c)]);
}

// Each query row (forward) and each head (backward) is one thread's serial
// work, so the thread count changes no bit.
TEST(FlashAttention, ThreadCountChangesNoBit) {
  const Shape s{2, 300, 32, 4};
  const auto qkv = normal_values(3 * s.part(), 8, 1), dout = normal_values(s.part(), 8, 2);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const Fused one(s, qkv, dout, DType::bf16, DType::bf16);
  omp_set_num_threads(3);
  const Fused three(s, qkv, dout, DType::bf16, DType::bf16);
  omp_set_num_threads(before);
  EXPECT_EQ(one.out, three.out);
  EXPECT_EQ(one.lse, three.lse);
  EXPECT_EQ(one.dqkv, three.dqkv);
}

// The ring's view: a query block at positions [qp, qp + Tq) against keys in two
// blocks at their own positions, folded into one state, gives the one-call
// result; backward over the two blocks sums to the one-call gradients. Blocks
// wholly after the queries change nothing.
TEST(FlashAttention, KeyBlocksAtTheirPositionsMergeLikeOneCall) {
  const int64_t hs = 16, T = 400, qp = 150, Tq = 250, split = 170;
  const auto q = normal_values(size_t(Tq * hs), 9, 1), k = normal_values(size_t(T * hs), 9, 2),
             v = normal_values(size_t(T * hs), 9, 3), dO = normal_values(size_t(Tq * hs), 9, 4);
  auto forward = [&](const std::vector<std::pair<int64_t, int64_t>>& blocks, std::vector<float>& out,
                     std::vector<float>& lse) {
    std::vector<float> o(static_cast<size_t>(Tq * hs)), m(static_cast<size_t>(Tq)), l(static_cast<size_t>(Tq));
    const k::FlashState st{o.data(), m.data(), l.data()};
    k::flash_state_init(st, Tq, hs);
    for (const auto& [k0, n] : blocks)
      k::flash_forward_block(st, q.data(), k.data() + k0 * hs, v.data() + k0 * hs, DType::f32, DType::f32, Tq, n, hs,
                             qp, k0);
    out.assign(size_t(Tq * hs), 0.0f), lse.assign(size_t(Tq), 0.0f);
    k::flash_state_finish(out.data(), hs, lse.data(), st, Tq, hs);
  };
  std::vector<float> out1, lse1, out2, lse2;
  forward({{0, T}}, out1, lse1);
  forward({{split, T - split}, {0, split}}, out2, lse2);  // the ring's order: later keys first
  EXPECT_LT(rel_l2(out2, out1), 1e-6);
  EXPECT_LT(rel_l2(lse2, lse1), 1e-6);
  std::vector<float> D(size_t(Tq), 0.0f);
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t d = 0; d < hs; ++d) D[size_t(i)] += dO[size_t(i * hs + d)] * out1[size_t(i * hs + d)];
  auto backward = [&](const std::vector<std::pair<int64_t, int64_t>>& blocks, std::vector<float>& dq,
                      std::vector<float>& dk, std::vector<float>& dv) {
    dq.assign(size_t(Tq * hs), 0.0f), dk.assign(size_t(T * hs), 0.0f), dv.assign(size_t(T * hs), 0.0f);
    for (const auto& [k0, n] : blocks)
      k::flash_backward_block(dq.data(), dk.data() + k0 * hs, dv.data() + k0 * hs, q.data(), k.data() + k0 * hs,
                              v.data() + k0 * hs, dO.data(), lse1.data(), D.data(), DType::f32, DType::f32, Tq, n,
                              hs, qp, k0);
  };
  std::vector<float> dq1, dk1, dv1, dq2, dk2, dv2;
  backward({{0, T}}, dq1, dk1, dv1);
  backward({{split, T - split}, {0, split}}, dq2, dk2, dv2);
  EXPECT_LT(rel_l2(dq2, dq1), 1e-6);
  EXPECT_LT(rel_l2(dk2, dk1), 1e-6);
  EXPECT_LT(rel_l2(dv2, dv1), 1e-6);
  // Keys after the last query: nothing visible, the state and gradients stay.
  for (int64_t j = (qp + Tq) * hs; j < T * hs; ++j) ASSERT_EQ(dk1[size_t(j)], 0.0f);
  std::vector<float> o(static_cast<size_t>(Tq * hs)), m(static_cast<size_t>(Tq)), l(static_cast<size_t>(Tq));
  const k::FlashState st{o.data(), m.data(), l.data()};
  k::flash_state_init(st, Tq, hs);
  std::vector<float> late = normal_values(size_t(10 * hs), 9, 5);
  k::flash_forward_block(st, q.data(), late.data(), late.data(), DType::f32, DType::f32, Tq, 10, hs, qp, qp + Tq);
  for (const float x : l) EXPECT_EQ(x, 0.0f);
  std::vector<float> out(static_cast<size_t>(Tq * hs)), lse(static_cast<size_t>(Tq));
  EXPECT_THROW(k::flash_state_finish(out.data(), hs, lse.data(), st, Tq, hs), braid::Error);
}
