#include "braid/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "braid/comm/communicator.h"
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

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  throw ConfigError("--recompute '" + s + "' is not known; use none, selective or full");
}

int TensorParallel::size() const { return comm ? comm->size() : 1; }
int TensorParallel::rank() const { return comm ? comm->rank() : 0; }

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

void GPT::validate_tp(const GPTConfig& cfg, int tp) {
  BRAID_CONFIG_CHECK(tp >= 1, "--tp ", tp, " must be >= 1");
  std::string divisors;
  for (int64_t d = 1; d <= cfg.n_head; ++d)
    if (cfg.n_head % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
  BRAID_CONFIG_CHECK(cfg.n_head % tp == 0, "--tp ", tp, " does not divide n_head=", cfg.n_head,
                     " of model '", cfg.name, "' (attention heads are split over TP ranks); use ",
                     divisors);
  BRAID_CONFIG_CHECK(cfg.padded_vocab_size % tp == 0, "--tp ", tp,
                     " does not divide the padded vocabulary ", cfg.padded_vocab_size,
                     "; pad the vocabulary to a multiple of 64 x tp = ", 64 * tp);
}

size_t GPT::full_index(const ParamInfo& p, size_t local, int tp_rank, int tp) {
  if (p.tp_dim < 0 || tp == 1) return local;
  const size_t cols_l = p.shape.size() > 1 ? size_t(p.shape[1]) : 1;
  const size_t row = local / cols_l, col = local % cols_l;
  if (p.tp_dim == 1) {
    const size_t cols = size_t(p.full_shape[1]);
    return row * cols + size_t(tp_rank) * cols_l + col;
  }
  // Rows split inside each of tp_blocks equal row blocks.
  const size_t rows_full = size_t(p.full_shape[0]);
  const size_t block_rows = rows_full / size_t(p.tp_blocks), block_rows_l = block_rows / size_t(tp);
  const size_t b = row / block_rows_l, within = row % block_rows_l;
  const size_t full_row = b * block_rows + size_t(tp_rank) * block_rows_l + within;
  return full_row * cols_l + col;
}

size_t GPT::build_param_table(const GPTConfig& cfg, int tp, const PipelineStage& stage,
                              std::vector<ParamInfo>* table, std::vector<size_t>* layer_begin) {
  const int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab_size, P = tp;
  const std::vector<PipelineChunk> chunks = stage.resolved(L);
  auto held = [&](int64_t l) {
    for (const auto& c : chunks)
      if (l >= c.first_layer && l < c.last_layer) return true;
    return false;
  };
  const bool head = held(L - 1);
  const bool unit0 = held(0) || head;  // the embeddings, or the tied head's copy
  size_t off = 0;
  size_t global = 0;  // index in the whole model's table
  bool keep = true;   // whether the tensors being added belong to this stage
  // tp_dim 0: rows split (column-parallel output features, vocab rows);
  // tp_dim 1: columns split (row-parallel input features).
  auto add = [&](const std::string& name, std::vector<int64_t> full, bool wd, int layer, int dim,
                 int blocks = 1) {
    const size_t gi = global++;
    if (!keep) return;
    std::vector<int64_t> shape = full;
    if (dim >= 0) shape[size_t(dim)] /= P;
    size_t n = 1;
    for (int64_t x : shape) n *= size_t(x);
    ParamInfo pi;
    pi.name = name;
    pi.shape = shape;
    pi.offset = off;
    pi.numel = n;
    pi.weight_decay = wd;
    pi.layer = layer;
    pi.full_shape = std::move(full);
    pi.global_index = gi;
    pi.tp_dim = P > 1 ? dim : -1;
    pi.tp_blocks = blocks;
    table->push_back(std::move(pi));
    off = align_up(off + n);
  };
  keep = unit0;
  add("wte.weight", {Vp, C}, true, -1, 0);
  add("wpe.weight", {cfg.block_size, C}, true, -1, -1);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const int li = int(l);
    keep = held(l);
    if (keep) layer_begin->push_back(off);
    add(p + "ln_1.weight", {C}, false, li, -1);
    add(p + "ln_1.bias", {C}, false, li, -1);
    add(p + "attn.c_attn.weight", {3 * C, C}, true, li, 0, 3);
    add(p + "attn.c_attn.bias", {3 * C}, false, li, 0, 3);
    add(p + "attn.c_proj.weight", {C, C}, true, li, 1);
    add(p + "attn.c_proj.bias", {C}, false, li, -1);
    add(p + "ln_2.weight", {C}, false, li, -1);
    add(p + "ln_2.bias", {C}, false, li, -1);
    add(p + "mlp.c_fc.weight", {4 * C, C}, true, li, 0);
    add(p + "mlp.c_fc.bias", {4 * C}, false, li, 0);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, true, li, 1);
    add(p + "mlp.c_proj.bias", {C}, false, li, -1);
  }
  keep = head;
  if (keep) layer_begin->push_back(off);
  add("ln_f.weight", {C}, false, int(L), -1);
  add("ln_f.bias", {C}, false, int(L), -1);
  layer_begin->push_back(off);
  return off;
}

