#include "braid/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/crossentropy.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/encoder.h"
#include "braid/kernels/cpu/layernorm.h"
#include "braid/kernels/cpu/matmul.h"

namespace braid::model {

namespace k = braid::kernels;

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;
  c.name = name;
  if (name == "tiny") {
    c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.block_size = 64;
  } else if (name == "small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 256, c.block_size = 256;
  } else if (name == "gpt2") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.block_size = 1024;
  } else {
    throw ConfigError("unknown model preset '" + name + "'; valid presets: tiny, small, gpt2");
  }
  c.padded_vocab_size = pad_vocab(c.vocab_size);
  return c;
}

int64_t GPTConfig::pad_vocab(int64_t v, int64_t multiple) {
  BRAID_CHECK(multiple > 0, "pad_vocab: multiple must be positive, got ", multiple);
  return (v + multiple - 1) / multiple * multiple;
}

void GPTConfig::validate() const {
  const std::string who = "model '" + name + "': ";
  BRAID_CONFIG_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
                     who, "all sizes must be positive (vocab_size=", vocab_size,
                     " block_size=", block_size, " n_layer=", n_layer, " n_head=", n_head,
                     " n_embd=", n_embd, ")");
  BRAID_CONFIG_CHECK(n_embd % n_head == 0, who, "n_embd=", n_embd, " is not divisible by n_head=",
                     n_head, "; choose n_head dividing n_embd");
  BRAID_CONFIG_CHECK(padded_vocab_size >= vocab_size, who, "padded_vocab_size=",
                     padded_vocab_size, " < vocab_size=", vocab_size, "; use ",
                     pad_vocab(vocab_size));
  BRAID_CONFIG_CHECK(padded_vocab_size % 64 == 0, who, "padded_vocab_size=", padded_vocab_size,
                     " is not a multiple of 64; use ", pad_vocab(vocab_size));
}

namespace {
constexpr size_t kAlign = 16;  // floats (64 bytes)
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t GPTMemoryPlan::bytes(MemCategory c) const {
  switch (c) {
    case MemCategory::compute_params: return params_bytes;
    case MemCategory::grads: return grads_bytes;
    case MemCategory::activations: return acts_bytes + tokens_bytes;
    case MemCategory::workspace: return workspace_bytes;
    default: return 0;
  }
}

size_t GPTMemoryPlan::total_bytes() const {
  return params_bytes + grads_bytes + acts_bytes + tokens_bytes + workspace_bytes;
}

size_t GPT::build_param_table(const GPTConfig& cfg, std::vector<ParamInfo>* table,
                              std::vector<size_t>* layer_begin) {
  const int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab_size;
  size_t off = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool wd, int layer) {
    size_t n = 1;
    for (int64_t s : shape) n *= size_t(s);
    table->push_back({name, std::move(shape), off, n, wd, layer});
    off = align_up(off + n);
  };
  add("wte.weight", {Vp, C}, true, -1);
  add("wpe.weight", {cfg.block_size, C}, true, -1);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const int li = int(l);
    layer_begin->push_back(off);
    add(p + "ln_1.weight", {C}, false, li);
    add(p + "ln_1.bias", {C}, false, li);
    add(p + "attn.c_attn.weight", {3 * C, C}, true, li);
    add(p + "attn.c_attn.bias", {3 * C}, false, li);
    add(p + "attn.c_proj.weight", {C, C}, true, li);
    add(p + "attn.c_proj.bias", {C}, false, li);
    add(p + "ln_2.weight", {C}, false, li);
    add(p + "ln_2.bias", {C}, false, li);
    add(p + "mlp.c_fc.weight", {4 * C, C}, true, li);
    add(p + "mlp.c_fc.bias", {4 * C}, false, li);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, true, li);
    add(p + "mlp.c_proj.bias", {C}, false, li);
  }
  layer_begin->push_back(off);
  add("ln_f.weight", {C}, false, int(L));
  add("ln_f.bias", {C}, false, int(L));
  layer_begin->push_back(off);
  return off;
}

std::vector<size_t> GPT::unit_bounds(const GPTConfig& cfg) {
  cfg.validate();
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  build_param_table(cfg, &table, &layer_begin);
  std::vector<size_t> b{0};
  b.insert(b.end(), layer_begin.begin(), layer_begin.end());
  return b;
}

