#include "braid/model/param_layout.h"

#include "braid/core/error.h"

namespace braid::model {

namespace {
constexpr size_t kAlign = 16;  // floats (64 bytes)
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

void validate_tp(const GPTConfig& cfg, int tp) {
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

size_t full_index(const ParamInfo& p, size_t local, int tp_rank, int tp) {
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

size_t build_param_table(const GPTConfig& cfg, int tp, const PipelineStage& stage, std::vector<ParamInfo>* table,
                         std::vector<size_t>* layer_begin) {
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

namespace {
// The validated table of cfg on a TP rank and its layer starts.
struct Layout {
  std::vector<ParamInfo> table;
  std::vector<size_t> layer_begin;
};
Layout layout(const GPTConfig& cfg, int tp, const PipelineStage& stage) {
  cfg.validate();
  validate_tp(cfg, tp);
  Layout l;
  build_param_table(cfg, tp, stage, &l.table, &l.layer_begin);
  return l;
}
}  // namespace

std::vector<size_t> unit_bounds(const GPTConfig& cfg, int tp, const PipelineStage& stage) {
  const Layout l = layout(cfg, tp, stage);
  // Unit 0 (the embeddings, or the head's tied copy) when the stage holds it.
  std::vector<size_t> b;
  if (!l.table.empty() && l.table[0].name == "wte.weight") b.push_back(0);
  b.insert(b.end(), l.layer_begin.begin(), l.layer_begin.end());
  return b;
}

std::vector<ParamInfo> param_table(const GPTConfig& cfg, int tp, const PipelineStage& stage) {
  return layout(cfg, tp, stage).table;
}

}  // namespace braid::model
