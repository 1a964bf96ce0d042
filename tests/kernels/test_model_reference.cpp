// GPT "tiny" against the PyTorch oracle tools/make_reference.py (float64 in
// torch, so every difference is braid's fp32 rounding): logits, loss, every
// parameter gradient, and the parameters after one AdamW step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "braid/core/rng.h"
#include "braid/formats/model_header.h"
#include "braid/kernels/cpu/adamw.h"
#include "braid/model/gpt.h"

namespace fs = std::filesystem;
using braid::model::GPT;
using braid::model::GPTConfig;

namespace {

template <typename T>
void write_bin(const fs::path& p, const T* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(n * sizeof(T)));
  ASSERT_TRUE(f.good()) << p;
}

std::vector<float> read_bin(const fs::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(float)));
  EXPECT_TRUE(f.good() && size_t(f.gcount()) == n * sizeof(float)) << "short read " << p;
  return v;
}

struct Cmp {
  double max_abs = 0, max_ratio = 0;  // ratio = |a - b| / (atol + rtol |b|); must be <= 1
  size_t worst = 0;
  void add(float a, float b, double atol, double rtol, size_t i) {
    const double d = std::abs(double(a) - double(b));
    max_abs = std::max(max_abs, d);
    const double r = d / (atol + rtol * std::abs(double(b)));
    if (r > max_ratio) max_ratio = r, worst = i;
  }
};

std::string source_dir() {
  const char* e = std::getenv("BRAID_SOURCE_DIR");
  return e ? e : BRAID_SOURCE_DIR;
}

}  // namespace

namespace {

// AdamW's settings of the comparison.
constexpr float kLr = 1e-3f, kBeta1 = 0.9f, kBeta2 = 0.95f, kEps = 1e-8f, kWd = 0.1f;

// The oracle's input.json: cfg's sizes and block parts, the batch, AdamW and
// the parameter table of m.
nlohmann::json oracle_input(const GPTConfig& cfg, const GPT& m, int64_t B, int64_t T) {
  nlohmann::json j;
  j["vocab_size"] = cfg.vocab_size, j["padded_vocab_size"] = cfg.padded_vocab_size, j["block_size"] = cfg.block_size;
  j["n_layer"] = cfg.n_layer, j["n_head"] = cfg.n_head, j["n_embd"] = cfg.n_embd;
  j["B"] = B, j["T"] = T, j["num_params"] = m.num_params(), j["dtype"] = "float64";
  // The block's parts, as the checkpoint header names them.
  const nlohmann::json block = braid::formats::block_header(cfg);
  for (const auto& [key, value] : block.items()) j[key] = value;
  j["adamw"] = {{"lr", kLr}, {"beta1", kBeta1}, {"beta2", kBeta2}, {"eps", kEps}, {"weight_decay", kWd}};
  for (const auto& p : m.param_table())
    j["params"].push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset},
                           {"numel", p.numel}, {"weight_decay", p.weight_decay}});
  return j;
}