std::vector<size_t> GPT::unit_bounds(const GPTConfig& cfg, int tp, const PipelineStage& stage) {
  cfg.validate();
  validate_tp(cfg, tp);
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  build_param_table(cfg, tp, stage, &table, &layer_begin);
  // Unit 0 (the embeddings, or the head's tied copy) when the stage holds it.
  std::vector<size_t> b;
  if (!table.empty() && table[0].name == "wte.weight") b.push_back(0);
  b.insert(b.end(), layer_begin.begin(), layer_begin.end());
  return b;
}

std::vector<ParamInfo> GPT::param_table(const GPTConfig& cfg, int tp, const PipelineStage& stage) {
  cfg.validate();
  validate_tp(cfg, tp);
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  build_param_table(cfg, tp, stage, &table, &layer_begin);
  return table;
}

GPTMemoryPlan GPT::memory_plan(const GPTConfig& cfg, int64_t max_B, int64_t max_T,
                               bool owns_state, int tp, bool sp, float dropout,
                               const PipelineStage& stage, Recompute recompute) {
  cfg.validate();
  validate_tp(cfg, tp);
  BRAID_CONFIG_CHECK(max_B > 0 && max_T > 0, "GPT: max_B=", max_B, " and max_T=", max_T,
                     " must be positive");
  BRAID_CONFIG_CHECK(max_T <= cfg.block_size, "GPT: sequence length ", max_T,
                     " exceeds block_size=", cfg.block_size, " of model '", cfg.name,
                     "'; use T <= ", cfg.block_size);
  BRAID_CONFIG_CHECK(!sp || (max_B * max_T) % tp == 0, "--sequence-parallel shards the ",
                     max_B * max_T, " token rows of a micro-batch (micro-batch ", max_B, " x seq-len ",
                     max_T, ") over --tp ", tp, "; choose sizes whose product divides by ", tp);
  const std::vector<PipelineChunk> chunks = stage.resolved(cfg.n_layer);
  BRAID_CONFIG_CHECK(!chunks.empty(), "pipeline stage: no layers");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t l0 = chunks[c].first_layer, l1 = chunks[c].last_layer;
    BRAID_CONFIG_CHECK(l0 >= 0 && l0 < l1 && l1 <= cfg.n_layer && chunks[c].slots >= 1 &&
                           (c == 0 || l0 >= chunks[c - 1].last_layer),
                       "pipeline stage: chunk ", c, " with layers [", l0, ", ", l1, ") and ", chunks[c].slots,
                       " activation slots is not a non-empty range of the ", cfg.n_layer,
                       " layers of model '", cfg.name, "' after the previous chunk");
  }
  GPTMemoryPlan m;
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  m.num_params = build_param_table(cfg, tp, stage, &table, &layer_begin);
  m.params_bytes = owns_state ? m.num_params * sizeof(float) : 0;
  m.grads_bytes = owns_state ? m.num_params * sizeof(float) : 0;

  const size_t P = size_t(tp);
  const size_t C = size_t(cfg.n_embd), Vpl = size_t(cfg.padded_vocab_size) / P;
  const size_t Cl = C / P, NHl = size_t(cfg.n_head) / P;
  const size_t BT = size_t(max_B * max_T), rows = sp ? BT / P : BT;
  // Per block (see layer_acts): ln1, attproj, res2, ln2, fcproj, res3 (rows x C
  // each: token rows of this rank); qkv, qkvr (BT x 3C/tp each), atty (BT x C/tp),
  // fch, fch_gelu (BT x 4C/tp each); 4 LayerNorm statistics of rows; the
  // attention matrix B x NH/tp x T x T.
  const size_t all_floats = rows * C * 6 + BT * Cl * (3 + 3 + 1 + 4 + 4) + 4 * rows +
                           size_t(max_B) * NHl * size_t(max_T * max_T);
  // Recomputed tensors live once, in a workspace shared by all blocks and slots.
  const size_t recomputed_selective = BT * Cl * (3 + 1 + 4) + size_t(max_B) * NHl * size_t(max_T * max_T);
  switch (recompute) {
    case Recompute::none: m.layer_act_floats = all_floats; break;
    case Recompute::selective:
      m.layer_act_floats = all_floats - recomputed_selective;
      m.shared_act_floats = recomputed_selective;
      break;
    case Recompute::full:
      m.layer_act_floats = rows * C;  // the block's output
      m.shared_act_floats = all_floats - rows * C;
      break;
  }
  // Per slot: the local blocks, the stage input `encoded` (rows x C); on the
  // last stage the head: lnf (rows x C), lnf_mean, lnf_rstd (rows each), lse,
  // losses (BT each), logits (BT x Vp/tp).
  size_t S = 0;  // slots over all chunks
  bool head = false;
  for (const auto& c : chunks) {
    const bool has_head = c.last_layer == cfg.n_layer;
    const size_t slot = m.layer_act_floats * size_t(c.last_layer - c.first_layer) + rows * C +
                        (has_head ? rows * C + rows * 2 + BT * 2 + BT * Vpl : 0);
    m.act_floats += slot * size_t(c.slots);
    S += size_t(c.slots);
    head = head || has_head;
  }
  m.act_floats += m.shared_act_floats;
  m.acts_bytes = m.act_floats * sizeof(float);
  const size_t att_scratch =
      std::max(k::attention_forward_scratch_floats(max_B, max_T, int64_t(Cl)),
               k::attention_backward_scratch_floats(max_B, max_T, int64_t(Cl), int64_t(NHl)));
  // dres (rows x C), dln (BT x C), datty (BT x C/tp), dqkv (3 BT x C/tp), dfch
  // (4 BT x C/tp), dlogits (BT x Vp/tp), attention scratch; with TP > 1 the
  // vocab-parallel loss statistics (3 BT) and, with sequence parallelism, a
  // gather buffer (BT x C); with dropout a masked-gradient buffer (rows x C).
  m.scratch_floats = rows * C + BT * C + BT * Cl * 8 + (head ? BT * Vpl : 0) + att_scratch;
  if (tp > 1) m.scratch_floats += 3 * BT;
  if (sp) m.scratch_floats += BT * C;
  if (dropout > 0) m.scratch_floats += rows * C;
  m.workspace_bytes = m.scratch_floats * sizeof(float);
  m.tokens_bytes = 2 * BT * sizeof(int32_t) * S;
  return m;
}