std::vector<ParamInfo> GPT::param_table(const GPTConfig& cfg) {
  cfg.validate();
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  build_param_table(cfg, &table, &layer_begin);
  return table;
}

GPTMemoryPlan GPT::memory_plan(const GPTConfig& cfg, int64_t max_B, int64_t max_T,
                               bool owns_state) {
  cfg.validate();
  BRAID_CONFIG_CHECK(max_B > 0 && max_T > 0, "GPT: max_B=", max_B, " and max_T=", max_T,
                     " must be positive");
  BRAID_CONFIG_CHECK(max_T <= cfg.block_size, "GPT: sequence length ", max_T,
                     " exceeds block_size=", cfg.block_size, " of model '", cfg.name,
                     "'; use T <= ", cfg.block_size);
  GPTMemoryPlan m;
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  m.num_params = build_param_table(cfg, &table, &layer_begin);
  m.params_bytes = owns_state ? m.num_params * sizeof(float) : 0;
  m.grads_bytes = owns_state ? m.num_params * sizeof(float) : 0;

  const int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab_size;
  const size_t BT = size_t(max_B * max_T), BTC = BT * size_t(C), NH = size_t(cfg.n_head);
  // Per block (see layer_acts): ln1, atty, attproj, res2, ln2, fcproj, res3 (7 BTC),
  // qkv, qkvr (3 BTC each), fch, fch_gelu (4 BTC each) = 21 BTC; 4 LayerNorm
  // statistics of BT; the attention matrix B x NH x T x T.
  m.layer_act_floats = BTC * 21 + 4 * BT + size_t(max_B) * NH * size_t(max_T * max_T);
  // Head: encoded, lnf (BTC each), lnf_mean, lnf_rstd, lse, losses (BT each), logits (BT x Vp).
  m.act_floats = m.layer_act_floats * size_t(L) + BTC * 2 + BT * 4 + BT * size_t(Vp);
  m.acts_bytes = m.act_floats * sizeof(float);
  const size_t att_scratch =
      std::max(k::attention_forward_scratch_floats(max_B, max_T, C),
               k::attention_backward_scratch_floats(max_B, max_T, C, cfg.n_head));
  // dres, dln, datty (BTC each), dqkv (3 BTC), dfch (4 BTC), dlogits (BT x Vp), attention scratch.
  m.scratch_floats = BTC * 10 + BT * size_t(Vp) + att_scratch;
  m.workspace_bytes = m.scratch_floats * sizeof(float);
  m.tokens_bytes = 2 * BT * sizeof(int32_t);
  return m;
}

GPT::GPT(const GPTConfig& cfg, int64_t max_B, int64_t max_T, MemoryLedger* ledger,
         UnitStorage* storage)
    : cfg_(cfg), max_B_(max_B), max_T_(max_T), storage_(storage) {
  // Validates cfg, max_B and max_T; every size below comes from the plan.
  const GPTMemoryPlan plan = memory_plan(cfg_, max_B, max_T, storage == nullptr);
  num_params_ = build_param_table(cfg_, &table_, &layer_begin_);
  BRAID_CHECK(num_params_ == plan.num_params, "parameter table out of sync with memory_plan");
  units_.push_back(0);
  units_.insert(units_.end(), layer_begin_.begin(), layer_begin_.end());
  if (!storage_) {
    params_ = Buffer(plan.params_bytes, MemCategory::compute_params, ledger);
    grads_ = Buffer(plan.grads_bytes, MemCategory::grads, ledger);
  }

  const int64_t C = cfg_.n_embd, L = cfg_.n_layer, Vp = cfg_.padded_vocab_size;
  const size_t BT = size_t(max_B * max_T), BTC = BT * size_t(C);
  layer_act_floats_ = plan.layer_act_floats;
  acts_ = Buffer(plan.acts_bytes, MemCategory::activations, ledger);
  float* a = acts_.as<float>() + layer_act_floats_ * size_t(L);
  encoded_ = a, a += BTC;
  lnf_ = a, a += BTC;
  lnf_mean_ = a, a += BT;
  lnf_rstd_ = a, a += BT;
  lse_ = a, a += BT;
  losses_ = a, a += BT;
  logits_ = a, a += BT * size_t(Vp);
  BRAID_CHECK(a == acts_.as<float>() + plan.act_floats, "activation layout out of sync with memory_plan");

  scratch_ = Buffer(plan.workspace_bytes, MemCategory::workspace, ledger);
  float* s = scratch_.as<float>();
  dres_ = s, s += BTC;
  dln_ = s, s += BTC;
  datty_ = s, s += BTC;
  dqkv_ = s, s += 3 * BTC;
  dfch_ = s, s += 4 * BTC;
  dlogits_ = s, s += BT * size_t(Vp);
  att_scratch_ = s;
  BRAID_CHECK(size_t(s - scratch_.as<float>()) <= plan.scratch_floats,
              "scratch layout out of sync with memory_plan");
  tokens_buf_ = Buffer(plan.tokens_bytes, MemCategory::activations, ledger);
  tokens_ = tokens_buf_.as<int32_t>();
  targets_ = tokens_ + BT;
}

