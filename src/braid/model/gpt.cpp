#include "braid/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/model/block_parts.h"

namespace braid::model {

namespace k = braid::kernels;

GPT::GPT(const GPTConfig& cfg, int64_t max_B, int64_t max_T, MemoryLedger* ledger,
         UnitStorage* storage, std::unique_ptr<Operators> ops, float dropout, const PipelineStage& stage,
         Recompute recompute, const Precision& precision)
    : cfg_(cfg), max_B_(max_B), max_T_(max_T), storage_(storage), compute_dtype_(precision.compute),
      ops_(ops ? std::move(ops) : std::make_unique<Operators>()), dropout_(dropout) {
  recompute_ = recompute;
  op_ = precision.operands;
  half_ops_ = op_ != DType::f32;
  half_res_ = precision.residual() != DType::f32;
  round_res_ = !precision.fp32_residual;
  BRAID_CONFIG_CHECK(!half_ops_ || op_ == compute_dtype_, "GPT: matmul operands in ", dtype_name(op_),
                     " under ", dtype_name(compute_dtype_), " compute; use the compute dtype or f32");
  // Half-precision matmuls take the weights from the storage's compute copy.
  BRAID_CONFIG_CHECK(!half_ops_ || (storage && storage->has_compute_params()), "GPT: ", dtype_name(op_),
                     " matmul operands need a parameter storage that keeps a ", dtype_name(op_), " copy");
  const std::vector<PipelineChunk> chunks = stage.resolved(cfg.n_layer);
  owns_embed_ = owns_head_ = false;
  for (const auto& c : chunks) {
    owns_embed_ = owns_embed_ || c.first_layer == 0;
    owns_head_ = owns_head_ || c.last_layer == cfg.n_layer;
  }
  has_unit0_ = owns_embed_ || (owns_head_ && cfg.tied_head);  // a tied head keeps a copy of wte
  tpn_ = ops_->tp_size();
  fused_attention_ = plans_fused_attention(cfg, ops_->fused_attention(max_T));
  norm_ = &norm_part(cfg.norm), mlp_ = &mlp_part(cfg.mlp), pos_ = &position_part(cfg.positions);
  tpr_ = ops_->tp_rank();
  sp_ = ops_->sequence_parallel();
  BRAID_CONFIG_CHECK(dropout >= 0.0f && dropout < 1.0f, "--dropout ", dropout, " must be in [0, 1)");
  // Validates cfg, max_B, max_T and TP; every size below comes from the plan.
  const GPTMemoryPlan plan =
      memory_plan(cfg_, max_B, max_T, storage == nullptr, tpn_, sp_, dropout, stage, recompute, precision,
                  ops_->attention_scratch_floats(max_B, max_T, cfg_.n_embd / tpn_, cfg_.n_head / tpn_,
                                                 precision.operands, cfg_.kv_heads() / tpn_),
                  fused_attention_);
  num_params_ = build_param_table(cfg_, tpn_, stage, &table_, &layer_begin_);
  BRAID_CHECK(num_params_ == plan.num_params, "parameter table out of sync with memory_plan");
  index_tensors();
  build_units();
  if (pos_->rotary) {
    rope_inv_freq_ = k::rope_inverse_frequencies(
        cfg_.head_size(), cfg_.rope_theta,
        {cfg_.rope_scaling.factor, cfg_.rope_scaling.low_freq_factor, cfg_.rope_scaling.high_freq_factor,
         cfg_.rope_scaling.original_context});
    rope_pos_.assign(size_t(max_T), -1);
    rope_.cos.reserve(size_t(max_T) * rope_inv_freq_.size());
    rope_.sin.reserve(size_t(max_T) * rope_inv_freq_.size());
  }
  if (half_ops_) storage_->set_compute_only(matmul_weight_ranges());
  if (!storage_) {
    params_ = Buffer(plan.params_bytes, MemCategory::compute_params, ledger);
    grads_ = Buffer(plan.grads_bytes, MemCategory::grads, ledger);
  }
  acts_ = Buffer(plan.acts_bytes, MemCategory::activations, ledger);
  layout_activations(plan, chunks);
  scratch_ = Buffer(plan.workspace_bytes, MemCategory::workspace, ledger);
  layout_scratch(plan);
  tokens_buf_ = Buffer(plan.tokens_bytes, MemCategory::activations, ledger);
  set_slot(0);
}

void GPT::index_tensors() {
  role_index_.fill(-1);
  const std::vector<BlockRole> roles = block_roles(cfg_);
  for (size_t i = 0; i < roles.size(); ++i) role_index_[size_t(roles[i])] = int(i);
  block_tensors_ = roles.size();
  unit0_tensors_ = has_unit0_ ? (pos_->learned_table ? 2 : 1) : 0;
  for (size_t i = 0; i < table_.size(); ++i) {
    if (table_[i].name == "ln_f.weight") lnf_index_ = i;
    if (table_[i].name == "lm_head.weight") lm_head_index_ = i;
  }
}

DType GPT::matmul_dtype() const { return half_ops_ && k::half_matmul_supported(op_) ? op_ : DType::f32; }

void GPT::build_units() {
  if (has_unit0_) units_.push_back(0);
  units_.insert(units_.end(), layer_begin_.begin(), layer_begin_.end());
  // Tensors replicated over TP whose gradients stay partial under sequence
  // parallelism (LayerNorms, wpe), per unit, as (offset in the unit, elements).
  partial_grads_.resize(units_.size() - 1);
  for (const auto& p : table_) {
    if (p.name.find("ln_") == std::string::npos && p.name != "wpe.weight") continue;
    const size_t u = size_t(std::upper_bound(units_.begin(), units_.end(), p.offset) - units_.begin()) - 1;
    partial_grads_[u].push_back({p.offset - units_[u], p.numel});
  }
}

std::vector<std::pair<size_t, size_t>> GPT::matmul_weight_ranges() const {
  // wte is not among them: the embedding reads its rows in f32.
  std::vector<std::pair<size_t, size_t>> r;
  for (const auto& p : table_) {
    const bool w = p.name.size() > 7 && p.name.compare(p.name.size() - 7, 7, ".weight") == 0;
    if (w && (p.name.find(".c_attn.") != std::string::npos || p.name.find(".c_proj.") != std::string::npos ||
              p.name.find(".c_fc.") != std::string::npos || p.name == "lm_head.weight"))
      r.push_back({p.offset, p.offset + p.numel});
  }
  return r;
}

void GPT::layout_activations(const GPTMemoryPlan& plan, const std::vector<PipelineChunk>& chunks) {
  const size_t P = size_t(tpn_), C = size_t(cfg_.n_embd), Vpl = size_t(cfg_.padded_vocab_size) / P;
  const size_t BT = size_t(max_B_ * max_T_), rows = sp_ ? BT / P : BT;
  layer_act_floats_ = plan.layer_act_floats;
  shared_act_floats_ = plan.shared_act_floats;
  // Chunk c's slots follow chunk c-1's; the recomputation workspace follows all.
  size_t base = 0;
  int64_t local0 = 0, token_slot0 = 0;
  for (const auto& c : chunks) {
    ChunkInfo ci{c.first_layer, c.last_layer, c.slots, c.first_layer == 0, c.last_layer == cfg_.n_layer,
                 local0, base, 0, token_slot0};
    ci.slot_floats = layer_act_floats_ * size_t(c.last_layer - c.first_layer) + rows * C +
                     (half_res_ ? rows * C : 0) +
                     (ci.head ? operand_floats(rows * C, op_) + rows * 2 + BT * 2 + operand_floats(BT * Vpl, op_)
                              : 0);
    base += ci.slot_floats * size_t(c.slots);
    local0 += c.last_layer - c.first_layer;
    token_slot0 += c.slots;
    chunks_.push_back(ci);
  }
  w_pending_.assign(size_t(token_slot0), 0);
  BRAID_CHECK(base + shared_act_floats_ == plan.act_floats, "activation slots out of sync with memory_plan");
}

void GPT::layout_scratch(const GPTMemoryPlan& plan) {
  const size_t P = size_t(tpn_), C = size_t(cfg_.n_embd), Vpl = size_t(cfg_.padded_vocab_size) / P, Cl = C / P;
  const size_t BT = size_t(max_B_ * max_T_), rows = sp_ ? BT / P : BT;
  const size_t QKVl = size_t(cfg_.qkv_width()) / P, Hl = size_t(cfg_.hidden()) / P, Fl = size_t(cfg_.fc_width()) / P;
  float* s = scratch_.as<float>();
  dres_ = s, s += rows * C;
  dln_ = s, s += BT * C;
  datty_ = s, s += BT * Cl;
  dqkv_ = s, s += BT * QKVl;
  dfch_ = s, s += BT * Fl;
  dact_ = dfch_;  // GELU's gradient goes through in place; SwiGLU's needs its own rows
  if (Fl != Hl) dact_ = s, s += BT * Hl;
  if (owns_head_) dlogits_ = s, s += BT * Vpl;
  OperatorWorkspace ws;
  ws.C = cfg_.n_embd;
  ws.operands = op_;
  if (tpn_ > 1) ws.loss_stats = s, s += 3 * BT;
  if (sp_) ws.gather = s, s += BT * C;
  ws.matmul = plan.matmul_scratch_floats ? s : nullptr;
  s += plan.matmul_scratch_floats;
  if (dropout_ > 0) dtmp_ = s, s += rows * C;
  if (half_ops_) {
    half_grad_ = s;
    s += operand_floats(half_grad_elems(BT, rows, C, QKVl, Fl), op_);
  }
  if (half_res_) {
    res_x_ = s, s += rows * C;
    res_2_ = s, s += rows * C;
  }
  ws.attention = s;  // the rest of the scratch
  ops_->bind(ws);
  BRAID_CHECK(size_t(s - scratch_.as<float>()) <= plan.scratch_floats, "scratch layout out of sync with memory_plan");
}

void GPT::set_slot(int64_t k, int c) {
  BRAID_CHECK(c >= 0 && c < int(chunks_.size()), "set_slot: chunk ", c, " outside [0, ", chunks_.size(), ")");
  const ChunkInfo& ch = chunks_[size_t(c)];
  BRAID_CHECK(k >= 0 && k < ch.slots, "set_slot: slot ", k, " of chunk ", c, " outside [0, ", ch.slots, ")");
  chunk_ = c;
  slot_ = k;
  l0_ = ch.l0, l1_ = ch.l1, local0_ = ch.local0;
  has_embed_ = ch.embed, has_head_ = ch.head;
  slot_floats_ = ch.slot_floats;
  const size_t C = size_t(cfg_.n_embd), P = size_t(tpn_), Vpl = size_t(cfg_.padded_vocab_size) / P;
  const size_t BT = size_t(max_B_ * max_T_), rows = sp_ ? BT / P : BT;
  float* const slot = acts_.as<float>() + ch.base + slot_floats_ * size_t(k);
  float* a = slot + layer_act_floats_ * size_t(l1_ - l0_);
  encoded_ = a, a += rows * C;
  // The stage output: in f32 beside the blocks' half-precision copies, else the last block's res3.
  if (half_res_) {
    output_ = a, a += rows * C;
  } else {
    output_ = l1_ > l0_ ? layer_acts(l1_ - 1).res3 : encoded_;
  }
  if (has_head_) {
    lnf_ = a, a += operand_floats(rows * C, op_);
    lnf_mean_ = a, a += rows;
    lnf_rstd_ = a, a += rows;
    lse_ = a, a += BT;
    losses_ = a, a += BT;
    logits_ = a, a += operand_floats(BT * Vpl, op_);
  }
  BRAID_CHECK(a == slot + slot_floats_, "slot layout out of sync with memory_plan");
  tokens_ = tokens_buf_.as<int32_t>() + 2 * BT * size_t(ch.token_slot0 + k);
  targets_ = tokens_ + BT;
}

int64_t GPT::boundary_rows(int64_t B, int64_t T) const {
  return sp_ && tpn_ > 1 ? B * T / tpn_ : B * T;
}

const float* GPT::stage_output() const { return output_; }

const ParamInfo& GPT::param(const std::string& name) const {
  for (const auto& p : table_)
    if (p.name == name) return p;
  throw Error(detail::concat(__FILE__, ":", __LINE__, ": no parameter named '", name, "'"));
}

GPT::LayerParams GPT::layer_params(const float* unit, int64_t l) const {
  const size_t first = unit0_tensors_ + size_t(local0_ + l - l0_) * block_tensors_;  // table_ index of its first
  const size_t begin = units_[size_t(unit_of_block(l))];
  float* base = const_cast<float*>(unit);
  // A role the block's parts do not use (a bias) is null.
  auto at = [&](BlockRole r) {
    const int i = role_index_[size_t(r)];
    return i < 0 ? nullptr : base + (table_[first + size_t(i)].offset - begin);
  };
  using R = BlockRole;
  return {at(R::ln1w),    at(R::ln1b), at(R::qkvw), at(R::qkvb),   at(R::attprojw), at(R::attprojb),
          at(R::ln2w),    at(R::ln2b), at(R::fcw),  at(R::fcb),    at(R::fcprojw),  at(R::fcprojb),
          at(R::qkvw),    at(R::attprojw), at(R::fcw), at(R::fcprojw)};
}

void GPT::set_weight_operands(LayerParams& p, int u, int64_t l) const {
  if (!half_ops_) return;
  const size_t first = unit0_tensors_ + size_t(local0_ + l - l0_) * block_tensors_;
  const size_t begin = units_[size_t(u)], esz = dtype_size(op_);
  const char* base = static_cast<const char*>(storage_->compute_params(u));
  auto at = [&](BlockRole r) { return base + (table_[first + size_t(role_index_[size_t(r)])].offset - begin) * esz; };
  using R = BlockRole;
  p.qkvw_op = at(R::qkvw), p.attprojw_op = at(R::attprojw), p.fcw_op = at(R::fcw), p.fcprojw_op = at(R::fcprojw);
}

const void* GPT::head_weight_operand(const float* unit, int u) {
  if (cfg_.tied_head) return half_ops_ ? storage_->compute_params(0) : unit;  // wte starts unit 0
  const size_t rel = table_[lm_head_index_].offset - units_[size_t(u)];
  return half_ops_ ? static_cast<const void*>(static_cast<const char*>(storage_->compute_params(u)) +
                                              rel * dtype_size(op_))
                   : unit + rel;
}

const float* GPT::wpe_of(const float* unit0) const {
  return pos_->learned_table ? unit0 + table_[1].offset : nullptr;
}

GPT::LayerActs GPT::layer_acts(int64_t l) const {
  const size_t P = size_t(tpn_);
  const size_t BT = size_t(max_B_ * max_T_), C = size_t(cfg_.n_embd), Cl = C / P;
  const size_t QKVl = size_t(cfg_.qkv_width()) / P, Hl = size_t(cfg_.hidden()) / P, Fl = size_t(cfg_.fc_width()) / P;
  const size_t rows = sp_ ? BT / P : BT;
  // The fused kernel saves a log-sum-exp per row; the other the probabilities.
  const size_t heads_rows = size_t(max_B_) * (size_t(cfg_.n_head) / P) * size_t(max_T_);
  const size_t lse = fused_attention_ ? heads_rows : operand_floats(heads_rows * size_t(max_T_), op_);
  const ChunkInfo& ch = chunks_[size_t(chunk_)];
  float* const base = const_cast<float*>(acts_.as<float>()) + ch.base + slot_floats_ * size_t(slot_) +
                      layer_act_floats_ * size_t(l - l0_);
  // The recomputation workspace follows all chunks' slots.
  const ChunkInfo& last = chunks_.back();
  float* const shared =
      const_cast<float*>(acts_.as<float>()) + last.base + last.slot_floats * size_t(last.slots);
  float* a = base;
  float* w = shared;
  // Kept tensors come from the block's own region, recomputed ones from the workspace.
  auto kept = [&](size_t n) {
    float* p = a;
    a += n;
    return p;
  };
  auto redo = [&](size_t n) {
    float* p = w;
    w += n;
    return p;
  };
  const bool full = recompute_ == Recompute::full, sel = recompute_ == Recompute::selective;
  auto take = [&](size_t n, bool recomputed) { return recomputed ? redo(n) : kept(n); };
  LayerActs r;
  auto op = [this](size_t n) { return operand_floats(n, op_); };  // matmul inputs
  auto res = [this](size_t n) { return operand_floats(n, half_res_ ? op_ : DType::f32); };
  r.ln1 = take(op(rows * C), full);
  r.ln1_mean = take(rows, full);
  r.ln1_rstd = take(rows, full);
  r.qkv = take(op(BT * QKVl), full);
  r.qkvr = take(op(BT * QKVl), full || sel);
  r.atty = take(op(BT * Cl), full || sel);
  r.attproj = take(op(rows * C), full);
  r.res2 = take(res(rows * C), full);
  r.ln2 = take(op(rows * C), full);
  r.ln2_mean = take(rows, full);
  r.ln2_rstd = take(rows, full);
  r.fch = take(op(BT * Fl), full);
  r.fch_gelu = take(op(BT * Hl), full || sel);
  r.fcproj = take(op(rows * C), full);
  r.res3 = kept(res(rows * C));
  r.lse = take(lse, full || sel);  // floats (operand_floats already applied)
  // The constructor's sizes must match what is carved out here.
  BRAID_CHECK(a == base + layer_act_floats_ && w <= shared + shared_act_floats_,
              "layer activation layout out of sync with the memory plan");
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
    // Elements [a, e) of this (local) tensor fall inside [lo, hi).
    const size_t a = std::max(lo, info.offset) - info.offset;
    const size_t e = std::min(hi, info.offset + info.numel);
    if (e <= info.offset + a) continue;
    const size_t E = e - info.offset;
    // Element i of the tensor lands at dst[info.offset + i - lo]; i >= a keeps it >= 0.
    if (is_ln) {
      for (size_t i = a; i < E; ++i) dst[info.offset + i - lo] = 1.0f;
      continue;
    }
    const bool is_proj = info.name.find("c_proj.weight") != std::string::npos;
    const float sd = is_proj ? std_proj : std_base;
    // Keyed by the element's index in the whole tensor: every TP layout slices
    // the same values. wte rows >= vocab_size (padding) stay 0.
    const bool vocab_rows = info.name == "wte.weight" || info.name == "lm_head.weight";
    const size_t valid = vocab_rows ? size_t(cfg_.vocab_size * cfg_.n_embd) : SIZE_MAX;
    const int64_t A = int64_t(a), EE = int64_t(E);
#pragma omp parallel for schedule(static)
    for (int64_t i = A; i < EE; ++i) {
      const size_t f = full_index(info, size_t(i), tpr_, tpn_);
      dst[info.offset + size_t(i) - lo] =
          f < valid ? sd * rand_normal(seed, info.global_index, uint64_t(f)) : 0.0f;
    }
  }
}