GPT::GPT(const GPTConfig& cfg, int64_t max_B, int64_t max_T, MemoryLedger* ledger,
         UnitStorage* storage, const TensorParallel& tp, float dropout, const PipelineStage& stage,
         Recompute recompute)
    : cfg_(cfg), max_B_(max_B), max_T_(max_T), storage_(storage), tp_(tp), dropout_(dropout) {
  recompute_ = recompute;
  const std::vector<PipelineChunk> chunks = stage.resolved(cfg.n_layer);
  owns_embed_ = owns_head_ = false;
  for (const auto& c : chunks) {
    owns_embed_ = owns_embed_ || c.first_layer == 0;
    owns_head_ = owns_head_ || c.last_layer == cfg.n_layer;
  }
  has_unit0_ = owns_embed_ || owns_head_;
  tpn_ = tp_.size();
  tpr_ = tp_.rank();
  BRAID_CONFIG_CHECK(dropout >= 0.0f && dropout < 1.0f, "--dropout ", dropout, " must be in [0, 1)");
  // Validates cfg, max_B, max_T and TP; every size below comes from the plan.
  const GPTMemoryPlan plan =
      memory_plan(cfg_, max_B, max_T, storage == nullptr, tpn_, tp_.sequence_parallel, dropout, stage,
                  recompute);
  num_params_ = build_param_table(cfg_, tpn_, stage, &table_, &layer_begin_);
  BRAID_CHECK(num_params_ == plan.num_params, "parameter table out of sync with memory_plan");
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
  if (!storage_) {
    params_ = Buffer(plan.params_bytes, MemCategory::compute_params, ledger);
    grads_ = Buffer(plan.grads_bytes, MemCategory::grads, ledger);
  }

  const size_t P = size_t(tpn_);
  const size_t C = size_t(cfg_.n_embd), Vpl = size_t(cfg_.padded_vocab_size) / P;
  const size_t Cl = C / P;
  const size_t BT = size_t(max_B * max_T), rows = tp_.sequence_parallel ? BT / P : BT;
  layer_act_floats_ = plan.layer_act_floats;
  acts_ = Buffer(plan.acts_bytes, MemCategory::activations, ledger);
  shared_act_floats_ = plan.shared_act_floats;
  // Chunk c's slots follow chunk c-1's; the recomputation workspace follows all.
  size_t base = 0;
  int64_t local0 = 0, token_slot0 = 0;
  for (const auto& c : chunks) {
    ChunkInfo ci{c.first_layer, c.last_layer, c.slots, c.first_layer == 0, c.last_layer == cfg.n_layer,
                 local0, base, 0, token_slot0};
    ci.slot_floats = layer_act_floats_ * size_t(c.last_layer - c.first_layer) + rows * C +
                     (ci.head ? rows * C + rows * 2 + BT * 2 + BT * Vpl : 0);
    base += ci.slot_floats * size_t(c.slots);
    local0 += c.last_layer - c.first_layer;
    token_slot0 += c.slots;
    chunks_.push_back(ci);
  }
  w_pending_.assign(size_t(token_slot0), 0);
  BRAID_CHECK(base + shared_act_floats_ == plan.act_floats, "activation slots out of sync with memory_plan");

  scratch_ = Buffer(plan.workspace_bytes, MemCategory::workspace, ledger);
  float* s = scratch_.as<float>();
  dres_ = s, s += rows * C;
  dln_ = s, s += BT * C;
  datty_ = s, s += BT * Cl;
  dqkv_ = s, s += 3 * BT * Cl;
  dfch_ = s, s += 4 * BT * Cl;
  if (owns_head_) dlogits_ = s, s += BT * Vpl;
  if (tpn_ > 1) ce_max_ = s, s += BT, ce_sum_ = s, s += 2 * BT;
  if (tp_.sequence_parallel) gbuf_ = s, s += BT * C;
  if (dropout_ > 0) dtmp_ = s, s += rows * C;
  att_scratch_ = s;
  BRAID_CHECK(size_t(s - scratch_.as<float>()) <= plan.scratch_floats,
              "scratch layout out of sync with memory_plan");
  tokens_buf_ = Buffer(plan.tokens_bytes, MemCategory::activations, ledger);
  set_slot(0);
}