const ParamInfo& GPT::param(const std::string& name) const {
  for (const auto& p : table_)
    if (p.name == name) return p;
  throw Error(detail::concat(__FILE__, ":", __LINE__, ": no parameter named '", name, "'"));
}

GPT::LayerParams GPT::layer_params(const float* unit, int64_t l) const {
  const size_t first = 2 + size_t(l) * 12;  // index in table_ of h.l.ln_1.weight
  const size_t begin = units_[size_t(l) + 1];
  float* base = const_cast<float*>(unit);
  auto at = [&](size_t i) { return base + (table_[first + i].offset - begin); };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11)};
}

GPT::LayerActs GPT::layer_acts(int64_t l) const {
  const size_t BT = size_t(max_B_ * max_T_), BTC = BT * size_t(cfg_.n_embd);
  float* a = const_cast<float*>(acts_.as<float>()) + layer_act_floats_ * size_t(l);
  LayerActs r;
  auto take = [&a](size_t n) {
    float* p = a;
    a += n;
    return p;
  };
  r.ln1 = take(BTC);
  r.ln1_mean = take(BT);
  r.ln1_rstd = take(BT);
  r.qkv = take(3 * BTC);
  r.qkvr = take(3 * BTC);
  r.atty = take(BTC);
  r.attproj = take(BTC);
  r.res2 = take(BTC);
  r.ln2 = take(BTC);
  r.ln2_mean = take(BT);
  r.ln2_rstd = take(BT);
  r.fch = take(4 * BTC);
  r.fch_gelu = take(4 * BTC);
  r.fcproj = take(BTC);
  r.res3 = take(BTC);
  r.att = take(size_t(max_B_) * size_t(cfg_.n_head) * size_t(max_T_ * max_T_));
  // The constructor's per-layer size must match what is carved out here.
  BRAID_CHECK(a == const_cast<float*>(acts_.as<float>()) + layer_act_floats_ * size_t(l + 1),
              "layer activation layout out of sync with layer_act_floats_");
  return r;
}

void GPT::init_weights(uint64_t seed) {
  BRAID_CHECK(!storage_, "init_weights: the model has external storage; use init_weights_range");
  init_weights_range(seed, params(), 0, num_params_);
}

void GPT::init_weights_range(uint64_t seed, float* dst, size_t lo, size_t hi) const {
  BRAID_CHECK(lo <= hi && hi <= num_params_, "init_weights_range: [", lo, ", ", hi,
              ") outside [0, ", num_params_, ")");
  const float std_base = 0.02f;
  const float std_proj = 0.02f / std::sqrt(2.0f * float(cfg_.n_layer));
  std::memset(dst, 0, (hi - lo) * sizeof(float));
  for (size_t pi = 0; pi < table_.size(); ++pi) {
    const ParamInfo& info = table_[pi];
    const bool is_ln = info.name.find("ln_") != std::string::npos;
    const bool is_bias = info.name.size() >= 5 && info.name.compare(info.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) continue;  // zero
    size_t n = info.numel;
    if (info.name == "wte.weight") n = size_t(cfg_.vocab_size * cfg_.n_embd);  // padded rows 0
    // Elements [a, b) of this tensor fall inside [lo, hi).
    const size_t a = std::max(lo, info.offset) - info.offset;
    const size_t b = std::min(hi, info.offset + n);
    if (b <= info.offset + a) continue;
    // Element i of the tensor lands at dst[info.offset + i - lo]; i >= a keeps it >= 0.
    if (is_ln) {
      for (size_t i = a; i < b - info.offset; ++i) dst[info.offset + i - lo] = 1.0f;
      continue;
    }
    const bool is_proj = info.name.find("c_proj.weight") != std::string::npos;
    const float sd = is_proj ? std_proj : std_base;
    const int64_t A = int64_t(a), E = int64_t(b - info.offset);
#pragma omp parallel for schedule(static)
    for (int64_t i = A; i < E; ++i) dst[info.offset + size_t(i) - lo] = sd * rand_normal(seed, pi, uint64_t(i));
  }
}