void GPT::zero_grad() {
  if (!storage_) k::fill_zero(grads(), num_params_ * sizeof(float));
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

void GPT::logits_to_f32(float* dst, int64_t row0, int64_t n_rows) const {
  const int64_t Vpl = cfg_.padded_vocab_size / tpn_;
  BRAID_CHECK(row0 >= 0 && n_rows >= 0 && row0 + n_rows <= max_B_ * max_T_, "logits_to_f32: rows [", row0, ", ",
              row0 + n_rows, ") outside the ", max_B_ * max_T_, " allocated");
  const size_t begin = size_t(row0 * Vpl) * dtype_size(op_);
  k::cast_to_f32(dst, reinterpret_cast<const char*>(logits_) + begin, op_, size_t(n_rows * Vpl));
}

void GPT::round_operand(float* a, int64_t n) const { kernels::round_to_dtype(a, compute_dtype_, size_t(n)); }

template <typename Produce>
void GPT::produce_operand(float* slot, float* tmp, int64_t n, Produce&& produce) {
  if (!half_ops_) {
    produce(slot);
    round_operand(slot, n);
    return;
  }
  produce(tmp);
  k::cast_from_f32(slot, op_, tmp, size_t(n));
}

const void* GPT::grad_operand(float* g, int64_t n, void* dst) {
  if (!half_ops_) {
    round_operand(g, n);
    return g;
  }
  if (!dst) dst = half_grad_;
  k::cast_from_f32(dst, op_, g, size_t(n));
  return dst;
}

void GPT::drop(float* out, const float* in, uint64_t site) {
  // One stream per (step key, site); rows are numbered globally.
  ops_->dropout(out, in, cfg_.n_embd, DropoutKey{dropout_, drop_seed_, drop_stream_ * 4096 + site, drop_row_base_});
}

AttentionShape GPT::attention_shape() const {
  const int64_t NHl = cfg_.n_head / tpn_;
  return {B_, T_, NHl, cfg_.head_size(), op_, compute_dtype_, fused_attention_, cfg_.kv_heads() / tpn_};
}

void GPT::attend(float* out, const LayerActs& a) {
  // q, k, v side by side in each row of c_attn's output (B, T, Cl + 2 KVl).
  const AttentionShape s = attention_shape();
  const int64_t Cl = s.heads * s.head_dim, KVl = s.kv() * s.head_dim;
  const char* qkv = reinterpret_cast<const char*>(a.qkv);
  const size_t esz = dtype_size(op_);
  ops_->attention_forward(out, {a.qkvr, a.lse},
                          {qkv, qkv + size_t(Cl) * esz, qkv + size_t(Cl + KVl) * esz, s.qkv_width()}, s);
}

void GPT::update_rope_table() {
  if (!pos_->rotary) return;
  // The table follows the tokens' global positions; rebuilt only when they change.
  std::vector<int64_t>& pos = rope_pos_;
  bool same = rope_.T == T_;
  int64_t t = 0;
  for (const TokenSpan& sp : ops_->sequence().spans)
    for (int64_t i = 0; i < sp.count; ++i, ++t) {
      same = same && pos[size_t(t)] == sp.first + i;
      pos[size_t(t)] = sp.first + i;
    }
  if (!same) k::rope_table_fill(rope_, pos.data(), T_, rope_inv_freq_);
}

void GPT::rotate_qk(float* qkv, bool backward) const {
  if (!pos_->rotary) return;
  const AttentionShape s = attention_shape();
  const int64_t ld = s.qkv_width();
  const k::RopeHeads q{ld, 0, s.heads, s.head_dim}, kh{ld, s.heads * s.head_dim, s.kv(), s.head_dim};
  if (backward) {
    k::rope_backward(qkv, B_, T_, q, rope_);
    k::rope_backward(qkv, B_, T_, kh, rope_);
  } else {
    k::rope_forward(qkv, B_, T_, q, rope_);
    k::rope_forward(qkv, B_, T_, kh, rope_);
  }
}

void GPT::sync_replicated_grads(const float* unit_grads, int u) {
  // Under sequence parallelism each TP rank saw only its token rows, so the
  // gradients of replicated LayerNorm weights (and wpe) are partial sums.
  // An accumulator that holds earlier micro-batches is summed once, in the last.
  const bool accumulated = !storage_ || storage_->accumulates_in_place();
  if (!ops_->replicated_grads_partial() || (accumulated && !tp_grad_sync_)) return;
  float* g = const_cast<float*>(unit_grads);
  for (const auto& [rel, n] : partial_grads_[size_t(u)]) ops_->sum_replicated_grads(g + rel, n);
}

const float* GPT::residual_f32(const float* saved, float* work) const {
  if (!half_res_) return saved;
  k::cast_to_f32(work, saved, op_, size_t(ops_->local_rows() * cfg_.n_embd));
  return work;
}

const float* GPT::block_input(int64_t l) {
  return l == l0_ ? encoded_ : residual_f32(layer_acts(l - 1).res3, res_x_);
}

const float* GPT::block_forward(int64_t l, const LayerParams& p, const float* x) {
  const int64_t C = cfg_.n_embd, BT = B_ * T_, Cl = C / tpn_, rows = ops_->local_rows();
  const int64_t QKVl = cfg_.qkv_width() / tpn_, Hl = cfg_.hidden() / tpn_, Fl = cfg_.fc_width() / tpn_;
  const bool dropping = dropout_ > 0 && training_;
  LayerActs a = layer_acts(l);
  // Matmul inputs are made in f32 and stored as operands; dln_ and dfch_ are
  // free in forward (and at the start of a block's backward, for recomputation).
  produce_operand(a.ln1, dln_, rows * C, [&](float* o) {
    norm_->forward(*ops_, o, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, C, cfg_.norm_eps);
  });
  // Rotary positions turn q and k in f32, before they are rounded and attended.
  produce_operand(a.qkv, dqkv_, BT * QKVl, [&](float* o) {
    ops_->column_forward(o, a.ln1, p.qkvw_op, p.qkvb, C, QKVl);
    rotate_qk(o, false);
  });
  produce_operand(a.atty, dln_, BT * Cl, [&](float* o) { attend(o, a); });
  // Branch outputs are stored in the operand dtype; dropout acts before the
  // rounding. Each residual add runs in f32 and is rounded to the compute
  // dtype (compute_dtype()), kept in f32 working buffers while forward needs it.
  produce_operand(a.attproj, dln_, rows * C, [&](float* o) {
    ops_->row_forward(o, a.atty, p.attprojw_op, p.attprojb, Cl, C);
    if (dropping) drop(o, o, 2 * uint64_t(l));
  });
  float* const res2 = half_res_ ? res_2_ : a.res2;
  k::residual_forward(res2, x, a.attproj, op_, rows * C);
  keep_residual(a.res2, res2, rows * C);
  produce_operand(a.ln2, dln_, rows * C, [&](float* o) {
    norm_->forward(*ops_, o, a.ln2_mean, a.ln2_rstd, res2, p.ln2w, p.ln2b, C, cfg_.norm_eps);
  });
  produce_operand(a.fch, dfch_, BT * Fl, [&](float* o) { ops_->column_forward(o, a.ln2, p.fcw_op, p.fcb, C, Fl); });
  produce_operand(a.fch_gelu, dfch_, BT * Hl, [&](float* o) { mlp_->forward(o, a.fch, op_, BT, Hl); });
  produce_operand(a.fcproj, dln_, rows * C, [&](float* o) {
    ops_->row_forward(o, a.fch_gelu, p.fcprojw_op, p.fcprojb, Hl, C);
    if (dropping) drop(o, o, 2 * uint64_t(l) + 1);
  });
  // x is spent: kept in a half dtype, the output goes where x was (res_x_), the
  // stage's last block's to the stage output.
  float* const res3 = !half_res_ ? a.res3 : l == l1_ - 1 ? output_ : res_x_;
  k::residual_forward(res3, res2, a.fcproj, op_, rows * C);
  keep_residual(a.res3, res3, rows * C);
  return res3;
}

void GPT::keep_residual(float* saved, float* value, int64_t n) {
  if (round_res_) round_operand(value, n);
  if (half_res_) k::cast_from_f32(saved, op_, value, size_t(n));
}

void GPT::set_inputs(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  BRAID_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_, "forward: B=", B, " T=", T,
              " outside the allocated max_B=", max_B_, " max_T=", max_T_);
  BRAID_CHECK(tokens || !has_embed_, "forward: the first stage needs tokens");
  const int64_t V = cfg_.vocab_size;
  for (int64_t i = 0; i < B * T; ++i) {
    if (tokens) {
      BRAID_CHECK(tokens[i] >= 0 && tokens[i] < V, "forward: token ", tokens[i], " at ", i, " outside [0, ", V, ")");
      tokens_[i] = tokens[i];
    }
    if (targets) targets_[i] = targets[i];
  }
  ops_->set_batch(B, T);
  B_ = B, T_ = T;
  have_targets_ = targets != nullptr;
  update_rope_table();
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  set_inputs(tokens, targets, B, T);
  // Unit 0 holds wte at offset 0 and wpe at table_[1].offset. A later
  // pipeline stage finds its input in encoded_ (stage_input()).
  if (has_embed_) {
    ScopedSpan span(sink_, "forward embedding", -1, "forward");
    const float* E = acquire_params(0);
    ops_->embedding_forward(encoded_, tokens_, E, wpe_of(E), cfg_.padded_vocab_size);
    release_params(0);
    if (dropout_ > 0 && training_)
      drop(encoded_, encoded_, 2 * uint64_t(cfg_.n_layer));
    if (round_res_) round_operand(encoded_, ops_->local_rows() * cfg_.n_embd);
  }
  const float* x = encoded_;
  for (int64_t l = l0_; l < l1_; ++l) {
    ScopedSpan span(sink_, "forward block ", l, "forward");
    const int u = unit_of_block(l);
    LayerParams p = layer_params(acquire_params(u), l);
    set_weight_operands(p, u, l);
    x = block_forward(l, p, x);
    release_params(unit_of_block(l));
  }
  // A stage without the head's output is x = stage_output().
  return has_head_ ? head_forward(x, targets != nullptr) : 0.0f;
}

