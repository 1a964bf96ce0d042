// The options that fix a job's model and parallel layout, as the CLI fills them:
// the model preset and its sizes, the batch, every strand's degree and mode, the
// precision. ParallelPlan (plan.h) resolves and validates them once; everything
// below the CLI reads the plan, not these.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/comm/topology.h"
#include "braid/model/config.h"

namespace braid::parallel {

/// --micro-batch auto (the default): the largest micro-batch up to
/// kMicroBatchAutoMax that divides batch / dp and, with a pipeline of P stages,
/// leaves at least P micro-batches per step (resolve_plan).
inline constexpr int64_t kMicroBatchAuto = -1;
/// auto's ceiling: one micro-batch's activations stay those of 8 sequences (the
/// fixed default before auto was), however few the ranks.
inline constexpr int64_t kMicroBatchAutoMax = 8;
/// --fsdp-shard-size node: HSDP's shard group is the DP ranks of one node (placement.h).
inline constexpr int kShardSizeNode = -1;

struct LayoutOptions {
  std::string model = "small";
  // Overrides of the preset's sizes (0: keep the preset's); the vocabulary is
  // padded to a multiple of 64 again.
  int64_t vocab_size = 0, n_layer = 0, n_head = 0, n_embd = 0;
  int64_t block_size = 0;  // context length: positions in wpe (0: the preset's)
  int64_t n_kv_head = 0, mlp_hidden = 0;  // grouped-query kv heads, MLP hidden features (0: the preset's)
  double rope_theta = 0;                  // rotary base (0: the preset's)
  /// The whole model when it comes from a checkpoint (braid eval / sample):
  /// replaces the preset and the overrides above.
  std::optional<model::GPTConfig> checkpoint_model;
  int64_t global_batch = 16;  // sequences per optimizer step, over all DP ranks
  int64_t micro_batch = kMicroBatchAuto;  // sequences per forward/backward on one rank (auto: resolved by the plan)
  int64_t seq_len = 0;        // 0: min(128, block_size)
  int dp = 0;  // 0: all ranks / tp
  int tp = 1;  // tensor-parallel degree (TP groups are consecutive ranks)
  int cp = 1;  // context-parallel degree: each sequence split over CP ranks (2 CP chunks, causal balance)
  std::string cp_comm = "ring";  // how a CP group attends: ring | a2a
  bool sequence_parallel = false;  // shard LayerNorm/dropout/residual rows over TP
  float dropout = 0.0f;            // embedding and residual dropout probability
  int pp = 1;                      // pipeline stages (consecutive layer ranges)
  std::string pp_layers;           // explicit layers per stage, e.g. "3,5" (empty: even split)
  std::string schedule = "1f1b";   // naive | gpipe | 1f1b | interleaved | zb-h1
  int virtual_stages = 1;          // interleaved: model chunks per pipeline rank
  int64_t micro_batches = 0;       // micro-batches per step per pipeline (0: batch / (dp x micro-batch))
  std::string recompute = "none";  // activation checkpointing: none | selective | full
  double bucket_mb = 4.0;          // gradient bucket size (DDP, ZeRO-1), MiB
  bool overlap = true;             // launch bucket reductions during the backward
  bool zero_copy = true;  // DP reductions / gathers through memory the DP ranks of a node share
  int zero = 0;  // ZeRO stage 0 (DDP), 1 (moments sharded), 2 (+ gradients), 3 (+ parameters)
  bool fsdp = false;            // FSDP: stage 3 with one flat parameter per unit (block)
  int fsdp_shard_size = 0;      // HSDP: shard within groups of this many ranks (0: all DP ranks; kShardSizeNode)
  bool tp_across_nodes = false;  // --tp-across-nodes: let a TP group span nodes
  comm::NodeMap nodes;           // where the ranks live (empty: one node): the world's, or the cluster's
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (compute copies; master weights f32)
  std::string reduce_dtype = "fp32";  // gradient accumulation and reduction: fp32 | the precision
  bool fp32_residual = false;  // keep the residual stream in f32 under --precision bf16|fp16
  std::string matmul_precision = "half";  // half: matmuls in the precision where oneDNN can | fp32: on rounded values
  bool async_save = false;  // checkpoints staged in host memory and written by a background thread (memory: the staging buffer)
  std::string dp_mode = "ddp";  // "ddp" (all-reduce) or "ps" (rank 0 is a parameter server)
  bool ps_async = false;        // ps: apply each worker's gradient as it arrives
  int64_t staleness = 0;        // ps async: a worker runs at most this many iterations ahead
  comm::Algorithm algo = comm::Algorithm::ring;
};

}  // namespace braid::parallel