// cfg on B sequences of T tokens against the oracle (block_size raised to T).
void check_against_torch(GPTConfig cfg, int64_t B, int64_t T) {
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy; skipping the PyTorch oracle";
  const fs::path script = fs::path(source_dir()) / "tools" / "make_reference.py";
  ASSERT_TRUE(fs::exists(script)) << script;

  cfg.block_size = std::max(cfg.block_size, T);
  const int64_t V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  GPT m(cfg, B, T);
  m.init_weights(1234);
  braid::Rng rng(5);
  std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T));
  for (auto& t : tokens) t = int32_t(rng.below(uint64_t(V)));
  for (auto& t : targets) t = int32_t(rng.below(uint64_t(V)));
  targets[3] = int32_t(V - 1);  // the last real token id

  const fs::path dir = fs::temp_directory_path() / ("braid_ref_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "input.json") << oracle_input(cfg, m, B, T).dump();
  write_bin(dir / "params.bin", m.params(), m.num_params());
  write_bin(dir / "tokens.bin", tokens.data(), tokens.size());
  write_bin(dir / "targets.bin", targets.data(), targets.size());
  const std::string cmd = "/usr/bin/python3 " + script.string() + " " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  const float loss = m.forward(tokens.data(), targets.data(), B, T);
  m.zero_grad();
  m.backward(1.0f);

  // Logits: fp32 through 2 blocks, |logit| ~ 0.1: 1e-5 absolute is ~100 ulp headroom.
  auto ref_logits = read_bin(dir / "ref_logits.bin", size_t(B * T * Vp));
  Cmp cl;
  std::vector<float> logits(ref_logits.size());
  m.logits_to_f32(logits.data(), 0, B * T);
  for (size_t i = 0; i < ref_logits.size(); ++i) cl.add(logits[i], ref_logits[i], 1e-5, 1e-4, i);
  std::printf("  logits: max |diff| %.3g (ratio to tolerance %.3g)\n", cl.max_abs, cl.max_ratio);
  EXPECT_LE(cl.max_ratio, 1.0) << "worst logit index " << cl.worst;

  const std::vector<float> ref_loss_v = read_bin(dir / "ref_loss.bin", 1);
  const float ref_loss = ref_loss_v.at(0);
  std::printf("  loss: braid %.8f torch %.8f diff %.3g\n", loss, ref_loss, double(loss - ref_loss));
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));  // tighter than rtol 1e-4: holds

  auto ref_grads = read_bin(dir / "ref_grads.bin", m.num_params());
  std::string worst_name;
  double worst_ratio = 0, worst_abs = 0;
  for (const auto& p : m.param_table()) {
    Cmp c;
    for (size_t i = 0; i < p.numel; ++i)
      c.add(m.grads()[p.offset + i], ref_grads[p.offset + i], 1e-5, 1e-4, i);
    worst_abs = std::max(worst_abs, c.max_abs);
    if (c.max_ratio >= worst_ratio) worst_ratio = c.max_ratio, worst_name = p.name;
    EXPECT_LE(c.max_ratio, 1.0) << p.name << "[" << c.worst << "]: braid "
                                << m.grads()[p.offset + c.worst] << " torch "
                                << ref_grads[p.offset + c.worst];
  }
  std::printf("  grads: max |diff| %.3g; worst parameter %s (ratio to tolerance %.3g)\n",
              worst_abs, worst_name.c_str(), worst_ratio);

  // AdamW from torch's gradients, so the check isolates the optimizer (Adam's
  // first step is ~lr * sign(g), which would amplify grad noise near g = 0).
  std::vector<float> p(m.params(), m.params() + m.num_params());
  std::vector<float> mom(p.size(), 0.0f), var(p.size(), 0.0f);
  const auto table = m.param_table();
  for (const auto& info : table)
    braid::kernels::adamw_update(p.data() + info.offset, ref_grads.data() + info.offset,
                                 mom.data() + info.offset, var.data() + info.offset, info.numel,
                                 kLr, kBeta1, kBeta2, kEps, info.weight_decay ? kWd : 0.0f, 1);
  auto ref_after = read_bin(dir / "ref_adamw.bin", m.num_params());
  Cmp ca;
  for (size_t i = 0; i < p.size(); ++i) ca.add(p[i], ref_after[i], 1e-7, 1e-6, i);
  std::printf("  adamw params: max |diff| %.3g (ratio to tolerance %.3g)\n", ca.max_abs,
              ca.max_ratio);
  EXPECT_LE(ca.max_ratio, 1.0) << "worst element " << ca.worst << ": braid " << p[ca.worst]
                               << " torch " << ref_after[ca.worst];
  fs::remove_all(dir);
}

}  // namespace

// T = 32 runs the attention kernel that saves the probabilities; T = 512 the
// fused one (kernels::kFusedAttentionMinT).
TEST(GPTReference, TinyMatchesPyTorch) { check_against_torch(GPTConfig::preset("tiny"), 2, 32); }
TEST(GPTReference, TinyMatchesPyTorchOnTheFusedAttentionPath) {
  check_against_torch(GPTConfig::preset("tiny"), 1, 512);
}

// Llama's block: RMSNorm, rotary positions, SwiGLU, 2 key/value heads for 4
// query heads, no biases, an untied head.
TEST(GPTReference, LlamaTinyMatchesPyTorch) { check_against_torch(GPTConfig::preset("llama-tiny"), 2, 32); }

// The other settings of its parts: one key/value head for all, biases, a tied
// head, and Llama 3's frequency scaling with an original context short enough
// that all three bands (kept, interpolated, stretched) occur.
TEST(GPTReference, LlamaVariantsMatchPyTorch) {
  GPTConfig c = GPTConfig::preset("llama-tiny");
  c.n_kv_head = 1, c.bias = true, c.tied_head = true;
  c.rope_theta = 500000.0;
  c.rope_scaling = {8.0, 1.0, 4.0, 16};
  check_against_torch(c, 1, 48);
}