void GPT::zero_grad() {
  if (!storage_) std::memset(grads(), 0, num_params_ * sizeof(float));
}

const float* GPT::acquire_params(int u) {
  return storage_ ? storage_->acquire_params(u) : params() + units_[size_t(u)];
}
void GPT::release_params(int u) {
  if (storage_) storage_->release_params(u);
}
float* GPT::acquire_grads(int u) {
  return storage_ ? storage_->acquire_grads(u) : grads() + units_[size_t(u)];
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  BRAID_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_, "forward: B=", B, " T=", T,
              " outside the allocated max_B=", max_B_, " max_T=", max_T_);
  const int64_t C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head, V = cfg_.vocab_size,
                Vp = cfg_.padded_vocab_size, BT = B * T;
  for (int64_t i = 0; i < BT; ++i) {
    BRAID_CHECK(tokens[i] >= 0 && tokens[i] < V, "forward: token ", tokens[i], " at ", i,
                " outside [0, ", V, ")");
    tokens_[i] = tokens[i];
    if (targets) targets_[i] = targets[i];
  }
  B_ = B, T_ = T;
  have_targets_ = targets != nullptr;
  const int uf = int(L) + 1;  // final LayerNorm unit
  // Unit 0 holds wte at offset 0 and wpe at table_[1].offset.
  const float* E = acquire_params(0);
  k::encoder_forward(encoded_, tokens_, E, E + table_[1].offset, B, T, C);
  release_params(0);
  const float* x = encoded_;
  // Rounds a matmul input to the compute dtype (no-op in f32).
  auto rnd = [this](float* a, int64_t n) { kernels::round_to_dtype(a, compute_dtype_, size_t(n)); };
  for (int64_t l = 0; l < L; ++l) {
    LayerParams p = layer_params(acquire_params(int(l) + 1), l);
    LayerActs a = layer_acts(l);
    k::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, BT, C);
    rnd(a.ln1, BT * C);
    k::matmul_forward(a.qkv, a.ln1, p.qkvw, p.qkvb, BT, C, 3 * C);
    k::attention_forward(a.atty, a.qkvr, a.att, att_scratch_, a.qkv, B, T, C, NH);
    rnd(a.atty, BT * C);
    k::matmul_forward(a.attproj, a.atty, p.attprojw, p.attprojb, BT, C, C);
    k::residual_forward(a.res2, x, a.attproj, BT * C);
    k::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, BT, C);
    rnd(a.ln2, BT * C);
    k::matmul_forward(a.fch, a.ln2, p.fcw, p.fcb, BT, C, 4 * C);
    k::gelu_forward(a.fch_gelu, a.fch, BT * 4 * C);
    rnd(a.fch_gelu, BT * 4 * C);
    k::matmul_forward(a.fcproj, a.fch_gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C);
    k::residual_forward(a.res3, a.res2, a.fcproj, BT * C);
    release_params(int(l) + 1);
    x = a.res3;
  }
  const float* F = acquire_params(uf);  // ln_f.weight at F[0], ln_f.bias after it
  const size_t lnfb_rel = table_[table_.size() - 1].offset - units_[size_t(uf)];
  k::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, F, F + lnfb_rel, BT, C);
  release_params(uf);
  rnd(lnf_, BT * C);
  // logits (BT, Vp) = lnf (BT, C) @ wte^T: the head is tied to the embedding.
  const float* wte = acquire_params(0);
  k::matmul_forward(logits_, lnf_, wte, nullptr, BT, C, Vp);
  release_params(0);
  k::softmax_crossentropy_forward(losses_, lse_, nullptr, logits_, targets ? targets_ : nullptr,
                                  BT, V, Vp);
  if (!targets) return 0.0f;
  double sum = 0.0;  // fixed-order sum: the loss is bitwise reproducible
  for (int64_t i = 0; i < BT; ++i) sum += double(losses_[i]);
  return float(sum / double(BT));
}