std::vector<PipelineChunk> PipelineStage::resolved(int64_t n_layer) const {
  if (chunks.empty()) return {{first_layer, last_layer < 0 ? n_layer : last_layer, slots}};
  std::vector<PipelineChunk> r = chunks;
  for (auto& c : r)
    if (c.last_layer < 0) c.last_layer = n_layer;
  return r;
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
  const size_t BT = size_t(max_B_ * max_T_), rows = tp_.sequence_parallel ? BT / P : BT;
  float* const slot = acts_.as<float>() + ch.base + slot_floats_ * size_t(k);
  float* a = slot + layer_act_floats_ * size_t(l1_ - l0_);
  encoded_ = a, a += rows * C;
  if (has_head_) {
    lnf_ = a, a += rows * C;
    lnf_mean_ = a, a += rows;
    lnf_rstd_ = a, a += rows;
    lse_ = a, a += BT;
    losses_ = a, a += BT;
    logits_ = a, a += BT * Vpl;
  }
  BRAID_CHECK(a == slot + slot_floats_, "slot layout out of sync with memory_plan");
  tokens_ = tokens_buf_.as<int32_t>() + 2 * BT * size_t(ch.token_slot0 + k);
  targets_ = tokens_ + BT;
}

int64_t GPT::boundary_rows(int64_t B, int64_t T) const {
  return tp_.sequence_parallel && tpn_ > 1 ? B * T / tpn_ : B * T;
}

const float* GPT::stage_output() const {
  return l1_ > l0_ ? layer_acts(l1_ - 1).res3 : encoded_;
}

const ParamInfo& GPT::param(const std::string& name) const {
  for (const auto& p : table_)
    if (p.name == name) return p;
  throw Error(detail::concat(__FILE__, ":", __LINE__, ": no parameter named '", name, "'"));
}

GPT::LayerParams GPT::layer_params(const float* unit, int64_t l) const {
  const size_t first = (has_unit0_ ? 2 : 0) + size_t(local0_ + l - l0_) * 12;  // index in table_ of h.l.ln_1.weight
  const size_t begin = units_[size_t(unit_of_block(l))];
  float* base = const_cast<float*>(unit);
  auto at = [&](size_t i) { return base + (table_[first + i].offset - begin); };
  return {at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11)};
}

