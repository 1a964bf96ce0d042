// The Llama-family kernels (RMSNorm, rotary positions, SwiGLU) against finite
// differences (kernel_checks.h) and a
// float64 PyTorch oracle (tools/llama_ops_oracle.py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cpu/rmsnorm.h"
#include "braid/kernels/cpu/rope.h"
#include "braid/kernels/cpu/swiglu.h"
#include "kernels/kernel_checks.h"
#include "kernels/normal_values.h"

namespace k = braid::kernels;
using testing_data::normal_values;

using kernel_checks::dot;
using kernel_checks::fd_check;
using kernel_checks::rel_l2;

namespace {

// Positions of a context-parallel chunk pair: not contiguous, not from 0.
std::vector<int64_t> chunk_positions(int64_t T) {
  std::vector<int64_t> p(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) p[size_t(t)] = t < T / 2 ? 5 + t : 40 + t;
  return p;
}

}  // namespace

TEST(KernelsFD, RmsNorm) {
  const int64_t N = 4, C = 9;
  auto inp = normal_values(size_t(N * C), 12, 1), w = normal_values(size_t(C), 12, 2);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] += float(i % 3);  // rows off zero mean
  auto r = normal_values(size_t(N * C), 12, 3);
  std::vector<float> out(r.size()), rstd(static_cast<size_t>(N));
  auto loss = [&] {
    k::rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C);
    return dot(r, out.data());
  };
  loss();
  std::vector<float> dinp(inp.size(), 0.0f), dw(size_t(C), 0.0f);
  k::rmsnorm_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
  fd_check("rmsnorm.dinp", inp, dinp, loss);
  fd_check("rmsnorm.dweight", w, dw, loss);
  // dinp and dweight accumulate: a second backward doubles them.
  auto di1 = dinp, dw1 = dw;
  k::rmsnorm_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), rstd.data(), N, C);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw[i], 2 * dw1[i]);
  for (size_t i = 0; i < dinp.size(); ++i) EXPECT_FLOAT_EQ(dinp[i], 2 * di1[i]);
}

TEST(KernelsFD, SwiGlu) {
  const int64_t N = 3, H = 5;
  auto inp = normal_values(size_t(N * 2 * H), 13, 1, 2.0f), r = normal_values(size_t(N * H), 13, 2);
  std::vector<float> out(r.size());
  auto loss = [&] {
    k::swiglu_forward(out.data(), inp.data(), N, H);
    return dot(r, out.data());
  };
  std::vector<float> dinp(inp.size(), 7.0f);
  k::swiglu_backward(dinp.data(), r.data(), inp.data(), N, H);
  fd_check("swiglu.dinp", inp, dinp, loss);  // written (=): the 7s are gone
}

TEST(KernelsFD, RotaryPositions) {
  // Heads at column 3 of 2 x 8-feature heads in rows of 21 floats; the other
  // columns must stay as they were.
  const int64_t B = 2, T = 4, HS = 8;
  const k::RopeHeads h{21, 3, 2, HS};
  const auto pos = chunk_positions(T);
  const auto tb = k::rope_table(pos.data(), T, k::rope_inverse_frequencies(HS, 10000.0));
  auto x = normal_values(size_t(B * T * h.stride), 14, 1), r = normal_values(x.size(), 14, 2);
  std::vector<float> out(x.size());
  auto loss = [&] {
    out = x;
    k::rope_forward(out.data(), B, T, h, tb);
    return dot(r, out.data());
  };
  loss();
  for (int64_t row = 0; row < B * T; ++row) {
    for (int64_t c = 0; c < h.stride; ++c) {
      if (c >= h.col0 && c < h.col0 + h.n_heads * HS) continue;
      EXPECT_EQ(out[size_t(row * h.stride + c)], x[size_t(row * h.stride + c)]) << "column " << c;
    }
  }
  auto dx = r;
  k::rope_backward(dx.data(), B, T, h, tb);
  fd_check("rope.dx", x, dx, loss);
}

TEST(Rope, PositionZeroIsTheIdentityAndTheTurnKeepsTheNorm) {
  const int64_t T = 3, HS = 16;
  const k::RopeHeads h{HS, 0, 1, HS};
  const std::vector<int64_t> pos = {0, 7, 1000};
  const auto tb = k::rope_table(pos.data(), T, k::rope_inverse_frequencies(HS, 500000.0, {8.0, 1.0, 4.0, 8192}));
  auto x = normal_values(size_t(T * HS), 15, 1), y = x;
  k::rope_forward(y.data(), 1, T, h, tb);
  for (int64_t c = 0; c < HS; ++c) EXPECT_EQ(y[size_t(c)], x[size_t(c)]);
  for (int64_t t = 0; t < T; ++t) {
    double nx = 0, ny = 0;
    for (int64_t c = 0; c < HS; ++c) nx += double(x[size_t(t * HS + c)]) * x[size_t(t * HS + c)];
    for (int64_t c = 0; c < HS; ++c) ny += double(y[size_t(t * HS + c)]) * y[size_t(t * HS + c)];
    EXPECT_NEAR(ny, nx, 1e-5 * nx) << "t " << t;
  }
  // Backward turns back: forward then backward is the identity to rounding.
  k::rope_backward(y.data(), 1, T, h, tb);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-5f);
}

