#include "braid/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/check.h"
#include "braid/parallel/pipeline/schedule.h"
#include "braid/parallel/plan.h"

namespace braid::plan {

double ring_all_reduce(double n, int p, const Link& l) {
  return p <= 1 ? 0.0 : 2.0 * (p - 1) * (l.latency + n / (p * l.bandwidth));
}

double ring_all_gather(double n, int p, const Link& l) {
  return p <= 1 ? 0.0 : (p - 1) * (l.latency + n / (p * l.bandwidth));
}

double doubling_all_reduce(double n, int p, const Link& l) {
  return p <= 1 ? 0.0 : std::log2(static_cast<double>(p)) * (l.latency + n / l.bandwidth);
}

Placement place(int size, int stride, int accelerators_per_node) {
  Placement g;
  g.size = size;
  const int64_t span = static_cast<int64_t>(size - 1) * stride + 1;  // ranks from the first member to the last
  if (span <= accelerators_per_node && size > 0) {
    // Inside one node when the group's ranks are aligned (TP blocks, small DP groups).
    g.per_node = size, g.nodes = 1;
  } else {
    g.per_node = std::max(1, std::min(size, accelerators_per_node / std::max(1, stride)));
    g.nodes = (size + g.per_node - 1) / g.per_node;
  }
  return g;
}

namespace {

// A collective decomposed over a placed group: inside one node, a ring; across
// nodes, a ring over the shared inter-node links of the n/k bytes each member
// owns after the intra-node stage.
template <typename Ring>
double hierarchical(double n, const Placement& g, const Cluster& c, Ring ring, double intra_passes) {
  if (g.size <= 1) return 0.0;
  if (g.nodes == 1) return ring(n, g.size, c.intra_node);
  const Link inter = c.inter_node_per_accelerator();
  if (g.per_node == 1) return ring(n, g.nodes, inter);
  const double intra = intra_passes * ring_all_gather(n, g.per_node, c.intra_node);
  return intra + ring(n / g.per_node, g.nodes, inter);
}

}  // namespace

double all_reduce(double n, const Placement& g, const Cluster& c) {
  return hierarchical(n, g, c, ring_all_reduce, 2.0);  // reduce-scatter in, all-gather out
}

double all_gather(double n, const Placement& g, const Cluster& c) {
  return hierarchical(n, g, c, ring_all_gather, 1.0);
}

double megatron_flops_per_iteration(double B, double s, double l, double h, double V) {
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

BlockWidths BlockWidths::of(const model::GPTConfig& cfg) {
  const double h = static_cast<double>(cfg.n_embd), hid = static_cast<double>(cfg.hidden());
  BlockWidths w;
  w.matmul_weights = h * static_cast<double>(cfg.qkv_width()) + h * h + h * static_cast<double>(cfg.fc_width()) + hid * h;
  w.act_in = static_cast<double>(cfg.fc_width());
  w.act_out = hid;
  return w;
}

BlockWork block_forward_work(double b, double s, double h, double heads, int tp, double e, bool sp, bool dropout,
                             int cp, const BlockWidths& widths) {
  // Under context parallelism a rank holds s / cp tokens of each sequence and
  // attends them to all s keys.
  const double t = tp, tokens = b * s / cp, rows = sp ? tokens / t : tokens;
  const double weights = widths.matmul_weights > 0 ? widths.matmul_weights : 12.0 * h * h;
  const double act_in = widths.act_in > 0 ? widths.act_in : 4 * h, act_out = widths.act_out > 0 ? widths.act_out : 4 * h;
  BlockWork w;
  w.flops = (2.0 * tokens * weights + 4.0 * tokens * s * h) / t;
  const double drop = dropout ? 1.0 : 0.0;  // one mask byte per element
  const double replicated = rows * h * (2 * 2 * e + 2 * 3 * e + drop * 2 * (2 * e + 1));
  const double gelu = tokens * (act_in + act_out) / t * e;
  const double softmax = tokens * (heads / t) * s * (2 * e + drop * (2 * e + 1));
  w.bytes = replicated + gelu + softmax;
  return w;
}

double optimizer_bytes_per_element(DType compute, DType grad) {
  return 3 * 4 * 2 + 2.0 * static_cast<double>(dtype_size(grad)) +
         (compute == DType::f32 ? 0.0 : static_cast<double>(dtype_size(compute)));
}

namespace {

// Kernels one block's forward launches: two LayerNorms, four matmuls (QKV,
// output projection, MLP in and out), two batched attention matmuls, the
// softmax, GeLU, two bias-dropout-residual adds, dropout on the scores, the
// transposes of Q, K, V and of the context, and two TP collectives.
constexpr double kBlockKernels = 20;

// One micro-batch's work on one rank, split by what bounds it.
struct Work {
  double flops = 0;  // matmul FLOPs
  double bytes = 0;  // memory traffic of the element-wise kernels
  /// Backward's matmuls (input and weight gradients) run at their own rate.
  double seconds(const Cluster& c, DType t, bool backward = false) const {
    return flops / (backward ? c.backward_matmul_flops(t) : c.matmul_flops(t)) + bytes / c.memory_bandwidth;
  }
  Work& operator+=(const Work& o) {
    flops += o.flops, bytes += o.bytes;
    return *this;
  }
};
Work operator*(double k, Work w) { return {k * w.flops, k * w.bytes}; }

struct Shape {
  double b, s, h, a, V, t;  // micro-batch, sequence, width, heads, padded vocabulary, TP degree
  double e;                 // bytes per activation element (the compute dtype)
  bool sp, dropout;         // sequence parallel; dropout masks written and read
  double cp = 1;            // context-parallel degree: a rank holds s / cp tokens of a sequence
  double kv = 0;            // key/value width (n_kv_head x head size; h without grouped-query attention)
  BlockWidths widths;       // the block's matmul weights and MLP activation
  double tokens() const { return b * s / cp; }  // one rank's tokens of a micro-batch
};

Work block_forward(const Shape& x) {
  const BlockWork w =
      block_forward_work(x.b, x.s, x.h, x.a, static_cast<int>(x.t), x.e, x.sp, x.dropout, static_cast<int>(x.cp),
                         x.widths);
  return {w.flops, w.bytes};
}

// The head on the last stage, forward: logits 2bshV over TP, and the
// cross-entropy's three passes over the f32 logits (maximum, sum of
// exponentials, probabilities). Backward: twice the matmul FLOPs, and one pass
// that reads the probabilities and writes the logits' gradient.
Work head_forward(const Shape& x) {
  const double tokens = x.tokens();
  return {2.0 * tokens * x.h * x.V / x.t, tokens * x.V / x.t * 4 * 3};
}
Work head_backward(const Shape& x) {
  const double tokens = x.tokens();
  return {4.0 * tokens * x.h * x.V / x.t, tokens * x.V / x.t * 4 * 2};
}

// Activation bytes one TP collective of a block carries.
double tp_message(const Shape& x) { return x.tokens() * x.h * x.e; }

// Context-parallel attention over the CP group, seconds per micro-batch of one
// block. Ring:
// forward passes cp - 1 key/value blocks (2 of tokens x h/t elements) round the
// group, each hidden behind the attention on the block held (a 1/cp share of
// the block's attention FLOPs); backward passes them again with their f32
// gradients, which wait for the block's compute (not hidden).
struct RingCost {
  double forward = 0, backward = 0;
};
// All-to-all attention (--cp-comm a2a): each pass's all-to-alls send (cp - 1) /
// cp of what they carry, pairwise, not hidden: forward q, k, v (compute dtype)
// and the output (f32); backward dO (f32), O, and dq, dk, dv (f32).
RingCost all_to_all_cost(const Shape& x, const Link& link) {
  const double act = x.tokens() * x.h / x.t, share = (x.cp - 1) / x.cp;
  auto a2a = [&](double bytes) { return (x.cp - 1) * link.latency + share * bytes / link.bandwidth; };
  return {a2a(3 * act * x.e) + a2a(act * 4), a2a(act * 4) + a2a(act * x.e) + a2a(3 * act * 4)};
}

RingCost ring_cost(const Shape& x, const parallel::ParallelPlan& plan, const Cluster& c) {
  if (x.cp <= 1) return {};
  const Placement g = place(plan.cp.degree, plan.tp.degree, c.accelerators_per_node);
  const Link link = g.nodes > 1 ? c.inter_node_per_accelerator() : c.intra_node;
  if (plan.cp.comm == "a2a") return all_to_all_cost(x, link);
  const double kv = 2 * x.tokens() * x.kv / x.t, steps = x.cp - 1;  // grouped key/value heads travel less
  const double attend = 4.0 * x.tokens() * x.s * x.h / x.t / x.cp / c.matmul_flops(plan.compute);
  const double kv_s = link.time(kv * x.e);
  return {steps * std::max(0.0, kv_s - attend), steps * (std::max(0.0, kv_s - 2 * attend) + link.time(kv * 4))};
}

// Parameters one rank holds for its layers (TP-split matrices, replicated
// norms and biases of width h) and, on the end stages, the embeddings and
// the head (a tied head's copy of wte, or lm_head).
double rank_params(const model::GPTConfig& cfg, double layers, bool first, bool last, int t) {
  const double h = static_cast<double>(cfg.n_embd), norm = cfg.norm == model::NormKind::layernorm ? 2 : 1;
  // The biases counted whole on every rank (an upper bound; at TP = 1 exact).
  const double biases = cfg.bias ? static_cast<double>(cfg.qkv_width() + cfg.fc_width()) + 2 * h : 0;
  double p = layers * (BlockWidths::of(cfg).matmul_weights / t + 2 * norm * h + biases);
  const double vocab = static_cast<double>(cfg.padded_vocab_size) * h / t;
  if (first) p += vocab + (cfg.positions == model::PositionKind::learned ? static_cast<double>(cfg.block_size) * h : 0);
  if (last && (!first || !cfg.tied_head)) p += vocab;
  if (last) p += norm * h;
  return p;
}

// Seconds of one step's data-parallel traffic for a stage of `stage_params`
// parameters over m micro-batches: what the mode shards decides it
// (DataParallelMode::sharding).
double dp_sync_seconds(const parallel::ParallelPlan& plan, const Cluster& c, int m, double stage_params) {
  const int t = plan.tp.degree, d = plan.grad_ranks();  // gradients reduce over DP x CP
  const Placement dp_group = place(d, t, c.accelerators_per_node);
  const double grad_bytes = stage_params * static_cast<double>(dtype_size(plan.reduce));
  const double param_bytes = stage_params * static_cast<double>(dtype_size(plan.compute));
  const parallel::Sharding& held = plan.dp.mode->sharding;
  if (held.params == parallel::Holding::shard) {
    // Parameters gathered for forward and backward of every micro-batch over the
    // shard group (the DP group, or HSDP's S consecutive DP ranks), whose reduced
    // shards are then all-reduced across the d / S replicas.
    const int S = plan.dp.shard_degree;
    const Placement shard = place(S, t, c.accelerators_per_node);
    double s = all_gather(grad_bytes, shard, c) + m * 2 * all_gather(param_bytes, shard, c);
    if (S < d) s += all_reduce(grad_bytes / S, place(d / S, t * S, c.accelerators_per_node), c);
    return s;
  }
  // Bucket by bucket (--bucket-mb): each bucket's collective pays its own latency.
  // Gradients reduce-scattered to the optimizer's shards, parameters all-gathered.
  const double buckets = std::max(1.0, std::ceil(grad_bytes / static_cast<double>(plan.dp.bucket_bytes)));
  if (held.optimizer == parallel::Holding::shard)
    return buckets * (all_gather(grad_bytes / buckets, dp_group, c) + all_gather(param_bytes / buckets, dp_group, c));
  return buckets * all_reduce(grad_bytes / buckets, dp_group, c);
}

}  // namespace

namespace {

Shape shape_of(const parallel::ParallelPlan& plan, const model::GPTConfig& cfg, const parallel::LayoutOptions& opt) {
  return {static_cast<double>(plan.micro_batch), static_cast<double>(plan.seq_len), static_cast<double>(cfg.n_embd),
          static_cast<double>(cfg.n_head), static_cast<double>(cfg.padded_vocab_size),
          static_cast<double>(plan.tp.degree), static_cast<double>(dtype_size(plan.compute)),
          plan.tp.sequence_parallel, opt.dropout > 0, static_cast<double>(plan.cp.degree),
          static_cast<double>(cfg.kv_heads() * cfg.head_size()), BlockWidths::of(cfg)};
}

// One block on one rank, seconds per micro-batch.
struct BlockCost {
  double forward = 0, backward = 0;  // each with its TP collectives and kernel launches
  double tp_all_reduce = 0;          // one TP collective (= reduce-scatter + all-gather under SP)
  double recompute_comm = 0;         // full recomputation's repeated forward collectives
  double cp_comm = 0;                // ring attention's exposed transfers, forward + backward
};

// Forward, backward (twice the forward's matmuls) and recomputation of one block.
BlockCost block_cost(const Shape& x, const parallel::ParallelPlan& plan, const Cluster& c) {
  const DType ct = plan.compute;
  const bool full = plan.recompute == model::Recompute::full;
  const Work fwd = block_forward(x);
  Work recompute;
  if (full) recompute = fwd;
  if (plan.recompute == model::Recompute::selective)
    recompute = {4.0 * x.tokens() * x.s * x.h / x.t, x.tokens() * (x.a / x.t) * x.s * 2 * x.e};
  BlockCost k;
  const RingCost ring = ring_cost(x, plan, c);
  k.cp_comm = ring.forward + ring.backward;
  k.tp_all_reduce = all_reduce(tp_message(x), place(plan.tp.degree, 1, c.accelerators_per_node), c);
  k.recompute_comm = full ? 2 * k.tp_all_reduce : 0.0;
  // Each kernel a block launches also pays a fixed cost (launch and dispatch):
  // its forward runs kBlockKernels, backward twice as many.
  const double launch = kBlockKernels * c.kernel_overhead;
  k.forward = fwd.seconds(c, ct) + 2 * k.tp_all_reduce + ring.forward + launch;
  k.backward = (2.0 * fwd).seconds(c, ct, true) + recompute.seconds(c, ct) + 2 * k.tp_all_reduce +
               k.recompute_comm + ring.backward + (full ? ring.forward : 0.0) + (2 + (full ? 1 : 0)) * launch;
  return k;
}

// The pipeline stage with the most work per micro-batch: it sets the pace.
struct StageCost {
  double forward = 0, backward = 0;  // seconds per micro-batch
  double params = 0;                 // parameters one of its ranks holds
  double tp_comm = 0;                // seconds of TP collectives within forward + backward
  double cp_comm = 0;                // seconds of ring attention's exposed transfers within them
};

StageCost slowest_stage(const Shape& x, const parallel::ParallelPlan& plan, const model::GPTConfig& cfg,
                        const BlockCost& k, const Cluster& c) {
  const int P = plan.pp.stages, v = plan.pp.virtual_stages;
  const parallel::StageMap map = plan.pp.map();
  StageCost slowest;
  for (int s = 0; s < P; ++s) {
    double layers = 0;
    for (int j = 0; j < v; ++j) layers += static_cast<double>(plan.pp.layers[static_cast<size_t>(map.stage(s, j))]);
    const bool first = s == map.rank_of(0), last = s == map.rank_of(map.Q() - 1);
    double f = layers * k.forward, b = layers * k.backward;
    if (last) {
      f += head_forward(x).seconds(c, plan.compute);
      b += head_backward(x).seconds(c, plan.compute, true);
    }
    if (f + b > slowest.forward + slowest.backward) {
      slowest.forward = f, slowest.backward = b;
      slowest.tp_comm = layers * (4 * k.tp_all_reduce + k.recompute_comm);
      slowest.cp_comm = layers * k.cp_comm;
      slowest.params = rank_params(cfg, layers, first, last, plan.tp.degree);
    }
  }
  return slowest;
}

// Activations between stages, one way, as the executor sends them: each TP rank
// sends its activation to the same TP rank of the next stage, whole, or its 1/t of
// the rows under sequence parallelism (no scatter-gather). The TP ranks of a stage
// send at once, each over its share of the node's links. 0 without a pipeline.
double stage_transfer(const Shape& x, const parallel::ParallelPlan& plan, const Cluster& c) {
  if (plan.pp.stages <= 1) return 0;
  const int t = plan.tp.degree;
  const Placement next = place(2, t * plan.grad_ranks(), c.accelerators_per_node);
  const Link link = next.nodes > 1 ? c.inter_node_per_accelerator() : c.intra_node;
  const double n = tp_message(x);
  return link.time(plan.tp.sequence_parallel ? n / t : n);
}

// Seconds of compute the DP sync can hide behind. Buckets and prefetches run
// during backward only without a pipeline (a pipeline syncs after its flush);
// ZeRO-3's gathers hide behind all of compute. On a cluster whose
// communication shares the compute cores nothing is hidden.
double dp_hidden(const parallel::ParallelPlan& plan, const parallel::LayoutOptions& opt, const StageCost& st,
                 const Cluster& c) {
  if (!opt.overlap || plan.pp.stages != 1 || !c.comm_overlaps_compute) return 0;
  const bool gathers = plan.dp.mode->sharding.params == parallel::Holding::shard;
  return gathers ? plan.pp.micro_batches * (st.forward + st.backward) : st.backward;
}

// Tokens/s, model FLOPs (braid's MFU count: 6N + attention per token),
// TFLOP/s per computing accelerator and MFU of a step of r.step_s.
void add_throughput(StepPrediction& r, const Shape& x, const parallel::ParallelPlan& plan,
                    const model::GPTConfig& cfg, const Cluster& c) {
  const double tokens = static_cast<double>(plan.global_batch) * x.s;
  const double L = static_cast<double>(cfg.n_layer);
  const double per_token = 6.0 * (L * x.widths.matmul_weights + x.V * x.h) + 12.0 * L * x.h * x.s;
  r.tokens_per_s = tokens / r.step_s;
  r.model_flops = per_token * tokens;
  r.tflops_per_accelerator = r.model_flops / (r.step_s * plan.compute_ranks()) / 1e12;
  r.mfu = r.tflops_per_accelerator * 1e12 / c.peak_flops(plan.compute);
}

}  // namespace

StepPrediction predict_step(const parallel::LayoutOptions& options, int world, const Cluster& c, bool simulate) {
  parallel::LayoutOptions opt = options;
  const model::GPTConfig cfg = parallel::model_config(opt);
  const parallel::ParallelPlan plan = parallel::resolve_plan(opt, world, cfg);
  BRAID_CONFIG_CHECK(!plan.dp.parameter_server(), "braid plan does not model a parameter server (--dp-mode ps)");
  const int P = plan.pp.stages, v = plan.pp.virtual_stages, m = plan.pp.micro_batches;
  const Shape x = shape_of(plan, cfg, opt);
  const StageCost st = slowest_stage(x, plan, cfg, block_cost(x, plan, c), c);
  // Forward and backward each pay one transfer between stages; the schedule is
  // simulated with these costs on every stage.
  const double p2p = stage_transfer(x, plan, c);
  const double f_cost = st.forward + p2p, b_cost = st.backward + p2p;
  const double pipeline =
      simulate ? parallel::check_schedule(plan.pp.programs(), plan.pp.map(), m, f_cost, b_cost).makespan
               : m * (f_cost + b_cost) / (1.0 - parallel::theoretical_bubble(*plan.pp.schedule, P, m, v));
  StepPrediction r;
  r.dp_exposed = std::max(0.0, dp_sync_seconds(plan, c, plan.pp.micro_batches, st.params) - dp_hidden(plan, opt, st, c));
  // AdamW and the norm over this rank's state.
  const double state = plan.dp.mode->sharding.optimizer == parallel::Holding::shard ? st.params / plan.dp.shard_degree : st.params;
  r.optimizer = state * optimizer_bytes_per_element(plan.compute, plan.reduce) / c.memory_bandwidth;
  r.micro_batches = m;
  r.stage_forward_s = f_cost;
  r.stage_backward_s = b_cost;
  r.compute = m * (st.forward + st.backward - st.tp_comm - st.cp_comm);
  r.tp_comm = m * st.tp_comm;
  r.cp_comm = m * st.cp_comm;
  r.pp_comm = m * 2 * p2p;
  r.bubble = std::max(0.0, pipeline - m * (f_cost + b_cost));
  r.step_s = pipeline + r.dp_exposed + r.optimizer;
  add_throughput(r, x, plan, cfg, c);
  return r;
}

std::string format_prediction(const StepPrediction& p) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "step %.4g s | %.4g tokens/s | %.3g TFLOP/s per accelerator | MFU %.1f%%\n"
                "  compute %.4g s, TP communication %.4g s, CP attention %.4g s, pipeline transfers %.4g s, bubble %.4g s, "
                "exposed DP sync %.4g s, optimizer %.4g s (slowest stage, %d micro-batch%s)\n",
                p.step_s, p.tokens_per_s, p.tflops_per_accelerator, 100 * p.mfu, p.compute, p.tp_comm, p.cp_comm,
                p.pp_comm,
                p.bubble, p.dp_exposed, p.optimizer, p.micro_batches, p.micro_batches == 1 ? "" : "es");
  return buf;
}

}  // namespace braid::plan