GPT::LayerActs GPT::layer_acts(int64_t l) const {
  const size_t P = size_t(tpn_);
  const size_t BT = size_t(max_B_ * max_T_), C = size_t(cfg_.n_embd), Cl = C / P;
  const size_t rows = tp_.sequence_parallel ? BT / P : BT;
  const size_t att = size_t(max_B_) * (size_t(cfg_.n_head) / P) * size_t(max_T_ * max_T_);
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
  r.ln1 = take(rows * C, full);
  r.ln1_mean = take(rows, full);
  r.ln1_rstd = take(rows, full);
  r.qkv = take(3 * BT * Cl, full);
  r.qkvr = take(3 * BT * Cl, full || sel);
  r.atty = take(BT * Cl, full || sel);
  r.attproj = take(rows * C, full);
  r.res2 = take(rows * C, full);
  r.ln2 = take(rows * C, full);
  r.ln2_mean = take(rows, full);
  r.ln2_rstd = take(rows, full);
  r.fch = take(4 * BT * Cl, full);
  r.fch_gelu = take(4 * BT * Cl, full || sel);
  r.fcproj = take(rows * C, full);
  r.res3 = kept(rows * C);
  r.att = take(att, full || sel);
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
    const size_t valid = info.name == "wte.weight" ? size_t(cfg_.vocab_size * cfg_.n_embd) : SIZE_MAX;
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

void GPT::tp_all_reduce(float* x, size_t n) {
  if (tpn_ > 1) tp_.comm->all_reduce(x, x, n, DType::f32, comm::ReduceOp::sum);
}
void GPT::tp_all_gather(const float* local, float* full, size_t n_local) {
  tp_.comm->all_gather(local, full, n_local, DType::f32);
}
void GPT::tp_reduce_scatter(float* full, size_t n_local) {
  tp_.comm->reduce_scatter(full, full + size_t(tpr_) * n_local, n_local, DType::f32, comm::ReduceOp::sum);
}

void GPT::round_operand(float* a, int64_t n) const { kernels::round_to_dtype(a, compute_dtype_, size_t(n)); }

float* GPT::gather_rows(float* local) {
  const int64_t P = tpn_, BT = B_ * T_, C = cfg_.n_embd;
  if (!(tp_.sequence_parallel && P > 1)) return local;
  tp_all_gather(local, gbuf_, size_t(BT / P * C));
  return gbuf_;
}

void GPT::reduce_row_partials(float* partial, float* out) {
  const int64_t P = tpn_, BT = B_ * T_, C = cfg_.n_embd;
  if (P == 1) return;
  if (tp_.sequence_parallel) {
    const int64_t rows = BT / P;
    tp_reduce_scatter(partial, size_t(rows * C));
    std::memcpy(out, partial + tpr_ * rows * C, size_t(rows * C) * sizeof(float));
  } else {
    tp_all_reduce(partial, size_t(BT * C));
    if (out != partial) std::memcpy(out, partial, size_t(BT * C) * sizeof(float));
  }
}

void GPT::drop(float* out, const float* in, int64_t rows, int64_t row0, uint64_t site) {
  // One stream per (step key, site); rows are numbered globally.
  k::dropout(out, in, rows, cfg_.n_embd, drop_row_base_ + row0, dropout_, drop_seed_,
             drop_stream_ * 4096 + site);
}

void GPT::sync_replicated_grads(const float* unit_grads, int u) {
  // Under sequence parallelism each TP rank saw only its token rows, so the
  // gradients of replicated LayerNorm weights (and wpe) are partial sums.
  if (tpn_ == 1 || !tp_.sequence_parallel || (!storage_ && !tp_grad_sync_)) return;
  float* g = const_cast<float*>(unit_grads);
  for (const auto& [rel, n] : partial_grads_[size_t(u)]) tp_all_reduce(g + rel, n);
}

void GPT::block_forward(int64_t l, const LayerParams& p, const float* x) {
  const int64_t B = B_, T = T_, C = cfg_.n_embd, NH = cfg_.n_head, BT = B * T, P = tpn_;
  const bool sp = tp_.sequence_parallel && P > 1;
  const int64_t Cl = C / P, NHl = NH / P;
  const int64_t rows = sp ? BT / P : BT, row0 = sp ? tpr_ * rows : 0;
  const bool dropping = dropout_ > 0 && training_;
  auto rnd = [this](float* a, int64_t n) { round_operand(a, n); };
  auto full_rows = [this](float* local) { return gather_rows(local); };
  auto reduce_rows = [this](float* partial, float* out) { reduce_row_partials(partial, out); };
  LayerActs a = layer_acts(l);
    k::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, rows, C);
    rnd(a.ln1, rows * C);
    k::matmul_forward(a.qkv, full_rows(a.ln1), p.qkvw, p.qkvb, BT, C, 3 * Cl);
    k::attention_forward(a.atty, a.qkvr, a.att, att_scratch_, a.qkv, B, T, Cl, NHl);
    rnd(a.atty, BT * Cl);
    if (P == 1) {
      k::matmul_forward(a.attproj, a.atty, p.attprojw, p.attprojb, BT, C, C);
    } else {
      float* part = sp ? gbuf_ : a.attproj;
      k::matmul_forward(part, a.atty, p.attprojw, nullptr, BT, Cl, C);
      reduce_rows(part, a.attproj);
      k::bias_forward(a.attproj, p.attprojb, rows, C);
    }
    if (dropping) drop(a.attproj, a.attproj, rows, row0, 2 * uint64_t(l));
    k::residual_forward(a.res2, x, a.attproj, rows * C);
    k::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, rows, C);
    rnd(a.ln2, rows * C);
    k::matmul_forward(a.fch, full_rows(a.ln2), p.fcw, p.fcb, BT, C, 4 * Cl);
    k::gelu_forward(a.fch_gelu, a.fch, BT * 4 * Cl);
    rnd(a.fch_gelu, BT * 4 * Cl);
    if (P == 1) {
      k::matmul_forward(a.fcproj, a.fch_gelu, p.fcprojw, p.fcprojb, BT, 4 * C, C);
    } else {
      float* part = sp ? gbuf_ : a.fcproj;
      k::matmul_forward(part, a.fch_gelu, p.fcprojw, nullptr, BT, 4 * Cl, C);
      reduce_rows(part, a.fcproj);
      k::bias_forward(a.fcproj, p.fcprojb, rows, C);
    }
    if (dropping) drop(a.fcproj, a.fcproj, rows, row0, 2 * uint64_t(l) + 1);
    k::residual_forward(a.res3, a.res2, a.fcproj, rows * C);
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int64_t B, int64_t T) {
  BRAID_CHECK(B > 0 && B <= max_B_ && T > 0 && T <= max_T_, "forward: B=", B, " T=", T,
              " outside the allocated max_B=", max_B_, " max_T=", max_T_);
  const int64_t C = cfg_.n_embd, L = cfg_.n_layer, V = cfg_.vocab_size,
                Vp = cfg_.padded_vocab_size, BT = B * T, P = tpn_;
  const bool sp = tp_.sequence_parallel && P > 1;
  BRAID_CHECK(!sp || BT % P == 0, "forward: ", BT, " token rows do not split over TP=", P);
  const int64_t Vpl = Vp / P, vstart = tpr_ * Vpl;
  const int64_t Vl = std::clamp<int64_t>(V - vstart, 0, Vpl);
  const int64_t rows = sp ? BT / P : BT, row0 = sp ? tpr_ * rows : 0;
  const bool dropping = dropout_ > 0 && training_;
  BRAID_CHECK(tokens || !has_embed_, "forward: the first stage needs tokens");
  for (int64_t i = 0; i < BT; ++i) {
    if (tokens) {
      BRAID_CHECK(tokens[i] >= 0 && tokens[i] < V, "forward: token ", tokens[i], " at ", i,
                  " outside [0, ", V, ")");
      tokens_[i] = tokens[i];
    }
    if (targets) targets_[i] = targets[i];
  }
  B_ = B, T_ = T;
  have_targets_ = targets != nullptr;
  const int uf = int(units_.size()) - 2;  // final LayerNorm unit (last stage)
  // Rounds a matmul input to the compute dtype (no-op in f32).
  auto rnd = [this](float* a, int64_t n) { round_operand(a, n); };
  auto full_rows = [this](float* local) { return gather_rows(local); };
  auto reduce_rows = [this](float* partial, float* out) { reduce_row_partials(partial, out); };

  // Unit 0 holds wte at offset 0 and wpe at table_[1].offset. A later
  // pipeline stage finds its input in encoded_ (stage_input()).
  if (has_embed_) {
    const float* E = acquire_params(0);
    if (P == 1) {
      k::encoder_forward(encoded_, tokens_, E, E + table_[1].offset, B, T, C);
    } else {
      // Vocab-parallel embedding: each rank looks up its rows, the sum over TP is
      // exact (one non-zero term per element), then the replicated positions.
      float* part = sp ? gbuf_ : encoded_;
      k::embedding_lookup_range(part, tokens_, E, vstart, Vpl, BT, C);
      reduce_rows(part, encoded_);
      k::position_forward(encoded_, E + table_[1].offset, row0, rows, T, C);
    }
    release_params(0);
    if (dropping) drop(encoded_, encoded_, rows, row0, 2 * uint64_t(L));
  }
  const float* x = encoded_;
  for (int64_t l = l0_; l < l1_; ++l) {
    LayerParams p = layer_params(acquire_params(unit_of_block(l)), l);
    block_forward(l, p, x);
    release_params(unit_of_block(l));
    x = layer_acts(l).res3;
  }
  if (!has_head_) return 0.0f;  // the stage's output is x = stage_output()
  const float* F = acquire_params(uf);  // ln_f.weight at F[0], ln_f.bias after it
  const size_t lnfb_rel = table_[table_.size() - 1].offset - units_[size_t(uf)];
  k::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, F, F + lnfb_rel, rows, C);
  release_params(uf);
  rnd(lnf_, rows * C);
  // logits (BT, Vp/tp) = lnf (BT, C) @ wte^T: the head is tied to the embedding
  // (vocab-parallel: this rank's vocabulary columns).
  const float* wte = acquire_params(0);
  k::matmul_forward(logits_, full_rows(lnf_), wte, nullptr, BT, C, Vpl);
  release_params(0);
  if (P == 1) {
    k::softmax_crossentropy_forward(losses_, lse_, nullptr, logits_, targets ? targets_ : nullptr,
                                    BT, V, Vp);
  } else {
    // Vocab-parallel cross-entropy: max, then sum of exp and target logit, over TP.
    k::vocab_parallel_max(ce_max_, logits_, BT, Vl, Vpl);
    tp_.comm->all_reduce(ce_max_, ce_max_, size_t(BT), DType::f32, comm::ReduceOp::max);
    float* tgt = ce_sum_ + BT;
    k::vocab_parallel_sumexp(ce_sum_, tgt, logits_, ce_max_, targets ? targets_ : nullptr, vstart, BT,
                             Vl, Vpl);
    if (!targets) std::memset(tgt, 0, size_t(BT) * sizeof(float));
    tp_all_reduce(ce_sum_, size_t(2 * BT));
    for (int64_t i = 0; i < BT; ++i) {
      lse_[i] = ce_max_[i] + std::log(ce_sum_[i]);
      losses_[i] = lse_[i] - tgt[i];
    }
  }
  if (!targets) return 0.0f;
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
  const int64_t BT = B_ * T_, C = cfg_.n_embd, P = tpn_, Cl = C / P, Vpl = cfg_.padded_vocab_size / P;
  auto full_rows = [this](const float* local) { return gather_rows(const_cast<float*>(local)); };
  float* G0 = nullptr;  // unit 0 stays acquired from the head to the embedding
  if (has_head_) {
    // logits_ holds d(logits) (BT x Vp/tp); the head's weight is wte.
    G0 = acquire_grads(0);
    k::matmul_backward(nullptr, G0, nullptr, logits_, full_rows(lnf_), nullptr, BT, C, Vpl);
  }
  for (int64_t l = l1_ - 1; l >= l0_; --l) {
    const int u = unit_of_block(l);
    LayerParams g = layer_params(acquire_grads(u), l);
    const LayerActs a = layer_acts(l);
    k::matmul_backward(nullptr, g.fcprojw, nullptr, full_rows(a.fcproj), a.fch_gelu, nullptr, BT, 4 * Cl, C);
    k::matmul_backward(nullptr, g.fcw, nullptr, a.fch, full_rows(a.ln2), nullptr, BT, C, 4 * Cl);
    k::matmul_backward(nullptr, g.attprojw, nullptr, full_rows(a.attproj), a.atty, nullptr, BT, Cl, C);
    k::matmul_backward(nullptr, g.qkvw, nullptr, a.qkvr, full_rows(a.ln1), nullptr, BT, C, 3 * Cl);
    if (storage_) storage_->grads_ready(u);
  }
  if (has_embed_) {
    if (!G0) G0 = acquire_grads(0);
    embedding_backward(encoded_, G0);
  }
  if (G0 && storage_) storage_->grads_ready(0);
}

