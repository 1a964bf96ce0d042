#include "braid/model/memory_plan.h"

#include <algorithm>

#include "braid/core/error.h"
#include "braid/kernels/cpu/attention.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/model/param_layout.h"

namespace braid::model {

namespace k = braid::kernels;

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

namespace {
// The ConfigErrors memory_plan (and so the constructor) throws.
void check_sizes(const GPTConfig& cfg, int64_t max_B, int64_t max_T, int tp, bool sp,
                 const std::vector<PipelineChunk>& chunks) {
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
  BRAID_CONFIG_CHECK(!chunks.empty(), "pipeline stage: no layers");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t l0 = chunks[c].first_layer, l1 = chunks[c].last_layer;
    BRAID_CONFIG_CHECK(l0 >= 0 && l0 < l1 && l1 <= cfg.n_layer && chunks[c].slots >= 1 &&
                           (c == 0 || l0 >= chunks[c - 1].last_layer),
                       "pipeline stage: chunk ", c, " with layers [", l0, ", ", l1, ") and ", chunks[c].slots,
                       " activation slots is not a non-empty range of the ", cfg.n_layer,
                       " layers of model '", cfg.name, "' after the previous chunk");
  }
}
}  // namespace

size_t half_grad_elems(size_t BT, size_t rows, size_t C, size_t QKVl, size_t Fl) {
  return std::max({BT * Fl, BT * QKVl, rows * C});
}

namespace {

// The sizes of one rank's share of a micro-batch: tp shards of width and
// vocabulary, and the token rows (all, or 1/tp under sequence parallelism).
struct RankDims {
  size_t C, Vpl, Cl, NHl, BT, rows;
  int64_t B, T;
  DType op;  // the matmul operands' storage dtype
  size_t NKVl = 0, QKVl = 0, Hl = 0, Fl = 0;  // kv heads; packed q|k|v, MLP hidden and up-projection widths
  bool fused = true;  // the fused attention kernel (else the one saving the probabilities)
};

RankDims rank_dims(const GPTConfig& cfg, int64_t max_B, int64_t max_T, int tp, bool sp, const Precision& precision) {
  const size_t P = size_t(tp), BT = size_t(max_B * max_T);
  RankDims d{size_t(cfg.n_embd), size_t(cfg.padded_vocab_size) / P, size_t(cfg.n_embd) / P, size_t(cfg.n_head) / P,
             BT, sp ? BT / P : BT, max_B, max_T, precision.operands};
  d.NKVl = size_t(cfg.kv_heads()) / P;
  d.QKVl = size_t(cfg.qkv_width()) / P;
  d.Hl = size_t(cfg.hidden()) / P;
  d.Fl = size_t(cfg.fc_width()) / P;
  return d;
}

// Per block (see layer_acts): ln1, attproj, res2, ln2, fcproj, res3 (rows x C
// each: token rows of this rank); qkv, qkvr (BT x qkv_width/tp each), atty (BT
// x C/tp), fch (BT x fc_width/tp), fch_gelu (the activation, BT x hidden/tp); 4
// norm statistics of rows (RMSNorm uses half of them); attention's
// log-sum-exp, B x NH/tp x T f32. All but the statistics are stored in
// the operand dtype, the residual stream (res2, res3) too unless it stays
// f32 (Precision::fp32_residual; GPT::compute_dtype). Sets the floats a block
// keeps per slot and the recomputation workspace all blocks share.
void plan_block_activations(const RankDims& d, const Precision& precision, Recompute recompute, GPTMemoryPlan& m) {
  const DType op = d.op;
  // The fused kernel's log-sum-exp (f32), or the probabilities (operand dtype).
  const size_t att = d.fused ? k::flash_attention_lse_floats(d.B, d.T, int64_t(d.NHl))
                             : operand_floats(size_t(d.B) * d.NHl * size_t(d.T * d.T), op);
  const size_t atty = operand_floats(d.BT * d.Cl, op), fch_gelu = operand_floats(d.BT * d.Hl, op);
  const size_t qkv = operand_floats(d.BT * d.QKVl, op), res = operand_floats(d.rows * d.C, precision.residual());
  const size_t all_floats = 4 * operand_floats(d.rows * d.C, op) + 2 * res + 2 * qkv +
                            operand_floats(d.BT * d.Fl, op) + atty + fch_gelu + 4 * d.rows + att;
  // Recomputed tensors live once, in a workspace shared by all blocks and slots.
  const size_t recomputed_selective = qkv + atty + fch_gelu + att;
  switch (recompute) {
    case Recompute::none: m.layer_act_floats = all_floats; break;
    case Recompute::selective:
      m.layer_act_floats = all_floats - recomputed_selective;
      m.shared_act_floats = recomputed_selective;
      break;
    case Recompute::full:
      m.layer_act_floats = res;  // the block's output
      m.shared_act_floats = all_floats - res;
      break;
  }
}

// Per slot: the local blocks, the stage input `encoded` (rows x C) and, with
// the residual stream kept in a half dtype, the stage output in f32 (rows x C: what the next
// stage receives and the head reads); on the last stage the head: lnf
// (rows x C, operand dtype), lnf_mean, lnf_rstd (rows each), lse, losses (BT
// each), logits (BT x Vp/tp, operand dtype). Sets act_floats; returns the
// slots over all chunks.
size_t plan_stage_activations(const RankDims& d, bool half_res, int64_t n_layer,
                              const std::vector<PipelineChunk>& chunks, GPTMemoryPlan& m) {
  size_t S = 0;
  for (const auto& c : chunks) {
    const bool has_head = c.last_layer == n_layer;
    const size_t slot =
        m.layer_act_floats * size_t(c.last_layer - c.first_layer) + d.rows * d.C + (half_res ? d.rows * d.C : 0) +
        (has_head ? operand_floats(d.rows * d.C, d.op) + d.rows * 2 + d.BT * 2 + operand_floats(d.BT * d.Vpl, d.op)
                  : 0);
    m.act_floats += slot * size_t(c.slots);
    S += size_t(c.slots);
  }
  m.act_floats += m.shared_act_floats;
  return S;
}

// Backward's scratch: dres (rows x C), dln (BT x C), datty (BT x C/tp), dqkv (3
// BT x C/tp), dfch (4 BT x C/tp), dlogits (BT x Vp/tp), attention scratch, the
// linear layers' copies; with TP > 1 the vocab-parallel loss statistics (3 BT)
// and, with sequence parallelism, a gather buffer (BT x C); with dropout a
// masked-gradient buffer (rows x C). Sets scratch_floats and matmul_scratch_floats.
void plan_scratch(const RankDims& d, int tp, bool sp, float dropout, bool head, bool half_res,
                  size_t attention_scratch, GPTMemoryPlan& m) {
  const size_t C = d.C, Cl = d.Cl, BT = d.BT, rows = d.rows;
  // The fused kernel's forward needs no workspace; another attention form
  // (context parallelism) may ask for more.
  const size_t kernel_scratch =
      d.fused ? k::flash_attention_backward_scratch_floats(
                    d.B, d.T, k::AttentionHeads{int64_t(d.NHl), int64_t(d.NKVl), int64_t(Cl / d.NHl)}, d.op)
              : std::max(k::attention_forward_scratch_floats(d.B, d.T, int64_t(Cl), int64_t(d.NHl), d.op),
                         k::attention_backward_scratch_floats(d.B, d.T, int64_t(Cl), int64_t(d.NHl), d.op));
  const size_t att_scratch = std::max(attention_scratch, kernel_scratch);
  // The linear layers' backward copies (kernels::matmul_backward): the largest
  // over this rank's (in, out) features: c_attn, attn.c_proj, c_fc, mlp.c_proj, head.
  const std::pair<size_t, size_t> linears[] = {{C, d.QKVl}, {Cl, C}, {C, d.Fl}, {d.Hl, C}, {C, d.Vpl}};
  const size_t n_linears = head ? 5 : 4;
  for (size_t i = 0; i < n_linears; ++i)
    m.matmul_scratch_floats =
        std::max(m.matmul_scratch_floats, k::matmul_backward_scratch_floats(int64_t(BT), int64_t(linears[i].first),
                                                                          int64_t(linears[i].second)));
  // dres, dln, datty, dqkv, dfch; SwiGLU's activation gradient (dact) apart from dfch.
  const size_t dact = d.Fl != d.Hl ? BT * d.Hl : 0;
  m.scratch_floats = rows * C + BT * C + BT * (Cl + d.QKVl + d.Fl) + dact + (head ? BT * d.Vpl : 0) + att_scratch +
                     m.matmul_scratch_floats;
  if (tp > 1) m.scratch_floats += 3 * BT;
  if (sp) m.scratch_floats += BT * C;
  if (dropout > 0) m.scratch_floats += rows * C;
  // Half-precision operands: a block's matmul output gradient in their dtype;
  // a half residual stream: its working values in f32 (x and res2, rows x C each).
  if (d.op != DType::f32) m.scratch_floats += operand_floats(half_grad_elems(BT, rows, C, d.QKVl, d.Fl), d.op);
  if (half_res) m.scratch_floats += 2 * rows * C;
}

}  // namespace