void GPT::backward(float loss_scale, const std::function<void(size_t, size_t)>& on_ready) {
  BRAID_CHECK(have_targets_, "backward: the last forward had no targets");
  const int64_t B = B_, T = T_, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head,
                V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size, BT = B * T;
  const int uf = int(L) + 1;
  auto ready = [&](int u) {
    if (storage_) {
      storage_->grads_ready(u);
    } else if (on_ready) {
      on_ready(units_[size_t(u)], units_[size_t(u) + 1]);
    }
  };

  k::softmax_crossentropy_backward(dlogits_, logits_, lse_, targets_,
                                   loss_scale / float(BT), BT, V, Vp);
  // Output gradients enter each matmul backward in the compute dtype (no-op in f32).
  auto rnd = [this](float* a, int64_t n) { kernels::round_to_dtype(a, compute_dtype_, size_t(n)); };
  rnd(dlogits_, BT * Vp);
  float* G0 = acquire_grads(0);  // dwte at G0[0], dwpe at G0[table_[1].offset]
  const float* wte = acquire_params(0);
  k::matmul_backward(dln_, G0, nullptr, dlogits_, lnf_, wte, BT, C, Vp);
  release_params(0);
  // dres_ is the residual-stream gradient; layer norms accumulate into it.
  std::memset(dres_, 0, size_t(BT * C) * sizeof(float));
  const float* xL = L > 0 ? layer_acts(L - 1).res3 : encoded_;
  {
    const float* F = acquire_params(uf);
    float* GF = acquire_grads(uf);
    const size_t lnfb_rel = table_[table_.size() - 1].offset - units_[size_t(uf)];
    k::layernorm_backward(dres_, GF, GF + lnfb_rel, dln_, xL, F, lnf_mean_, lnf_rstd_, BT, C);
    release_params(uf);
    ready(uf);
  }

  for (int64_t l = L - 1; l >= 0; --l) {
    const int u = int(l) + 1;
    LayerParams p = layer_params(acquire_params(u), l);
    LayerParams g = layer_params(acquire_grads(u), l);
    LayerActs a = layer_acts(l);
    const float* x = l == 0 ? encoded_ : layer_acts(l - 1).res3;
    // res3 = res2 + fcproj: d fcproj = dres; d res2 = dres (+ LN2 path below).
    // With rounding on, dres is rounded in place: the residual stream's
    // gradient is then held in the compute dtype, as in a half-precision run.
    rnd(dres_, BT * C);
    k::matmul_backward(dfch_, g.fcprojw, g.fcprojb, dres_, a.fch_gelu, p.fcprojw, BT, 4 * C, C);
    k::gelu_backward(dfch_, dfch_, a.fch, BT * 4 * C);
    rnd(dfch_, BT * 4 * C);
    k::matmul_backward(dln_, g.fcw, g.fcb, dfch_, a.ln2, p.fcw, BT, C, 4 * C);
    k::layernorm_backward(dres_, g.ln2w, g.ln2b, dln_, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd,
                          BT, C);
    // res2 = x + attproj: d attproj = dres; d x = dres (+ LN1 path below).
    rnd(dres_, BT * C);
    k::matmul_backward(datty_, g.attprojw, g.attprojb, dres_, a.atty, p.attprojw, BT, C, C);
    k::attention_backward(dqkv_, att_scratch_, datty_, a.qkvr, a.att, B, T, C, NH);
    rnd(dqkv_, BT * 3 * C);
    k::matmul_backward(dln_, g.qkvw, g.qkvb, dqkv_, a.ln1, p.qkvw, BT, C, 3 * C);
    k::layernorm_backward(dres_, g.ln1w, g.ln1b, dln_, x, p.ln1w, a.ln1_mean, a.ln1_rstd, BT, C);
    release_params(u);
    ready(u);
  }
  k::encoder_backward(G0, G0 + table_[1].offset, dres_, tokens_, B, T, C);
  ready(0);
}

int64_t GPT::flops_per_token(int64_t T) const {
  const int64_t C = cfg_.n_embd, L = cfg_.n_layer;
  const int64_t n_matmul = L * 12 * C * C + cfg_.padded_vocab_size * C;
  return 6 * n_matmul + 12 * L * C * T;
}

}  // namespace braid::model