TEST(Rope, BadSettingsAreConfigErrors) {
  EXPECT_THROW(k::rope_inverse_frequencies(7, 10000.0), braid::ConfigError);
  EXPECT_THROW(k::rope_inverse_frequencies(8, 1.0), braid::ConfigError);
  EXPECT_THROW(k::rope_inverse_frequencies(8, 1e4, {8.0, 4.0, 1.0, 8192}), braid::ConfigError);
  // A table for other positions or another head size is refused.
  const std::vector<int64_t> pos = {0, 1};
  const auto tb = k::rope_table(pos.data(), 2, k::rope_inverse_frequencies(8, 1e4));
  std::vector<float> x(3 * 8);
  EXPECT_THROW(k::rope_forward(x.data(), 1, 3, k::RopeHeads{8, 0, 1, 8}, tb), braid::Error);
  EXPECT_THROW(k::rope_forward(x.data(), 1, 2, k::RopeHeads{4, 0, 1, 4}, tb), braid::Error);
  try {
    k::rope_inverse_frequencies(8, 1e4, {0.0, 1.0, 4.0, 8192});
    FAIL() << "expected a ConfigError";
  } catch (const braid::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Llama 3.1 uses 8, 1, 4, 8192"), std::string::npos) << e.what();
  }
}

// Against PyTorch in float64 (transformers' formulas): only braid's fp32 rounding.
TEST(LlamaKernels, MatchPyTorch) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy; skipping the PyTorch oracle";
  namespace fs = std::filesystem;
  const char* src = std::getenv("BRAID_SOURCE_DIR");
  const fs::path script = fs::path(src ? src : BRAID_SOURCE_DIR) / "tools" / "llama_ops_oracle.py";
  const int64_t N = 64, C = 96, H = 80, B = 2, T = 48, NH = 3, HS = 64;
  const k::RopeScaling sc{8.0, 1.0, 4.0, 64};  // a short original context: every band of the scaling
  const double theta = 500000.0;
  const fs::path dir = fs::temp_directory_path() / ("braid_llama_ops_" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const void* p, size_t bytes) {
    std::ofstream(dir / name, std::ios::binary).write(static_cast<const char*>(p), std::streamsize(bytes));
  };
  auto read = [&](const char* name, size_t n) {
    std::vector<float> v(n);
    std::ifstream(dir / name, std::ios::binary).read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
    return v;
  };
  const auto nx = normal_values(size_t(N * C), 16, 1, 3.0f), nw = normal_values(size_t(C), 16, 2),
             ndy = normal_values(size_t(N * C), 16, 3);
  const auto gx = normal_values(size_t(N * 2 * H), 16, 4, 2.0f), gdy = normal_values(size_t(N * H), 16, 5);
  const auto rx = normal_values(size_t(B * T * NH * HS), 16, 6), rdy = normal_values(rx.size(), 16, 7);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = 3 + 97 * t;  // past the original context too
  write("norm_x.bin", nx.data(), nx.size() * 4), write("norm_w.bin", nw.data(), nw.size() * 4);
  write("norm_dy.bin", ndy.data(), ndy.size() * 4), write("glu_x.bin", gx.data(), gx.size() * 4);
  write("glu_dy.bin", gdy.data(), gdy.size() * 4), write("rope_x.bin", rx.data(), rx.size() * 4);
  write("rope_dy.bin", rdy.data(), rdy.size() * 4), write("rope_pos.bin", pos.data(), pos.size() * 8);
  const auto inv = k::rope_inverse_frequencies(HS, theta, sc);
  write("rope_inv.bin", inv.data(), inv.size() * 4);
  std::string cmd = "/usr/bin/python3 " + script.string() + " " + dir.string();
  for (int64_t v : {N, C, H, B, T, NH, HS}) cmd += " " + std::to_string(v);
  cmd += " " + std::to_string(theta) + " " + std::to_string(sc.factor) + " " + std::to_string(sc.low_freq_factor) +
         " " + std::to_string(sc.high_freq_factor) + " " + std::to_string(sc.original_context);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  std::vector<float> ny(nx.size()), rstd(static_cast<size_t>(N)), ndx(nx.size(), 0.0f), ndw(size_t(C), 0.0f);
  k::rmsnorm_forward(ny.data(), rstd.data(), nx.data(), nw.data(), N, C);
  k::rmsnorm_backward(ndx.data(), ndw.data(), ndy.data(), nx.data(), nw.data(), rstd.data(), N, C);
  EXPECT_LT(rel_l2(ny, read("norm_y.bin", ny.size())), 1e-6);
  EXPECT_LT(rel_l2(ndx, read("norm_dx.bin", ndx.size())), 1e-5);
  EXPECT_LT(rel_l2(ndw, read("norm_dw.bin", ndw.size())), 1e-5);

  std::vector<float> gy(gdy.size()), gdx(gx.size());
  k::swiglu_forward(gy.data(), gx.data(), N, H);
  k::swiglu_backward(gdx.data(), gdy.data(), gx.data(), N, H);
  EXPECT_LT(rel_l2(gy, read("glu_y.bin", gy.size())), 1e-6);
  EXPECT_LT(rel_l2(gdx, read("glu_dx.bin", gdx.size())), 1e-6);

  const auto ref_inv = read("rope_inv_freq.bin", inv.size());
  // Two ulps: PyTorch's fp32 pow and glibc's powf may differ by one.
  for (size_t i = 0; i < inv.size(); ++i) EXPECT_NEAR(inv[i], ref_inv[i], 2.5e-7 * ref_inv[i]) << "inv_freq " << i;
  const k::RopeHeads h{NH * HS, 0, NH, HS};
  auto ry = rx, rdx = rdy;
  const auto tb = k::rope_table(pos.data(), T, inv);
  k::rope_forward(ry.data(), B, T, h, tb);
  k::rope_backward(rdx.data(), B, T, h, tb);
  EXPECT_LT(rel_l2(ry, read("rope_y.bin", ry.size())), 1e-6);
  EXPECT_LT(rel_l2(rdx, read("rope_dx.bin", rdx.size())), 1e-6);
  fs::remove_all(dir);
}