float GPT::head_forward(const float* x, bool with_targets) {
  const int64_t C = cfg_.n_embd, BT = B_ * T_, rows = ops_->local_rows();
  ScopedSpan span(sink_, "forward head", -1, "forward");
  const int uf = int(units_.size()) - 2;  // final norm unit (and the untied head)
  const float* F = acquire_params(uf);
  const FinalNorm fn = final_norm(F, uf);
  produce_operand(lnf_, dln_, rows * C, [&](float* o) {
    norm_->forward(*ops_, o, lnf_mean_, lnf_rstd_, x, fn.weight, fn.bias, C, cfg_.norm_eps);
  });
  // logits (BT, Vp/tp) = lnf (BT, C) @ W^T, W = wte (tied) or lm_head
  // (vocab-parallel: this rank's vocabulary rows).
  const int uh = cfg_.tied_head ? 0 : uf;
  if (uh != uf) release_params(uf);
  const float* H = uh == uf ? F : acquire_params(uh);
  produce_operand(logits_, dlogits_, BT * (cfg_.padded_vocab_size / tpn_), [&](float* o) {
    ops_->column_forward(o, lnf_, head_weight_operand(H, uh), nullptr, C, cfg_.padded_vocab_size / tpn_);
  });
  release_params(uh);
  ops_->cross_entropy_forward(losses_, lse_, logits_, with_targets ? targets_ : nullptr, cfg_.vocab_size,
                              cfg_.padded_vocab_size);
  if (!with_targets) return 0.0f;
  double sum = 0.0;  // fixed-order sum: the loss is bitwise reproducible
  for (int64_t i = 0; i < BT; ++i) sum += double(losses_[i]);
  return float(sum / double(BT));
}

