#include "braid/parallel/plan_memory.h"

#include <cstdio>
#include <sstream>

#include "braid/core/error.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/parallel/context/ring_attention.h"
#include "braid/parallel/context/ulysses_attention.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/pipeline/executor.h"
#include "braid/parallel/data_parallel/registry.h"

namespace braid::parallel {

const char* const kNotInLedger =
    "not in the ledger, so not predicted: the comm library's internal scratch (ring-algorithm "
    "workspace, MPI's own buffers), oneDNN/BLAS scratch, the token data held in host vectors, "
    "the matmul-peak probe run before training, checkpoint save/load temporaries (full-size "
    "m and v), thread stacks and the executable itself";

size_t MemoryPlan::total() const {
  size_t t = 0;
  for (size_t b : bytes) t += b;
  return t;
}

size_t MemoryPlan::model_state_bytes() const {
  return at(MemCategory::compute_params) + at(MemCategory::master_params) +
         at(MemCategory::grads) + at(MemCategory::optimizer);
}

namespace {

// The layout resolved, no rank chosen yet.
MemoryPlan resolved(const LayoutOptions& options, int world_size) {
  BRAID_CONFIG_CHECK(world_size >= 1, "--ranks ", world_size, " must be >= 1");
  MemoryPlan p;
  p.config = model_config(options);
  p.options = options;
  p.parallel = resolve_plan(p.options, world_size, p.config);
  p.world_size = world_size;
  return p;
}

MemoryPlan plan_rank(MemoryPlan p, int rank, const model::PipelineStage& stage);

}  // namespace

MemoryPlan plan_memory(const LayoutOptions& options, int world_size, int rank) {
  MemoryPlan p = resolved(options, world_size);
  BRAID_CONFIG_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " outside [0, ", world_size, ")");
  const model::PipelineStage stage = p.parallel.pp.stage(p.parallel.pp_rank(rank));
  return plan_rank(std::move(p), rank, stage);
}

std::vector<MemoryPlan> plan_memory_per_stage(const LayoutOptions& options, int world_size) {
  const MemoryPlan p = resolved(options, world_size);
  ScheduleStats st;
  if (p.parallel.pp.stages > 1) p.parallel.pp.programs(&st);
  std::vector<MemoryPlan> out;
  for (int s = 0; s < p.parallel.pp.stages; ++s)
    out.push_back(plan_rank(p, p.parallel.grid().rank({0, 0, s}), p.parallel.pp.stage(s, st)));
  return out;
}

