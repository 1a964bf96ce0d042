#include "braid/parallel/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "braid/core/error.h"
#include "braid/parallel/placement.h"

namespace braid::parallel {

namespace {

bool is_ps(const LayoutOptions& o) { return o.dp_mode == "ps"; }

// The DP degree the ranks leave once TP, CP and PP are placed (workers under a PS).
int derived_dp(const LayoutOptions& o, int world_size) {
  // 64-bit: the degrees are not validated yet and may be huge.
  const int64_t model_ranks = std::max<int64_t>(1, int64_t{o.tp} * std::max(1, o.cp) * o.pp);
  return is_ps(o) ? world_size - 1 : static_cast<int>(world_size / model_ranks);
}

// The data-parallel flags as the mode registry reads them: the engine's group
// is DP x CP (the CP ranks of a DP rank hold the same parameters).
DataParallelFlags dp_flags(const LayoutOptions& o, int world_size) {
  return {o.dp_mode, o.zero, o.fsdp, o.fsdp_shard_size, o.precision, o.tp, o.pp, world_size,
          derived_dp(o, world_size) * std::max(1, o.cp)};
}

// --dp-mode, the parameter server, ZeRO and FSDP flags on their own; then the
// rules of the mode they select.
void validate_data_parallel_flags(const LayoutOptions& o, int world_size) {
  BRAID_CONFIG_CHECK(o.dp >= 0, "--dp ", o.dp, " must be >= 0 (0 means all ranks)");
  BRAID_CONFIG_CHECK(o.dp_mode == "ddp" || o.dp_mode == "ps", "--dp-mode '", o.dp_mode,
                     "' is not known; use ddp or ps");
  const bool ps = is_ps(o);
  BRAID_CONFIG_CHECK(!o.ps_async || ps, "--ps-async needs --dp-mode ps");
  BRAID_CONFIG_CHECK(o.staleness >= 0, "--staleness ", o.staleness, " must be >= 0");
  BRAID_CONFIG_CHECK(o.staleness == 0 || o.ps_async, "--staleness ", o.staleness,
                     " only applies to --dp-mode ps --ps-async; add --ps-async or drop it");
  BRAID_CONFIG_CHECK(o.zero >= 0 && o.zero <= 3, "--zero ", o.zero,
                     " is not a ZeRO stage; use 0 (DDP), 1 (optimizer states sharded), 2 (+ gradients) or 3 "
                     "(+ parameters)");
  BRAID_CONFIG_CHECK(!o.fsdp || o.zero == 0 || o.zero == 3, "--fsdp shards parameters, gradients "
                     "and optimizer states (stage 3 by unit) but --zero ", o.zero,
                     " was also given; drop --zero or use --zero 3");
  BRAID_CONFIG_CHECK(o.fsdp_shard_size >= 0, "--fsdp-shard-size ", o.fsdp_shard_size, " must be >= 0");
  BRAID_CONFIG_CHECK(o.fsdp_shard_size == 0 || o.fsdp, "--fsdp-shard-size ", o.fsdp_shard_size,
                     " (hybrid sharding) needs --fsdp");
  parallel::resolve_data_parallel_mode(dp_flags(o, world_size));
}

// The degrees multiply to the world size; --dp and --fsdp-shard-size fit them.
void validate_degrees(const LayoutOptions& o, int world_size) {
  BRAID_CONFIG_CHECK(o.tp >= 1, "--tp ", o.tp, " must be >= 1");
  BRAID_CONFIG_CHECK(o.cp >= 1, "--cp ", o.cp, " must be >= 1");
  BRAID_CONFIG_CHECK(o.cp == 1 || (world_size % (int64_t{o.tp} * o.cp) == 0 && int64_t{o.tp} * o.cp * o.pp <= world_size),
                     "--tp ", o.tp, " x --cp ", o.cp, " x --pp ", o.pp, " does not fit the ", world_size,
                     " ranks of the job; the product of the parallel degrees must divide the number of ranks");
  BRAID_CONFIG_CHECK(o.pp >= 1, "--pp ", o.pp, " must be >= 1");
  BRAID_CONFIG_CHECK(int64_t{o.tp} * o.pp <= world_size, "--tp ", o.tp, " x --pp ", o.pp, " needs at least ",
                     int64_t{o.tp} * o.pp, " ranks but the job has ", world_size);
  BRAID_CONFIG_CHECK(world_size % (o.tp * o.pp) == 0, "--tp ", o.tp, " x --pp ", o.pp,
                     " does not divide the ", world_size, " ranks of the job; the product of the "
                     "parallel degrees must divide the number of ranks");
  BRAID_CONFIG_CHECK(world_size % o.tp == 0, "--tp ", o.tp, " does not divide the ", world_size,
                     " ranks of the job; use a TP degree that divides it (TP groups are ",
                     "consecutive ranks, so keep them inside a node)");
  const bool ps = is_ps(o);
  const int ranks_for_dp = derived_dp(o, world_size);
  const int dp = o.dp == 0 ? ranks_for_dp : o.dp;
  BRAID_CONFIG_CHECK(dp == ranks_for_dp, "--dp ", o.dp, o.tp > 1 ? " x --tp " + std::to_string(o.tp) : "",
                     o.pp > 1 ? " x --pp " + std::to_string(o.pp) : "",
                     " but the job has ", world_size, " ranks",
                     ps ? " (1 server + workers)" : "",
                     "; the product of the parallel degrees must equal the number of "
                     "ranks (launch with mpirun -np ", ps ? int64_t{dp} + 1 : int64_t{dp} * o.tp * o.pp, ", or pass --dp ",
                     ranks_for_dp, ")");
  // HSDP shards within S consecutive ranks of the gradient group (DP x CP).
  const int grad = dp * std::max(1, o.cp);
  BRAID_CONFIG_CHECK(o.fsdp_shard_size == 0 || (o.fsdp_shard_size <= grad && grad % o.fsdp_shard_size == 0),
                     "--fsdp-shard-size ", o.fsdp_shard_size, " must divide the ", grad,
                     o.cp > 1 ? " DP x CP ranks" : " data-parallel ranks",
                     " (shard within groups of S, replicate across the groups); use a divisor of ", grad);
}

// Context parallelism: the sequence splits into 2 CP equal chunks; the
// parameter server has no grid for a CP group.
void validate_context_parallel(const LayoutOptions& o, const model::GPTConfig& cfg) {
  if (o.cp == 1) return;
  BRAID_CONFIG_CHECK(o.cp_comm == "ring" || o.cp_comm == "a2a", "--cp-comm '", o.cp_comm,
                     "' is not known; use ring or a2a");
  // a2a: each rank attends a 1/CP share of its TP rank's heads over whole sequences.
  const int64_t heads = o.tp >= 1 && cfg.n_head % o.tp == 0 ? cfg.n_head / o.tp : 0;
  BRAID_CONFIG_CHECK(o.cp_comm != "a2a" || (heads > 0 && heads % o.cp == 0), "--cp-comm a2a turns the sequence "
                     "split into a head split, but the ", heads, " heads of each TP rank (n_head ", cfg.n_head,
                     " / TP ", o.tp, ") do not divide over CP=", o.cp, "; use an --n-head that CP x TP = ",
                     int64_t{o.cp} * o.tp, " divides, or --cp-comm ring");
  const int64_t kv = o.tp >= 1 && cfg.kv_heads() % o.tp == 0 ? cfg.kv_heads() / o.tp : 0;
  BRAID_CONFIG_CHECK(o.cp_comm != "a2a" || (kv > 0 && kv % o.cp == 0), "--cp-comm a2a turns the sequence "
                     "split into a head split, but the ", kv, " key/value heads of each TP rank (n_kv_head ",
                     cfg.kv_heads(), " / TP ", o.tp, ") do not divide over CP=", o.cp, "; use an --n-kv-head that CP x TP = ",
                     int64_t{o.cp} * o.tp, " divides, or --cp-comm ring");
  const int64_t chunks = 2 * int64_t{o.cp};
  BRAID_CONFIG_CHECK(chunks <= o.seq_len, "--cp ", o.cp, ": a sequence of ", o.seq_len, " tokens cannot split into ",
                     "2 x CP = ", chunks, " chunks of at least one token; use a --cp of at most ", o.seq_len / 2);
  // The suggestion stays within the block: the multiple of 2 CP at or below the length.
  BRAID_CONFIG_CHECK(o.seq_len % chunks == 0, "--cp ", o.cp, ": a sequence of ", o.seq_len,
                     " tokens does not split into 2 x CP = ", chunks, " equal chunks; use a --seq-len that ", chunks,
                     " divides (for example ", o.seq_len / chunks * chunks, ")");
  BRAID_CONFIG_CHECK(!is_ps(o), "--cp ", o.cp, " with --dp-mode ps: the parameter server's workers are whole "
                     "ranks, each training whole sequences, so there is no group to split a sequence over; drop "
                     "--cp or use --dp-mode ddp");
}

void validate_tensor_parallel(const LayoutOptions& o, const model::GPTConfig& cfg) {
  BRAID_CONFIG_CHECK(!o.sequence_parallel || o.tp > 1, "--sequence-parallel shards over the TP "
                     "group and needs --tp > 1");
  model::validate_tp(cfg, o.tp);
}

// Layers per virtual pipeline stage: --pp-layers, or an even split (the first
// stages take the remainder).
std::vector<int64_t> stage_layers(const LayoutOptions& o, const model::GPTConfig& cfg) {
  std::vector<int64_t> n;
  const int64_t Q = int64_t{o.pp} * o.virtual_stages;  // virtual stages
  BRAID_CONFIG_CHECK(Q <= cfg.n_layer, "--pp ", o.pp, " x --virtual-stages ", o.virtual_stages, " = ", Q,
                     " stages exceed the ", cfg.n_layer, " layers of model '", cfg.name,
                     "'; every stage needs at least one layer: use fewer stages or --n-layer ", Q, " or more");
  if (o.pp_layers.empty()) {
    for (int64_t s = 0; s < Q; ++s) n.push_back(cfg.n_layer / Q + (s < cfg.n_layer % Q ? 1 : 0));
    return n;
  }
  // Comma-separated decimal counts; spaces around a count are allowed, nothing else.
  int64_t total = 0;
  size_t pos = 0;
  for (;;) {
    const size_t comma = o.pp_layers.find(',', pos);
    std::string item = o.pp_layers.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const size_t a = item.find_first_not_of(' '), b = item.find_last_not_of(' ');
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
    const bool digits = !item.empty() && item.size() <= 9 &&
                        item.find_first_not_of("0123456789") == std::string::npos;
    const int64_t v = digits ? std::stoll(item) : 0;
    BRAID_CONFIG_CHECK(v >= 1 && v <= cfg.n_layer, "--pp-layers '", o.pp_layers, "': '", item,
                       "' is not a layer count in [1, ", cfg.n_layer, "]");
    n.push_back(v);
    total += v;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  BRAID_CONFIG_CHECK(static_cast<int64_t>(n.size()) == Q && total == cfg.n_layer, "--pp-layers '",
                     o.pp_layers, "' gives ", n.size(), " stages with ", total, " layers, but --pp ",
                     o.pp, o.virtual_stages > 1 ? " x --virtual-stages " + std::to_string(o.virtual_stages) : "",
                     " needs ", Q, " and model '", cfg.name, "' has ", cfg.n_layer,
                     " layers; list one count per ", o.virtual_stages > 1 ? "virtual stage" : "stage",
                     ", summing to ", cfg.n_layer, " (every layer built exactly once)");
  return n;
}

// "interleaved or zb-v": the schedules that run several chunks per rank.
std::string chunked_schedules() {
  std::string s;
  for (const auto& d : parallel::schedules())
    if (d.chunks != 1) s += (s.empty() ? "" : " or ") + std::string(d.name);
  return s;
}

void validate_pipeline(const LayoutOptions& o, const model::GPTConfig& cfg) {
  BRAID_CONFIG_CHECK(o.pp > 1 || (o.virtual_stages == 1 && o.pp_layers.empty()),
                     o.virtual_stages != 1 ? "--virtual-stages" : "--pp-layers",
                     " splits the layers over pipeline stages; it needs --pp > 1");
  const auto& def = parallel::find_schedule(o.schedule);
  model::parse_recompute(o.recompute);
  if (o.pp == 1) return;
  BRAID_CONFIG_CHECK(o.virtual_stages >= 1, "--virtual-stages ", o.virtual_stages, " must be >= 1");
  BRAID_CONFIG_CHECK(o.virtual_stages == 1 || def.chunks != 1, "--virtual-stages ", o.virtual_stages,
                     " needs --schedule ", chunked_schedules(), " (now ", o.schedule, ")");
  BRAID_CONFIG_CHECK(def.chunks <= 1 || o.virtual_stages == def.chunks, "--schedule ", o.schedule, " runs ",
                     def.chunks, " model chunks per stage; use --virtual-stages ", def.chunks, " (or leave it out)");
  const std::string refused = def.refuse ? def.refuse({o.recompute}) : "";
  BRAID_CONFIG_CHECK(refused.empty(), refused);
  stage_layers(o, cfg);
}

void validate_precision(const LayoutOptions& o) {
  BRAID_CONFIG_CHECK(o.precision == "fp32" || o.precision == "bf16" || o.precision == "fp16",
                     "--precision '", o.precision, "' is not known; use fp32, bf16 or fp16");
  BRAID_CONFIG_CHECK(o.reduce_dtype == "fp32" || o.reduce_dtype == o.precision, "--reduce-dtype ", o.reduce_dtype,
                     " with --precision ", o.precision, ": gradients are reduced in fp32 (the default) or in the "
                     "compute precision; use --reduce-dtype fp32",
                     o.precision == "fp32" ? "" : " or --reduce-dtype " + o.precision);
}

// The dropout probability and the gradient buckets' size.
void validate_tuning(const LayoutOptions& o) {
  BRAID_CONFIG_CHECK(o.dropout >= 0 && o.dropout < 1, "--dropout ", o.dropout, " must be in [0, 1)");
  BRAID_CONFIG_CHECK(o.bucket_mb > 0 && o.bucket_mb <= 65536, "--bucket-mb ", o.bucket_mb,
                     " must be in (0, 65536]");
}

// Batch and sequence sizes against the DP degree and the model.
void validate_batch(const LayoutOptions& o, int dp, const model::GPTConfig& cfg) {
  BRAID_CONFIG_CHECK(o.micro_batch > 0 && o.global_batch > 0, "--batch ", o.global_batch,
                     " and --micro-batch ", o.micro_batch, " must be positive");
  // dp x micro-batch, when it fits in 64 bits (--ranks and --micro-batch may be huge).
  const bool fits = o.micro_batch <= std::numeric_limits<int64_t>::max() / std::max(1, dp);
  const std::string product = fits ? std::to_string(int64_t{dp} * o.micro_batch) : "more than 2^63";
  BRAID_CONFIG_CHECK(fits && o.global_batch % (int64_t{dp} * o.micro_batch) == 0,
                     "global batch ", o.global_batch, " is not divisible by dp (", dp,
                     ") x micro-batch (", o.micro_batch, ") = ", product, "; use a --batch that is a multiple of ",
                     fits ? product : "dp x micro-batch",
                     " or change --micro-batch (--micro-batch auto picks the largest that divides)");
  BRAID_CONFIG_CHECK(o.seq_len > 0 && o.seq_len <= cfg.block_size, "--seq-len ", o.seq_len,
                     " must be in [1, ", cfg.block_size, "] (block_size of model '", cfg.name,
                     "'); pass --seq-len ", cfg.block_size, " or less, or --block-size ", o.seq_len,
                     " for a longer context");
}

// --micro-batches m > 0 sets micro_batch = batch / (dp x m).
void apply_micro_batches(LayoutOptions& o, int world_size) {
  BRAID_CONFIG_CHECK(o.micro_batches >= 0, "--micro-batches ", o.micro_batches,
                     " must be >= 1 (or 0: derived from --batch and --micro-batch)");
  if (o.micro_batch == kMicroBatchAuto) {
    const int64_t dp = std::max(1, derived_dp(o, world_size));
    BRAID_CONFIG_CHECK(o.global_batch > 0 && o.global_batch % dp == 0, "--micro-batch auto: --batch ", o.global_batch,
                       " does not split over the ", dp, " data-parallel ranks; use a multiple of ", dp);
    const int64_t per_rank = o.global_batch / dp, stages = std::max(1, o.pp);
    int64_t b = std::min(per_rank, kMicroBatchAutoMax);
    while (b > 1 && (per_rank % b != 0 || per_rank / b < stages)) --b;
    o.micro_batch = b;
  }
  if (o.micro_batches == 0) return;
  const int64_t dp = std::max(1, derived_dp(o, world_size));
  BRAID_CONFIG_CHECK(o.global_batch % dp == 0, "--batch ", o.global_batch, " does not split over the ", dp,
                     " data-parallel ranks; use a multiple of ", dp);
  BRAID_CONFIG_CHECK(o.global_batch % (dp * o.micro_batches) == 0,
                     "--micro-batches ", o.micro_batches, " does not divide the ", o.global_batch / dp,
                     " sequences per DP rank (--batch ", o.global_batch, " over dp ", dp,
                     "); choose a divisor");
  o.micro_batch = o.global_batch / (dp * o.micro_batches);
}

DataParallelPlan data_parallel_plan(const LayoutOptions& o, int world_size) {
  const DataParallelFlags flags = dp_flags(o, world_size);
  DataParallelPlan d;
  d.degree = derived_dp(o, world_size);  // the batch's split; the engine's group is DP x CP (flags.dp)
  d.mode = &parallel::resolve_data_parallel_mode(flags);
  d.zero_stage = d.mode->zero_stage;
  d.shard_degree = d.mode->shard_degree(flags);
  d.ps_async = o.ps_async;
  d.staleness = o.staleness;
  d.bucket_bytes = static_cast<size_t>(o.bucket_mb * 1024 * 1024);
  d.overlap = o.overlap;
  d.zero_copy = o.zero_copy;
  return d;
}

}  // namespace

void validate_layout(const LayoutOptions& o, int world_size, const model::GPTConfig& cfg) {
  validate_data_parallel_flags(o, world_size);
  validate_context_parallel(o, cfg);
  validate_degrees(o, world_size);
  validate_tensor_parallel(o, cfg);
  validate_pipeline(o, cfg);
  validate_precision(o);
  validate_batch(o, derived_dp(o, world_size), cfg);
  validate_tuning(o);
}

model::GPTConfig model_config(const LayoutOptions& o) {
  if (o.checkpoint_model) {
    o.checkpoint_model->validate();
    return *o.checkpoint_model;
  }
  model::GPTConfig c = model::GPTConfig::preset(o.model);
  BRAID_CONFIG_CHECK(o.vocab_size >= 0 && o.n_layer >= 0 && o.n_head >= 0 && o.n_embd >= 0 && o.block_size >= 0,
                     "--vocab-size, --n-layer, --n-head, --n-embd and --block-size must be >= 0 (0 keeps the preset)");
  if (o.vocab_size > 0) c.vocab_size = o.vocab_size;
  if (o.n_layer > 0) c.n_layer = o.n_layer;
  if (o.n_head > 0) c.n_head = o.n_head;
  if (o.n_embd > 0) c.n_embd = o.n_embd;
  if (o.block_size > 0) c.block_size = o.block_size;
  BRAID_CONFIG_CHECK(o.n_kv_head >= 0 && o.mlp_hidden >= 0 && o.rope_theta >= 0,
                     "--n-kv-head, --mlp-hidden and --rope-theta must be >= 0 (0 keeps the preset)");
  if (o.n_kv_head > 0) c.n_kv_head = o.n_kv_head;
  if (o.mlp_hidden > 0) c.mlp_hidden = o.mlp_hidden;
  if (o.rope_theta > 0) {
    BRAID_CONFIG_CHECK(c.positions == model::PositionKind::rope, "--rope-theta ", o.rope_theta, ": model '", o.model,
                       "' has learned positions, not rotary ones; use a llama preset");
    c.rope_theta = o.rope_theta;
  }
  c.padded_vocab_size = model::GPTConfig::pad_vocab(c.vocab_size);
  c.name = c.name_from(o.model);
  c.validate();
  return c;
}

ParallelPlan resolve_plan(LayoutOptions& o, int world_size, const model::GPTConfig& cfg) {
  BRAID_CONFIG_CHECK(world_size >= 1, "--ranks ", world_size, " must be >= 1");
  if (o.seq_len == 0) o.seq_len = std::min<int64_t>(128, cfg.block_size);
  apply_micro_batches(o, world_size);
  const comm::NodeMap nodes = world_nodes(o, world_size);
  resolve_node_shard_size(o, world_size, nodes);
  // A schedule with a fixed chunk count (zb-v: 2) takes it when --virtual-stages is left at 1.
  for (const auto& d : parallel::schedules())
    if (o.pp > 1 && o.schedule == d.name) o.virtual_stages = parallel::schedule_chunks(d, o.virtual_stages);
  validate_layout(o, world_size, cfg);
  ParallelPlan p;
  p.world = world_size;
  p.dp = data_parallel_plan(o, world_size);
  p.tp = {o.tp, o.sequence_parallel};
  p.cp = {o.cp, o.cp_comm};
  p.pp.stages = o.pp;
  p.pp.virtual_stages = o.virtual_stages;
  // Without a pipeline the step is the one-stage program (1F1B with P = 1).
  p.pp.schedule = &parallel::find_schedule(o.pp > 1 ? o.schedule : "1f1b");
  p.pp.micro_batches = static_cast<int>(o.global_batch / (static_cast<int64_t>(p.dp.degree) * o.micro_batch));
  p.pp.layers = o.pp > 1 ? stage_layers(o, cfg) : std::vector<int64_t>{cfg.n_layer};
  p.pp.tied_head = cfg.tied_head;
  p.compute = o.precision == "bf16" ? DType::bf16 : o.precision == "fp16" ? DType::f16 : DType::f32;
  p.reduce = o.reduce_dtype == "fp32" ? DType::f32 : p.compute;
  p.half_matmuls = o.matmul_precision == "half";
  p.fp32_residual = o.fp32_residual;
  p.recompute = model::parse_recompute(o.recompute);
  p.global_batch = o.global_batch;
  p.micro_batch = o.micro_batch;
  p.seq_len = o.seq_len;
  p.dropout = o.dropout;
  p.algo = o.algo;
  p.nodes = nodes;
  check_tp_placement(p, o.tp_across_nodes);
  return p;
}

std::vector<parallel::StageProgram> PipelinePlan::programs(parallel::ScheduleStats* stats) const {
  auto prog = parallel::build_schedule(*schedule, stages, micro_batches, virtual_stages);
  auto st = parallel::check_schedule(prog, map(), micro_batches);
  if (stats) *stats = std::move(st);
  return prog;
}

model::PipelineStage PipelinePlan::stage(int pp_rank) const {
  if (stages == 1) return {};
  ScheduleStats st;
  programs(&st);
  return stage(pp_rank, st);
}

model::PipelineStage PipelinePlan::stage(int pp_rank, const ScheduleStats& st) const {
  if (stages == 1) return {};
  model::PipelineStage out;
  const parallel::StageMap where = map();
  for (int c = 0; c < virtual_stages; ++c) {
    const int q = where.stage(pp_rank, c);  // increasing in c: chunks in layer order
    model::PipelineChunk ch;
    ch.first_layer = 0;
    for (int i = 0; i < q; ++i) ch.first_layer += layers[static_cast<size_t>(i)];
    ch.last_layer = ch.first_layer + layers[static_cast<size_t>(q)];
    ch.slots = std::max(1, st.peak_in_flight_chunk[static_cast<size_t>(pp_rank)][static_cast<size_t>(c)]);
    out.chunks.push_back(ch);
  }
  return out;
}

bool ParallelPlan::sharded_engine() const { return dp.mode->sharded_engine; }

RankGrid ParallelPlan::grid() const {
  if (dp.parameter_server()) return RankGrid(world, 1, world, 1);
  return RankGrid(world, tp.degree, dp.degree * cp.degree, pp.stages);
}

int ParallelPlan::grad_rank(int rank) const { return dp.parameter_server() ? rank - 1 : grid().coord(rank).dp; }
int ParallelPlan::dp_rank(int rank) const {
  return dp.parameter_server() ? rank - 1 : grid().coord(rank).dp / cp.degree;
}
int ParallelPlan::cp_rank(int rank) const { return dp.parameter_server() ? 0 : grid().coord(rank).dp % cp.degree; }
int ParallelPlan::tp_rank(int rank) const { return dp.parameter_server() ? 0 : grid().coord(rank).tp; }
int ParallelPlan::pp_rank(int rank) const { return dp.parameter_server() ? 0 : grid().coord(rank).pp; }

std::string ParallelPlan::describe() const {
  std::string s = "dp=" + std::to_string(dp.degree);
  if (tp.degree > 1) s += " x tp=" + std::to_string(tp.degree) + (tp.sequence_parallel ? "+sp" : "");
  if (cp.degree > 1) s += " x cp=" + std::to_string(cp.degree) + " (" + cp.comm + ")";
  if (pp.stages > 1) {
    s += " x pp=" + std::to_string(pp.stages) + " (" + pp.schedule->name;
    if (pp.virtual_stages > 1) s += ", v=" + std::to_string(pp.virtual_stages);
    s += ")";
  }
  if (dp.parameter_server()) s += dp.ps_async ? " + async parameter server" : " + parameter server";
  s += ", zero=" + std::to_string(dp.zero_stage);
  if (dp.mode->unit_sharding) s += std::string(", ") + dp.mode->name;
  if (dp.mode->shard_groups) s += " (shard groups of " + std::to_string(dp.shard_degree) + ")";
  s += compute == DType::f32 ? ", fp32" : compute == DType::bf16 ? ", bf16" : ", fp16";
  if (compute == DType::f32) return s;
  s += reduce == DType::f32 ? " (fp32 gradients" : " (half-precision gradients";
  // Where the activations live (memory_plan): in the compute dtype unless --matmul-precision fp32.
  const model::Precision pr = precision();
  s += std::string(", activations stored in ") + (pr.operands == DType::f32 ? "f32" : dtype_name(pr.operands));
  if (pr.fp32_residual) s += ", residual stream in f32";
  return s + ")";
}

size_t boundary_bytes(const ParallelPlan& p, const model::GPTConfig& cfg) {
  // A rank holds seq_len / CP tokens of each sequence (context parallelism).
  const int64_t rows = p.micro_batch * (p.seq_len / p.cp.degree) / (p.tp.sequence_parallel ? p.tp.degree : 1);
  return static_cast<size_t>(rows * cfg.n_embd) * sizeof(float);
}

BucketedConfig bucketed_config(const ParallelPlan& p, const model::GPTConfig& cfg, const model::PipelineStage& stage) {
  BucketedConfig bc;
  bc.stage = p.dp.zero_stage;
  bc.bucket_bytes = p.dp.bucket_bytes;
  bc.overlap = p.dp.overlap;
  bc.algo = p.algo;
  bc.zero_copy = p.dp.zero_copy;
  bc.compute = p.compute;
  bc.reduce = p.reduce;
  bc.model = cfg;
  bc.tp = p.tp.degree;
  bc.pipeline = stage;
  if (p.pp.stages > 1 && cfg.tied_head) {
    for (const auto& c : stage.resolved(cfg.n_layer))
      bc.tied_embedding = bc.tied_embedding || c.first_layer == 0 || c.last_layer == cfg.n_layer;
  }
  return bc;
}

ShardedConfig sharded_config(const ParallelPlan& p, const model::PipelineStage& stage) {
  ShardedConfig sc;
  sc.stage = p.dp.zero_stage;
  sc.fsdp = p.dp.mode->unit_sharding;
  sc.compute = p.compute;
  sc.reduce = p.reduce;
  sc.algo = p.algo;
  sc.zero_copy = p.dp.zero_copy;
  sc.tp = p.tp.degree;
  sc.pipeline = stage;
  return sc;
}

std::unique_ptr<GradSync> make_grad_sync(const ParallelPlan& plan, ParallelContext& ctx,
                                         const model::GPTConfig& cfg, const model::PipelineStage& stage,
                                         MemoryLedger* ledger) {
  const BucketedConfig bucketed = bucketed_config(plan, cfg, stage);
  const ShardedConfig sharded = sharded_config(plan, stage);
  return plan.dp.mode->make(
      {cfg, bucketed, sharded, ctx.world(), ctx.dp(), ctx.shard(), ctx.replicate(), ledger});
}

ParallelContext::ParallelContext(const ParallelPlan& plan, comm::Communicator& world)
    : world_(world), dp_(&world) {
  const int r = world.rank();
  const int tp = plan.tp.degree, pp = plan.pp.stages, cp = plan.cp.degree;
  if (tp > 1 || pp > 1 || cp > 1) {
    // The order of the splits is the same on every rank (each is collective).
    const RankGrid grid = plan.grid();
    if (tp > 1) tp_ = world.split(grid.tp_color(r), r);
    // A CP group: the same TP, DP and PP coordinates; its first member's rank names it.
    if (cp > 1) {
      cp_ = world.split(r - plan.cp_rank(r) * tp, r);
      cp_rank_ = cp_->rank();
    }
    dp_own_ = world.split(grid.dp_color(r), r);
    dp_ = dp_own_.get();
    if (tp_) tp_rank_ = tp_->rank();
    if (pp > 1) {
      pp_ = world.split(grid.pp_color(r), r);
      pp_rank_ = pp_->rank();
      // The tied embedding's copies: the ranks of the first and the last
      // virtual stage; none when one rank holds both (its unit 0 sums both)
      // or the head is untied (the last stage holds lm_head, no copy).
      const int first = plan.pp.first_rank(), last = plan.pp.last_rank();
      const bool ends = pp_rank_ == first || pp_rank_ == last;
      if (first != last && plan.pp.tied_head) emb_ = world.split(ends ? grid.pp_color(r) : world.size() + r, r);
      if (!ends) emb_.reset();
    }
  }
  dp_rank_ = plan.dp.parameter_server() ? r - 1 : dp_->rank() / cp;
  if (plan.hsdp()) {
    // Shard inside consecutive groups of S DP ranks, replicate across them.
    const int S = plan.dp.shard_degree;
    shard_ = dp_->split(dp_->rank() / S, dp_->rank());
    replicate_ = dp_->split(dp_->rank() % S, dp_->rank());
  }
  // The names of the groups' lanes in a trace.
  world.set_name(dp_ == &world ? "dp" : "world");
  const std::pair<comm::Communicator*, const char*> names[] = {{tp_.get(), "tp"},       {cp_.get(), "cp"},
                                                              {dp_own_.get(), "dp"},
                                                              {pp_.get(), "pp"},       {emb_.get(), "embedding"},
                                                              {shard_.get(), "shard"}, {replicate_.get(), "replicate"}};
  for (const auto& [c, name] : names)
    if (c) c->set_name(name);
}

void ParallelContext::set_span_sink(const std::shared_ptr<SpanSink>& sink) {
  world_.set_span_sink(sink);
  for (auto* c : {tp_.get(), cp_.get(), dp_own_.get(), shard_.get(), replicate_.get(), pp_.get(), emb_.get()})
    if (c) c->set_span_sink(sink);
}

ParallelContext::~ParallelContext() = default;

uint64_t ParallelContext::bytes_sent() const {
  uint64_t b = world_.bytes_sent();
  for (const auto* c : {tp_.get(), cp_.get(), dp_own_.get(), shard_.get(), replicate_.get(), pp_.get(), emb_.get()})
    if (c) b += c->bytes_sent();
  return b;
}

uint64_t ParallelContext::bytes_received() const {
  uint64_t b = world_.bytes_received();
  for (const auto* c : {tp_.get(), cp_.get(), dp_own_.get(), shard_.get(), replicate_.get(), pp_.get(), emb_.get()})
    if (c) b += c->bytes_received();
  return b;
}

}  // namespace braid::parallel