void GPT::backward(float loss_scale, const std::function<void(size_t, size_t)>& on_ready) {
  backward_impl(loss_scale, on_ready, BackwardPart::all);
}

void GPT::backward_input(float loss_scale) { backward_impl(loss_scale, {}, BackwardPart::input); }

void GPT::backward_weight() {
  // W of the current slot: dW += dout^T x for every matmul, from the output
  // gradients B stashed over the activations it no longer needed.
  BRAID_CHECK(recompute_ == Recompute::none, "backward_weight needs the activations kept (--recompute none)");
  uint8_t& pending = w_pending_[size_t(chunks_[size_t(chunk_)].token_slot0 + slot_)];
  BRAID_CHECK(pending, "backward_weight: slot ", slot_, " of chunk ", chunk_, " has no finished backward_input");
  pending = 0;
  const int64_t C = cfg_.n_embd, Cl = C / tpn_;
  const int64_t QKVl = cfg_.qkv_width() / tpn_, Hl = cfg_.hidden() / tpn_, Fl = cfg_.fc_width() / tpn_;
  float* G0 = nullptr;  // unit 0 stays acquired from the head to the embedding
  if (has_head_) {
    ScopedSpan span(sink_, "backward weight head", -1, "backward");
    // logits_ holds d(logits) (BT x Vp/tp); the head's weight is wte or lm_head.
    if (cfg_.tied_head) {
      G0 = acquire_grads(0);
      ops_->column_weight_grad(G0, logits_, lnf_, C, cfg_.padded_vocab_size / tpn_);
    } else {
      const int uf = int(units_.size()) - 2;
      float* GF = acquire_grads(uf);
      ops_->column_weight_grad(GF + (table_[lm_head_index_].offset - units_[size_t(uf)]), logits_, lnf_, C,
                               cfg_.padded_vocab_size / tpn_);
      if (storage_) storage_->grads_ready(uf);
    }
  }
  for (int64_t l = l1_ - 1; l >= l0_; --l) {
    ScopedSpan span(sink_, "backward weight block ", l, "backward");
    const int u = unit_of_block(l);
    LayerParams g = layer_params(acquire_grads(u), l);
    const LayerActs a = layer_acts(l);
    ops_->row_weight_grad(g.fcprojw, a.fcproj, a.fch_gelu, Hl, C);
    ops_->column_weight_grad(g.fcw, a.fch, a.ln2, C, Fl);
    ops_->row_weight_grad(g.attprojw, a.attproj, a.atty, Cl, C);
    ops_->column_weight_grad(g.qkvw, a.qkvr, a.ln1, C, QKVl);
    if (storage_) storage_->grads_ready(u);
  }
  if (has_embed_) {
    ScopedSpan span(sink_, "backward weight embedding", -1, "backward");
    if (!G0) G0 = acquire_grads(0);
    embedding_backward(encoded_, G0);
  }
  if (G0 && storage_) storage_->grads_ready(0);
}

