// braid plan's step-time model: what one training step of a layout costs on a
// cluster, from the model's FLOPs and bytes (compute), the exact traffic each
// strand sends (communication, costed by the Hockney alpha-beta model of the
// algorithm that runs), and the pipeline schedule simulated with those stage
// times.
#pragma once
#include <string>
#include <vector>

#include "braid/model/config.h"
#include "braid/plan/cluster.h"
#include "braid/parallel/layout_options.h"

namespace braid::plan {

// ---- collectives (alpha-beta) ----
// n: bytes of the whole buffer (all-reduce: the buffer; all-gather: the gathered
// output; reduce-scatter: the input); p: ranks. Sources: Thakur, Rabenseifner &
// Gropp 2005 ("Optimization of Collective Communication Operations in MPICH").

/// Ring all-reduce: 2(p-1) steps of n/p bytes: 2(p-1)(alpha + n/(p beta)).
double ring_all_reduce(double n, int p, const Link& l);
/// Ring all-gather or reduce-scatter: (p-1)(alpha + n/(p beta)).
double ring_all_gather(double n, int p, const Link& l);
/// Recursive doubling all-reduce (p a power of two): log2(p)(alpha + n/beta).
double doubling_all_reduce(double n, int p, const Link& l);

/// Where a group's ranks sit: `size` ranks `stride` apart in rank order, ranks
/// packed onto nodes of `per_node` accelerators (rank r on node r / per_node).
struct Placement {
  int size = 1;
  int per_node = 1;  // members on each node it touches
  int nodes = 1;     // nodes it spans
};
Placement place(int size, int stride, int accelerators_per_node);

/// All-reduce on a placed group: a ring inside a node; across nodes with one
/// member per node, a ring over the inter-node links; with k > 1 members per
/// node, hierarchical: reduce-scatter inside the node, all-reduce of n/k across
/// nodes, all-gather inside (NCCL's and Megatron's pattern). The inter-node link
/// is shared by the node's accelerators (Cluster::inter_node_per_accelerator).
double all_reduce(double n, const Placement& g, const Cluster& c);
/// All-gather or reduce-scatter on a placed group (the same decomposition).
double all_gather(double n, const Placement& g, const Cluster& c);

// ---- one transformer block ----

/// What one transformer block's forward costs on one TP rank: matmul FLOPs and the
/// bytes its element-wise kernels read and write. Backward is twice both.
struct BlockWork {
  double flops = 0;  // matmul FLOPs
  double bytes = 0;  // element-wise traffic
};
/// Forward of one block for a micro-batch of b sequences of s tokens, width h,
/// `heads` heads, over `tp` TP ranks, activations of `elem_bytes` bytes.
/// Matmuls: QKV 6bsh^2, output projection 2bsh^2, MLP 16bsh^2, attention scores
/// and values 4bs^2h, all split over TP (Narayanan et al. SC21, sec. 5.1).
/// Element-wise (read + write): per token two LayerNorms and two residual adds
/// over h (split over TP only with sequence parallelism), GeLU over 4h, the
/// score softmax over s per head, dropout's masks when dropout is on.
/// cp: the context-parallel degree (a rank holds s / cp tokens of each sequence
/// and attends them to all s keys: QKV, projection and MLP over b s / cp tokens,
/// attention 4 b (s / cp) s h).
/// widths: a block other than GPT-2's (0 fields keep GPT-2's).
struct BlockWidths {
  double matmul_weights = 0;  // weights of the block's four linears (GPT-2: 12 h^2)
  double act_in = 0, act_out = 0;  // elements per token the MLP activation reads / writes (GPT-2: 4h each)
  /// A block of cfg: c_attn h (h + 2 kv), attn.c_proj h^2, c_fc h x fc_width,
  /// mlp.c_proj hidden x h; SwiGLU reads 2 hidden and writes hidden.
  static BlockWidths of(const model::GPTConfig& cfg);
};
BlockWork block_forward_work(double b, double s, double h, double heads, int tp, double elem_bytes,
                             bool sequence_parallel, bool dropout, int cp = 1, const BlockWidths& widths = {});

/// Bytes braid's optimizer moves per element of state it updates: the f32 master,
/// m and v read and written (24), the gradient read twice (the global norm's
/// pass and AdamW), and the compute copy written when it is not the master.
double optimizer_bytes_per_element(DType compute, DType grad);

// ---- the step ----

struct StepPrediction {
  double step_s = 0;            // one optimizer step (global batch)
  double tokens_per_s = 0;
  double model_flops = 0;       // per step: braid's MFU count (6N + attention) x tokens
  double tflops_per_accelerator = 0;  // model_flops / (step x accelerators), TFLOP/s
  double mfu = 0;               // tflops_per_accelerator / peak
  // Breakdown on the slowest stage, seconds per step:
  double compute = 0;           // forward, backward, recomputation (matmuls and element-wise)
  double tp_comm = 0;           // tensor-parallel collectives (on the critical path)
  double cp_comm = 0;           // context-parallel attention: ring transfers not hidden, all-to-alls
  double pp_comm = 0;           // activations and gradients between stages
  double bubble = 0;            // pipeline idle time
  double dp_exposed = 0;        // gradient sync not hidden behind backward
  double optimizer = 0;         // AdamW over this rank's state
  double stage_forward_s = 0, stage_backward_s = 0;  // one micro-batch on the slowest stage
  int micro_batches = 1;        // per pipeline (per DP rank)
};

/// Predicts one step of `braid train` with `opt` on `world` accelerators of
/// `cluster`: the layout is resolved as train resolves it (TP innermost, then DP,
/// then PP in rank order). Throws ConfigError as train would for an invalid layout.
/// simulate = false: the schedule's closed-form bubble (theoretical_bubble) in
/// place of its simulation, for ranking many layouts quickly.
StepPrediction predict_step(const parallel::LayoutOptions& opt, int world, const Cluster& cluster, bool simulate = true);

/// FLOPs of one iteration as Narayanan et al. (SC21) count them, Eq. 3, with
/// activation recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
double megatron_flops_per_iteration(double B, double s, double l, double h, double V);

/// The prediction as text: step, tokens/s, TFLOP/s per accelerator, MFU and the
/// breakdown.
std::string format_prediction(const StepPrediction& p);

}  // namespace braid::plan