namespace {

// --async-save's staging copy of the pieces this rank writes (params and both
// AdamW moments, f32; train/checkpoint_pieces.h): its owned elements spread
// over the ranks that hold them too, plus at most one split piece that the
// balancing leaves over. A bound: the trainer stages the exact assignment,
// which also leaves out alignment gaps and the tied embedding's copy.
size_t staging_bytes(const MemoryPlan& p, const ParallelPlan& pl) {
  if (!p.options.async_save) return 0;
  const size_t owned = p.optimizer_elems;
  const bool sharded = pl.dp.mode->sharding.optimizer == Holding::shard;
  const size_t replicas = pl.dp.parameter_server() ? 1
                          : static_cast<size_t>(sharded ? pl.grad_ranks() / pl.dp.shard_degree : pl.grad_ranks());
  const size_t share = std::min(owned, (owned + replicas - 1) / replicas + static_cast<size_t>(formats::kSplitElems));
  return 3 * share * sizeof(float);
}

MemoryPlan plan_rank(MemoryPlan p, int rank, const model::PipelineStage& stage) {
  const ParallelPlan& pl = p.parallel;
  p.rank = rank;
  auto add = [&p](MemCategory c, size_t b) { p.bytes[static_cast<size_t>(c)] += b; };

  // GPT(cfg, micro_batch, seq_len): params, grads, activations and workspace
  // (parameters and gradients come from the gradient sync's storage when it
  // has one: the sharding engine, or half precision).
  const bool engine = pl.sharded_engine();
  const bool storage = engine || pl.compute != DType::f32;
  const int pp_rank = pl.pp_rank(rank);
  // Under context parallelism the model holds seq_len / CP tokens of each sequence.
  const int64_t T = pl.seq_len / pl.cp.degree;
  const context::RingShape rs{pl.micro_batch, T, p.config.n_embd / pl.tp.degree, p.config.n_head / pl.tp.degree,
                               pl.precision().operands, pl.precision().operands, pl.seq_len,
                               p.config.kv_heads() / pl.tp.degree};
  const size_t ring = pl.cp.degree == 1       ? 0
                      : pl.cp.comm == "a2a" ? context::ulysses_attention_scratch_floats(rs, pl.cp.degree)
                                              : context::ring_attention_scratch_floats(rs);
  const model::GPTMemoryPlan g =
      model::memory_plan(p.config, pl.micro_batch, T, !storage, pl.tp.degree, pl.tp.sequence_parallel, pl.dropout,
                         stage, pl.recompute, pl.precision(), ring,
                         model::plans_fused_attention(p.config, pl.cp.degree > 1 || T >= kernels::kFusedAttentionMinT));
  p.num_params = g.num_params;
  for (size_t i = 0; i < kNumMemCategories; ++i)
    add(static_cast<MemCategory>(i), g.bytes(static_cast<MemCategory>(i)));
  // Pipeline: every rank that sends gradients upstream has the executor's ring.
  add(MemCategory::comm, PipelineExecutor::grad_ring_bytes(pl.pp.stages, pl.pp.virtual_stages, pp_rank,
                                                                      boundary_bytes(pl, p.config)));

  // Gradient sync: what the mode's sync allocates (DataParallelMode::plan_memory:
  // the sharding engine's or the buckets' buffers, a server's moments), the same
  // sizes they allocate.
  const BucketedConfig bucketed = bucketed_config(pl, p.config, stage);
  const ShardedConfig sharded = sharded_config(pl, stage);
  const SyncMemory sync = pl.dp.mode->plan_memory(
      {p.config, bucketed, sharded, pl.grad_ranks(), pl.dp.shard_degree, pl.grad_rank(rank), rank, g.num_params});
  for (size_t i = 0; i < kNumMemCategories; ++i) p.bytes[i] += sync.bytes[i];
  p.optimizer_elems = sync.optimizer_elems;
  if (sync.num_params > 0) p.num_params = sync.num_params;
  // AdamW m and v, f32 each.
  add(MemCategory::optimizer, 2 * p.optimizer_elems * sizeof(float));
  add(MemCategory::staging, staging_bytes(p, pl));
  // Trainer's tokens and targets: (micro_batch, seq_len) int32 each.
  add(MemCategory::activations, 2 * static_cast<size_t>(pl.micro_batch * pl.seq_len) * sizeof(int32_t));
  return p;
}

}  // namespace

std::string format_ledger_line(const MemoryPlan& p) {
  std::ostringstream os;
  for (size_t i = 0; i < kNumMemCategories; ++i) {
    os << mem_category_name(static_cast<MemCategory>(i)) << "="
       << format_bytes(static_cast<double>(p.bytes[i]));
    if (i + 1 < kNumMemCategories) os << " ";
  }
  os << " total=" << format_bytes(static_cast<double>(p.total()));
  return os.str();
}

namespace {
std::string cell(size_t bytes) {
  char s[48];
  std::snprintf(s, sizeof s, "%zu (%.2f MiB)", bytes, static_cast<double>(bytes) / (1024.0 * 1024.0));
  return s;
}
}  // namespace