void GPT::unit_ready(int u, const std::function<void(size_t, size_t)>& on_ready) {
  if (storage_) {
    storage_->grads_ready(u);
  } else if (on_ready) {
    on_ready(units_[size_t(u)], units_[size_t(u) + 1]);
  }
}

float* GPT::branch_grad(uint64_t site) {
  if (!(dropout_ > 0 && training_)) return dres_;
  drop(dtmp_, dres_, site);
  return dtmp_;
}

void GPT::backward_impl(float loss_scale, const std::function<void(size_t, size_t)>& on_ready,
                        BackwardPart part) {
  BRAID_CHECK(have_targets_ || !has_head_, "backward: the last forward had no targets");
  update_rope_table();
  // Split backward: B leaves weight gradients to W and stashes their output gradients.
  const bool split = part == BackwardPart::input;
  if (split) {
    BRAID_CHECK(recompute_ == Recompute::none, "backward_input needs the activations kept (--recompute none)");
    w_pending_[size_t(chunks_[size_t(chunk_)].token_slot0 + slot_)] = 1;
  }
  float* G0 = nullptr;  // dwte at G0[0], dwpe at G0[table_[1].offset]
  // A stage other than the last finds d(output) in dres_ (boundary_grad()).
  if (has_head_) {
    ScopedSpan span(sink_, split ? "backward input head" : "backward head", -1, "backward");
    G0 = head_backward(loss_scale, split);
    unit_ready(int(units_.size()) - 2, on_ready);
  }
  for (int64_t l = l1_ - 1; l >= l0_; --l) {
    ScopedSpan span(sink_, split ? "backward input block " : "backward block ", l, "backward");
    block_backward(l, split);
    unit_ready(unit_of_block(l), on_ready);
  }
  if (has_embed_) {
    ScopedSpan span(sink_, split ? "backward input embedding" : "backward embedding", -1, "backward");
    const float* denc = branch_grad(2 * uint64_t(cfg_.n_layer));
    // The embedding's gradient is a weight gradient: W adds it after the head's,
    // the order backward() uses, from d(encoded) stashed over the stage input.
    if (split) {
      std::memcpy(encoded_, denc, size_t(ops_->local_rows() * cfg_.n_embd) * sizeof(float));
    } else {
      // Unit 0 stays acquired from the head's backward (acquire it once).
      if (!G0) G0 = acquire_grads(0);
      embedding_backward(denc, G0);
    }
  }
  if (G0) unit_ready(0, on_ready);
}