GPTMemoryPlan memory_plan(const GPTConfig& cfg, int64_t max_B, int64_t max_T, bool owns_state, int tp, bool sp,
                          float dropout, const PipelineStage& stage, Recompute recompute,
                          const Precision& precision, size_t attention_scratch,
                          std::optional<bool> fused_attention) {
  const std::vector<PipelineChunk> chunks = stage.resolved(cfg.n_layer);
  check_sizes(cfg, max_B, max_T, tp, sp, chunks);
  GPTMemoryPlan m;
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
  m.num_params = build_param_table(cfg, tp, stage, &table, &layer_begin);
  m.params_bytes = owns_state ? m.num_params * sizeof(float) : 0;
  m.grads_bytes = owns_state ? m.num_params * sizeof(float) : 0;
  RankDims d = rank_dims(cfg, max_B, max_T, tp, sp, precision);
  d.fused = fused_attention.value_or(plans_fused_attention(cfg, max_T >= k::kFusedAttentionMinT));
  const bool half_res = precision.residual() != DType::f32;
  const bool head = std::any_of(chunks.begin(), chunks.end(), [&](const auto& c) { return c.last_layer == cfg.n_layer; });
  plan_block_activations(d, precision, recompute, m);
  const size_t slots = plan_stage_activations(d, half_res, cfg.n_layer, chunks, m);
  m.acts_bytes = m.act_floats * sizeof(float);
  plan_scratch(d, tp, sp, dropout, head, half_res, attention_scratch, m);
  m.workspace_bytes = m.scratch_floats * sizeof(float);
  m.tokens_bytes = 2 * d.BT * sizeof(int32_t) * slots;
  return m;
}

}  // namespace braid::model