std::string format_plan_table(const std::vector<MemoryPlan>& plans) {
  // One row per category, one column per rank: exact bytes and MiB.
  std::ostringstream os;
  char s[64];
  std::snprintf(s, sizeof s, "%-14s", "category");
  os << s;
  for (const auto& p : plans) {
    std::snprintf(s, sizeof s, " %27s", ("rank " + std::to_string(p.rank)).c_str());
    os << s;
  }
  os << "\n";
  auto row = [&](const char* name, auto get) {
    std::snprintf(s, sizeof s, "%-14s", name);
    os << s;
    for (const auto& p : plans) {
      std::snprintf(s, sizeof s, " %27s", cell(get(p)).c_str());
      os << s;
    }
    os << "\n";
  };
  for (size_t i = 0; i < kNumMemCategories; ++i)
    row(mem_category_name(static_cast<MemCategory>(i)), [i](const MemoryPlan& p) { return p.bytes[i]; });
  row("total", [](const MemoryPlan& p) { return p.total(); });
  return os.str();
}

ZeroFormula zero_formula(const ParallelPlan& pl, size_t psi, int N) {
  // Bytes per element: compute params p, grads g, master + moments K. fp32 has
  // no separate master copy (p = g = 4, K = 8); mixed precision p = 2, K = 12,
  // and g = 2 with a half-precision gradient reduce (Rajbhandari et al. 2020,
  // sec. 3.1 and Fig. 1) or 4 with the fp32 reduce (braid's default).
  const bool half = pl.compute != DType::f32;
  const double P = half ? 2 : 4, G = static_cast<double>(dtype_size(pl.reduce)), K = half ? 12 : 8;
  const int stage = pl.dp.zero_stage;
  const double S = static_cast<double>(psi), n = static_cast<double>(N);
  ZeroFormula f;
  char txt[96];
  const char* k = half ? "12" : "8";
  switch (stage) {
    case 0:
      f.bytes = (P + G + K) * S;
      std::snprintf(txt, sizeof txt, "(%g+%g+%s) Psi", P, G, k);
      break;
    case 1:
      f.bytes = (P + G) * S + K * S / n;
      std::snprintf(txt, sizeof txt, "%g Psi + %s Psi/N", P + G, k);
      break;
    case 2:
      f.bytes = P * S + (G + K) * S / n;
      std::snprintf(txt, sizeof txt, "%g Psi + (%g+%s) Psi/N", P, G, k);
      break;
    default:
      f.bytes = (P + G + K) * S / n;
      std::snprintf(txt, sizeof txt, "(%g+%g+%s) Psi/N", P, G, k);
  }
  f.text = txt;
  return f;
}

std::string format_zero_formulas(const std::vector<MemoryPlan>& plans) {
  std::ostringstream os;
  if (plans.empty()) return "";
  const MemoryPlan& p0 = plans[0];
  // N: the ranks one copy of the sharded state spans (the DP group, or an HSDP shard group).
  const ParallelPlan& pl = p0.parallel;
  const int S = pl.dp.shard_degree;
  const int stage = pl.dp.zero_stage;
  const ZeroFormula f = zero_formula(pl, p0.num_params, S);
  std::string precision = p0.options.precision;
  if (pl.compute != DType::f32) precision += pl.reduce == DType::f32 ? " with fp32 gradients" : " with " + precision + " gradients";
  char s[400];
  std::snprintf(s, sizeof s,
                "model states per rank, ZeRO stage %d in %s (Psi = %zu elements incl. alignment gaps, "
                "N = %d sharding ranks): %s = %.0f bytes (%s)\n",
                stage, precision.c_str(), p0.num_params, S, f.text.c_str(), f.bytes,
                format_bytes(f.bytes).c_str());
  os << s;
  for (const auto& p : plans) {
    // Pipeline stages hold different layers: each rank's formula takes its own Psi.
    const double got = static_cast<double>(p.model_state_bytes());
    const double want = zero_formula(pl, p.num_params, S).bytes;
    const std::string psi = p.num_params == p0.num_params ? "" : " (Psi = " + std::to_string(p.num_params) + ")";
    std::snprintf(s, sizeof s,
                  "  predicted rank %d%s: params + master + grads + optimizer = %zu bytes (%s), "
                  "%+.0f bytes (%+.4f%%) vs the formula (shard padding)\n",
                  p.rank, psi.c_str(), p.model_state_bytes(), format_bytes(got).c_str(), got - want,
                  100.0 * (got - want) / want);
    os << s;
  }
  return os.str();
}

}  // namespace braid::parallel