float* GPT::head_backward(float loss_scale, bool split) {
  const int64_t C = cfg_.n_embd, BT = B_ * T_, Vpl = cfg_.padded_vocab_size / tpn_, rows = ops_->local_rows();
  const int uf = int(units_.size()) - 2;
  ops_->cross_entropy_backward(dlogits_, logits_, lse_, targets_, loss_scale / float(BT), cfg_.vocab_size,
                              cfg_.padded_vocab_size);
  // Output gradients enter each matmul backward in the compute dtype (no-op in f32).
  // With half-precision operands d(logits) goes over the logits, which are spent.
  const void* dlogits = grad_operand(dlogits_, BT * Vpl, logits_);
  // The head's weight: wte in unit 0 (tied; that unit stays acquired until the
  // embedding's backward) or lm_head beside the final norm.
  float* G0 = nullptr;
  const float* dlnf = nullptr;
  if (cfg_.tied_head) {
    G0 = acquire_grads(0);
    const float* wte = acquire_params(0);
    dlnf = ops_->column_backward(dln_, split ? nullptr : G0, nullptr, dlogits, lnf_, head_weight_operand(wte, 0), C,
                                 Vpl);
    release_params(0);
  }
  const float* F = acquire_params(uf);
  float* GF = acquire_grads(uf);
  if (!cfg_.tied_head) {
    float* dW = split ? nullptr : GF + (table_[lm_head_index_].offset - units_[size_t(uf)]);
    dlnf = ops_->column_backward(dln_, dW, nullptr, dlogits, lnf_, head_weight_operand(F, uf), C, Vpl);
  }
  if (split && dlogits != logits_) std::memcpy(logits_, dlogits, size_t(BT * Vpl) * dtype_size(op_));
  // dres_ is the residual-stream gradient; the norms accumulate into it.
  std::memset(dres_, 0, size_t(rows * C) * sizeof(float));
  const FinalNorm fn = final_norm(F, uf), gn = final_norm(GF, uf);
  norm_->backward(*ops_, dres_, gn.weight, gn.bias, dlnf, stage_output(), fn.weight, lnf_mean_, lnf_rstd_, C);
  release_params(uf);
  sync_replicated_grads(GF, uf);
  return G0;
}

