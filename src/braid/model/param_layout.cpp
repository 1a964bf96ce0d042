#include "braid/model/param_layout.h"

#include "braid/core/error.h"

namespace braid::model {

namespace {
constexpr size_t kAlign = 16;  // floats (64 bytes)
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

namespace {
std::string divisors_of(int64_t n) {
  std::string d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d += (d.empty() ? "" : ", ") + std::to_string(i);
  return d;
}
}  // namespace

void validate_tp(const GPTConfig& cfg, int tp) {
  BRAID_CONFIG_CHECK(tp >= 1, "--tp ", tp, " must be >= 1");
  BRAID_CONFIG_CHECK(cfg.n_head % tp == 0, "--tp ", tp, " does not divide n_head=", cfg.n_head,
                     " of model '", cfg.name, "' (attention heads are split over TP ranks); use ",
                     divisors_of(cfg.n_head));
  BRAID_CONFIG_CHECK(cfg.kv_heads() % tp == 0, "--tp ", tp, " does not divide n_kv_head=", cfg.kv_heads(),
                     " of model '", cfg.name, "' (each TP rank holds whole key/value heads; replicating them "
                     "is not supported); use ", divisors_of(cfg.kv_heads()));
  BRAID_CONFIG_CHECK(cfg.hidden() % tp == 0, "--tp ", tp, " does not divide the MLP's ", cfg.hidden(),
                     " hidden features of model '", cfg.name, "'; use ", divisors_of(cfg.hidden()));
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
  // Rows split inside each row block: the rank's rows of block 0, then of block 1, ...
  size_t full_first = 0, local_first = 0;  // the current block's first row, whole and local
  const std::vector<int64_t> blocks =
      p.tp_block_rows.empty() ? std::vector<int64_t>{p.full_shape[0]} : p.tp_block_rows;
  for (int64_t rows_full : blocks) {
    const size_t rows_l = size_t(rows_full) / size_t(tp);
    if (row < local_first + rows_l)
      return (full_first + size_t(tp_rank) * rows_l + (row - local_first)) * cols_l + col;
    full_first += size_t(rows_full), local_first += rows_l;
  }
  throw Error(detail::concat(__FILE__, ":", __LINE__, ": full_index: row ", row, " outside ", p.name));
}

std::vector<BlockRole> block_roles(const GPTConfig& cfg) {
  using R = BlockRole;
  const bool nb = cfg.norm == NormKind::layernorm, lb = cfg.bias;
  std::vector<R> r;
  for (R x : {R::ln1w, R::ln1b, R::qkvw, R::qkvb, R::attprojw, R::attprojb, R::ln2w, R::ln2b, R::fcw, R::fcb,
              R::fcprojw, R::fcprojb}) {
    const bool norm_bias = x == R::ln1b || x == R::ln2b;
    const bool lin_bias = x == R::qkvb || x == R::attprojb || x == R::fcb || x == R::fcprojb;
    if ((norm_bias && !nb) || (lin_bias && !lb)) continue;
    r.push_back(x);
  }
  return r;
}

size_t build_param_table(const GPTConfig& cfg, int tp, const PipelineStage& stage, std::vector<ParamInfo>* table,
                         std::vector<size_t>* layer_begin) {
  const int64_t C = cfg.n_embd, L = cfg.n_layer, Vp = cfg.padded_vocab_size, P = tp;
  const int64_t Ckv = cfg.kv_heads() * cfg.head_size(), H = cfg.hidden(), F = cfg.fc_width();
  const std::vector<PipelineChunk> chunks = stage.resolved(L);
  auto held = [&](int64_t l) {
    for (const auto& c : chunks)
      if (l >= c.first_layer && l < c.last_layer) return true;
    return false;
  };
  const bool head = held(L - 1);
  const bool unit0 = held(0) || (head && cfg.tied_head);  // the embeddings, or the tied head's copy
  size_t off = 0;
  size_t global = 0;  // index in the whole model's table
  bool keep = true;   // whether the tensors being added belong to this stage
  // tp_dim 0: rows split (column-parallel output features, vocab rows), inside
  // each of `blocks` when given; tp_dim 1: columns split (row-parallel input features).
  auto add = [&](const std::string& name, std::vector<int64_t> full, bool wd, int layer, int dim,
                 std::vector<int64_t> blocks = {}) {
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
    pi.tp_block_rows = std::move(blocks);
    table->push_back(std::move(pi));
    off = align_up(off + n);
  };
  keep = unit0;
  add("wte.weight", {Vp, C}, true, -1, 0);
  if (cfg.positions == PositionKind::learned) add("wpe.weight", {cfg.block_size, C}, true, -1, -1);
  const std::vector<int64_t> qkv_blocks = {C, Ckv, Ckv};
  const std::vector<int64_t> fc_blocks =
      cfg.mlp == MlpKind::swiglu ? std::vector<int64_t>{H, H} : std::vector<int64_t>{};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    const int li = int(l);
    keep = held(l);
    if (keep) layer_begin->push_back(off);
    for (BlockRole r : block_roles(cfg)) {
      switch (r) {
        case BlockRole::ln1w: add(p + "ln_1.weight", {C}, false, li, -1); break;
        case BlockRole::ln1b: add(p + "ln_1.bias", {C}, false, li, -1); break;
        case BlockRole::qkvw: add(p + "attn.c_attn.weight", {C + 2 * Ckv, C}, true, li, 0, qkv_blocks); break;
        case BlockRole::qkvb: add(p + "attn.c_attn.bias", {C + 2 * Ckv}, false, li, 0, qkv_blocks); break;
        case BlockRole::attprojw: add(p + "attn.c_proj.weight", {C, C}, true, li, 1); break;
        case BlockRole::attprojb: add(p + "attn.c_proj.bias", {C}, false, li, -1); break;
        case BlockRole::ln2w: add(p + "ln_2.weight", {C}, false, li, -1); break;
        case BlockRole::ln2b: add(p + "ln_2.bias", {C}, false, li, -1); break;
        case BlockRole::fcw: add(p + "mlp.c_fc.weight", {F, C}, true, li, 0, fc_blocks); break;
        case BlockRole::fcb: add(p + "mlp.c_fc.bias", {F}, false, li, 0, fc_blocks); break;
        case BlockRole::fcprojw: add(p + "mlp.c_proj.weight", {C, H}, true, li, 1); break;
        case BlockRole::fcprojb: add(p + "mlp.c_proj.bias", {C}, false, li, -1); break;
        case BlockRole::count: break;
      }
    }
  }
  keep = head;
  if (keep) layer_begin->push_back(off);
  add("ln_f.weight", {C}, false, int(L), -1);
  if (cfg.norm == NormKind::layernorm) add("ln_f.bias", {C}, false, int(L), -1);
  if (!cfg.tied_head) add("lm_head.weight", {Vp, C}, true, int(L), 0);
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