void GPT::backward_impl(float loss_scale, const std::function<void(size_t, size_t)>& on_ready,
                        BackwardPart part) {
  BRAID_CHECK(have_targets_ || !has_head_, "backward: the last forward had no targets");
  // Split backward: B leaves weight gradients to W and stashes their output gradients.
  const bool split = part == BackwardPart::input;
  if (split) {
    BRAID_CHECK(recompute_ == Recompute::none, "backward_input needs the activations kept (--recompute none)");
    w_pending_[size_t(chunks_[size_t(chunk_)].token_slot0 + slot_)] = 1;
  }
  // Weight-gradient outputs of matmul_backward: none under the split (W adds them).
  auto wgrad = [split](float* g) { return split ? nullptr : g; };
  const int64_t B = B_, T = T_, C = cfg_.n_embd, L = cfg_.n_layer, NH = cfg_.n_head,
                V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size, BT = B * T, P = tpn_;
  const bool sp = tp_.sequence_parallel && P > 1;
  const int64_t Cl = C / P, NHl = NH / P, Vpl = Vp / P, vstart = tpr_ * Vpl;
  const int64_t Vl = std::clamp<int64_t>(V - vstart, 0, Vpl);
  const int64_t rows = sp ? BT / P : BT, row0 = sp ? tpr_ * rows : 0;
  const bool dropping = dropout_ > 0 && training_;
  const int uf = int(units_.size()) - 2;
  auto ready = [&](int u) {
    if (storage_) {
      storage_->grads_ready(u);
    } else if (on_ready) {
      on_ready(units_[size_t(u)], units_[size_t(u) + 1]);
    }
  };
  auto rnd = [this](float* a, int64_t n) { round_operand(a, n); };
  auto full_rows = [this](const float* local) { return gather_rows(const_cast<float*>(local)); };
  // Column-parallel backward leaves a partial input gradient (BT x C): sum it
  // over TP into this rank's rows (all-reduce, or reduce-scatter under SP).
  auto reduce_dinp = [&]() -> float* {
    if (P == 1) return dln_;
    if (!sp) {
      tp_all_reduce(dln_, size_t(BT * C));
      return dln_;
    }
    tp_reduce_scatter(dln_, size_t(rows * C));
    return dln_ + tpr_ * rows * C;
  };
  // Gradient reaching a dropped-out branch: the same mask applied to dres.
  auto branch_grad = [&](uint64_t site) -> float* {
    if (!dropping) return dres_;
    drop(dtmp_, dres_, rows, row0, site);
    return dtmp_;
  };

  float* G0 = nullptr;  // dwte at G0[0], dwpe at G0[table_[1].offset]
  // A stage other than the last finds d(output) in dres_ (boundary_grad()).
  if (has_head_) {
  if (P == 1) {
    k::softmax_crossentropy_backward(dlogits_, logits_, lse_, targets_, loss_scale / float(BT), BT,
                                     V, Vp);
  } else {
    k::vocab_parallel_crossentropy_backward(dlogits_, logits_, lse_, targets_, vstart,
                                            loss_scale / float(BT), BT, Vl, Vpl);
  }
  // Output gradients enter each matmul backward in the compute dtype (no-op in f32).
  rnd(dlogits_, BT * Vpl);
  G0 = acquire_grads(0);
  const float* wte = acquire_params(0);
  k::matmul_backward(dln_, wgrad(G0), nullptr, dlogits_, full_rows(lnf_), wte, BT, C, Vpl);
  release_params(0);
  if (split) std::memcpy(logits_, dlogits_, size_t(BT * Vpl) * sizeof(float));
  const float* dlnf = reduce_dinp();
  // dres_ is the residual-stream gradient; layer norms accumulate into it.
  std::memset(dres_, 0, size_t(rows * C) * sizeof(float));
  const float* xL = stage_output();
    const float* F = acquire_params(uf);
    float* GF = acquire_grads(uf);
    const size_t lnfb_rel = table_[table_.size() - 1].offset - units_[size_t(uf)];
    k::layernorm_backward(dres_, GF, GF + lnfb_rel, dlnf, xL, F, lnf_mean_, lnf_rstd_, rows, C);
    release_params(uf);
    sync_replicated_grads(GF, uf);
    ready(uf);
  }

  for (int64_t l = l1_ - 1; l >= l0_; --l) {
    const int u = unit_of_block(l);
    LayerParams p = layer_params(acquire_params(u), l);
    float* Gu = acquire_grads(u);
    LayerParams g = layer_params(Gu, l);
    const float* x = l == l0_ ? encoded_ : layer_acts(l - 1).res3;
    // Activation checkpointing: rebuild what forward did not keep, with the
    // same kernels, inputs and dropout keys, so the values are bitwise the
    // ones a run without recomputation stores.
    if (recompute_ == Recompute::full) {
      block_forward(l, p, x);
    } else if (recompute_ == Recompute::selective) {
      LayerActs r = layer_acts(l);
      k::attention_forward(r.atty, r.qkvr, r.att, att_scratch_, r.qkv, B, T, Cl, NHl);
      rnd(r.atty, BT * Cl);
      k::gelu_forward(r.fch_gelu, r.fch, BT * 4 * Cl);
      rnd(r.fch_gelu, BT * 4 * Cl);
    }
    LayerActs a = layer_acts(l);
    // res3 = res2 + drop(fcproj): d fcproj = mask * dres; d res2 = dres (+ LN2 path below).
    // With rounding on, dres is rounded in place: the residual stream's
    // gradient is then held in the compute dtype, as in a half-precision run.
    rnd(dres_, rows * C);
    const float* dlocal = branch_grad(2 * uint64_t(l) + 1);
    if (split) std::memcpy(a.fcproj, dlocal, size_t(rows * C) * sizeof(float));
    const float* dout = full_rows(const_cast<float*>(dlocal));
    k::matmul_backward(dfch_, wgrad(g.fcprojw), g.fcprojb, dout, a.fch_gelu, p.fcprojw, BT, 4 * Cl, C);
    k::gelu_backward(dfch_, dfch_, a.fch, BT * 4 * Cl);
    rnd(dfch_, BT * 4 * Cl);
    if (split) std::memcpy(a.fch, dfch_, size_t(BT * 4 * Cl) * sizeof(float));
    k::matmul_backward(dln_, wgrad(g.fcw), g.fcb, dfch_, full_rows(a.ln2), p.fcw, BT, C, 4 * Cl);
    k::layernorm_backward(dres_, g.ln2w, g.ln2b, reduce_dinp(), a.res2, p.ln2w, a.ln2_mean,
                          a.ln2_rstd, rows, C);
    // res2 = x + drop(attproj): d attproj = mask * dres; d x = dres (+ LN1 path below).
    rnd(dres_, rows * C);
    dlocal = branch_grad(2 * uint64_t(l));
    if (split) std::memcpy(a.attproj, dlocal, size_t(rows * C) * sizeof(float));
    dout = full_rows(const_cast<float*>(dlocal));
    k::matmul_backward(datty_, wgrad(g.attprojw), g.attprojb, dout, a.atty, p.attprojw, BT, Cl, C);
    k::attention_backward(dqkv_, att_scratch_, datty_, a.qkvr, a.att, B, T, Cl, NHl);
    rnd(dqkv_, BT * 3 * Cl);
    if (split) std::memcpy(a.qkvr, dqkv_, size_t(BT * 3 * Cl) * sizeof(float));
    k::matmul_backward(dln_, wgrad(g.qkvw), g.qkvb, dqkv_, full_rows(a.ln1), p.qkvw, BT, C, 3 * Cl);
    k::layernorm_backward(dres_, g.ln1w, g.ln1b, reduce_dinp(), x, p.ln1w, a.ln1_mean, a.ln1_rstd,
                          rows, C);
    release_params(u);
    sync_replicated_grads(Gu, u);
    ready(u);
  }
  if (has_embed_) {
    const float* denc = branch_grad(2 * uint64_t(L));
    // The embedding's gradient is a weight gradient: W adds it after the head's,
    // the order backward() uses, from d(encoded) stashed over the stage input.
    if (split) {
      std::memcpy(encoded_, denc, size_t(rows * C) * sizeof(float));
    } else {
      // Unit 0 stays acquired from the head's backward (acquire it once).
      if (!G0) G0 = acquire_grads(0);
      embedding_backward(denc, G0);
    }
  }
  if (G0) ready(0);
}

void GPT::embedding_backward(const float* denc, float* G0) {
  const int64_t B = B_, T = T_, C = cfg_.n_embd, BT = B * T, P = tpn_;
  const bool sp = tp_.sequence_parallel && P > 1;
  const int64_t Vpl = cfg_.padded_vocab_size / P, vstart = tpr_ * Vpl;
  const int64_t rows = sp ? BT / P : BT, row0 = sp ? tpr_ * rows : 0;
  // dwte at G0[0], dwpe at G0[table_[1].offset]
  if (P == 1) {
    k::encoder_backward(G0, G0 + table_[1].offset, denc, tokens_, B, T, C);
  } else {
    k::position_backward(G0 + table_[1].offset, denc, row0, rows, T, C);
    k::embedding_backward_range(G0, gather_rows(const_cast<float*>(denc)), tokens_, vstart, Vpl, BT, C);
  }
  sync_replicated_grads(G0, 0);
}

int64_t GPT::flops_per_token(int64_t T) const {
  const int64_t C = cfg_.n_embd, L = cfg_.n_layer;
  const int64_t n_matmul = L * 12 * C * C + cfg_.padded_vocab_size * C;
  return 6 * n_matmul + 12 * L * C * T;
}

}  // namespace braid::model