void GPT::recompute_block(int64_t l, const LayerParams& p, const float* x) {
  // Activation checkpointing: rebuild what forward did not keep, with the
  // same kernels, inputs and dropout keys, so the values are bitwise the
  // ones a run without recomputation stores.
  ScopedSpan span(recompute_ == Recompute::none ? nullptr : sink_, "recompute block ", l, "forward");
  if (recompute_ == Recompute::full) {
    block_forward(l, p, x);
  } else if (recompute_ == Recompute::selective) {
    const int64_t BT = B_ * T_, Cl = cfg_.n_embd / tpn_, Hl = cfg_.hidden() / tpn_;
    LayerActs r = layer_acts(l);
    produce_operand(r.atty, dln_, BT * Cl, [&](float* o) { attend(o, r); });
    produce_operand(r.fch_gelu, dfch_, BT * Hl, [&](float* o) { mlp_->forward(o, r.fch, op_, BT, Hl); });
  }
}

void GPT::block_backward(int64_t l, bool split) {
  const int64_t BT = B_ * T_, C = cfg_.n_embd, Cl = C / tpn_, rows = ops_->local_rows();
  const int64_t QKVl = cfg_.qkv_width() / tpn_, KVl = cfg_.kv_heads() * cfg_.head_size() / tpn_;
  const int64_t Hl = cfg_.hidden() / tpn_, Fl = cfg_.fc_width() / tpn_;
  const int u = unit_of_block(l);
  LayerParams p = layer_params(acquire_params(u), l);
  set_weight_operands(p, u, l);
  float* Gu = acquire_grads(u);
  LayerParams g = layer_params(Gu, l);
  // Weight-gradient outputs: none under the split (W adds them).
  auto wgrad = [split](float* w) { return split ? nullptr : w; };
  // Under the split, each matmul's output gradient is stashed over an activation B no longer needs.
  const size_t esz = dtype_size(op_);
  auto stash = [split, esz](float* dst, const void* src, int64_t n) {
    if (split) std::memcpy(dst, src, size_t(n) * esz);
  };
  recompute_block(l, p, recompute_ == Recompute::full ? block_input(l) : nullptr);
  LayerActs a = layer_acts(l);
  // res3 = res2 + drop(fcproj): d fcproj = mask * dres; d res2 = dres (+ LN2 path below).
  // With rounding on, dres is rounded in place: the residual stream's
  // gradient is then held in the compute dtype, as in a half-precision run.
  round_operand(dres_, rows * C);
  const void* dlocal = grad_operand(branch_grad(2 * uint64_t(l) + 1), rows * C);
  stash(a.fcproj, dlocal, rows * C);
  ops_->row_backward(dact_, wgrad(g.fcprojw), g.fcprojb, dlocal, a.fch_gelu, p.fcprojw_op, Hl, C);
  mlp_->backward(dfch_, dact_, a.fch, op_, BT, Hl);
  const void* dfch = grad_operand(dfch_, BT * Fl);
  stash(a.fch, dfch, BT * Fl);
  const float* dln2 = ops_->column_backward(dln_, wgrad(g.fcw), g.fcb, dfch, a.ln2, p.fcw_op, C, Fl);
  norm_->backward(*ops_, dres_, g.ln2w, g.ln2b, dln2, residual_f32(a.res2, res_2_), p.ln2w, a.ln2_mean, a.ln2_rstd,
                  C);
  // res2 = x + drop(attproj): d attproj = mask * dres; d x = dres (+ LN1 path below).
  round_operand(dres_, rows * C);
  dlocal = grad_operand(branch_grad(2 * uint64_t(l)), rows * C);
  stash(a.attproj, dlocal, rows * C);
  ops_->row_backward(datty_, wgrad(g.attprojw), g.attprojb, dlocal, a.atty, p.attprojw_op, Cl, C);
  ops_->attention_backward({dqkv_, dqkv_ + Cl, dqkv_ + Cl + KVl, QKVl}, datty_, {a.qkvr, a.lse, a.atty},
                           attention_shape());
  rotate_qk(dqkv_, true);
  const void* dqkv = grad_operand(dqkv_, BT * QKVl);
  stash(a.qkvr, dqkv, BT * QKVl);
  const float* dln1 = ops_->column_backward(dln_, wgrad(g.qkvw), g.qkvb, dqkv, a.ln1, p.qkvw_op, C, QKVl);
  norm_->backward(*ops_, dres_, g.ln1w, g.ln1b, dln1, block_input(l), p.ln1w, a.ln1_mean, a.ln1_rstd, C);
  release_params(u);
  sync_replicated_grads(Gu, u);
}

void GPT::embedding_backward(const float* denc, float* G0) {
  // dwte at G0[0], dwpe at G0[table_[1].offset] (learned positions)
  ops_->embedding_backward(G0, const_cast<float*>(wpe_of(G0)), denc, tokens_, cfg_.padded_vocab_size);
  sync_replicated_grads(G0, 0);
}

GPT::FinalNorm GPT::final_norm(const float* unit, int uf) const {
  const size_t rel = table_[lnf_index_].offset - units_[size_t(uf)];
  const float* w = unit + rel;
  // LayerNorm's bias follows its weight in the table.
  const float* b = norm_->has_bias ? unit + (table_[lnf_index_ + 1].offset - units_[size_t(uf)]) : nullptr;
  return {const_cast<float*>(w), const_cast<float*>(b)};
}

int64_t GPT::flops_per_token(int64_t T) const { return model_flops_per_token(cfg_, T); }

int64_t model_flops_per_token(const GPTConfig& cfg, int64_t T) {
  const int64_t C = cfg.n_embd, L = cfg.n_layer;
  // c_attn (C x qkv_width), attn.c_proj (C x C), c_fc (C x fc_width), mlp.c_proj (hidden x C).
  const int64_t per_block = C * cfg.qkv_width() + C * C + C * cfg.fc_width() + cfg.hidden() * C;
  const int64_t n_matmul = L * per_block + cfg.padded_vocab_size * C;
  return 6 * n_matmul + 12 * L * C * T;
}

}  // namespace braid::model
