// Flags shared by `braid train` and `braid plan`: the model and the parallel
// layout, so the plan of a run takes exactly the flags of the run.
#include "commands.h"

namespace braid::cli {

void add_model_and_layout_options(CLI::App* c, train::TrainOptions& o) {
  c->add_option("--model", o.model, "Model config: tiny, small, gpt2")->capture_default_str();
  c->add_option("--batch", o.global_batch, "Global batch in sequences (over all DP ranks)")->capture_default_str();
  auto* micro_batch =
      c->add_option("--micro-batch", o.micro_batch, "Sequences per forward/backward on one rank")->capture_default_str();
  c->add_option("--seq-len", o.seq_len, "Sequence length T (0: min(128, the model's block size))")->capture_default_str();
  c->add_option("--dp-mode", o.dp_mode, "ddp (ring all-reduce) or ps (rank 0 is a parameter server, the others workers)")->capture_default_str();
  c->add_option("--zero", o.zero, "ZeRO stage: 0 (DDP all-reduce), 1 (AdamW moments sharded over DP), 2 (+ gradients), 3 (+ parameters, gathered per layer)")->capture_default_str();
  c->add_flag("--fsdp", o.fsdp, "FSDP: shard parameters, gradients and optimizer states with one flat parameter per transformer block (ZeRO-3 by unit)");
  c->add_option("--pp", o.pp, "Pipeline stages: consecutive layer ranges on groups of ranks (TP fastest, then DP, then PP)")->capture_default_str();
  c->add_option("--pp-layers", o.pp_layers, "Layers per stage, e.g. 3,5 (interleaved: one count per virtual stage, pp x v of them; default: even split)");
  c->add_option("--schedule", o.schedule, "Pipeline schedule: naive, gpipe, 1f1b, interleaved or zb-h1 (needs --recompute none)")->capture_default_str();
  c->add_option("--virtual-stages", o.virtual_stages, "Model chunks per pipeline rank (--schedule interleaved)")->capture_default_str();
  c->add_option("--micro-batches", o.micro_batches, "Micro-batches per step and pipeline (sets --micro-batch = batch / (dp x m))")
      ->capture_default_str()
      ->excludes(micro_batch);
  c->add_option("--recompute", o.recompute, "Activation checkpointing: none, selective (attention internals and GELU) or full (each block)")->capture_default_str();
  c->add_option("--tp", o.tp, "Tensor-parallel degree: heads, MLP columns and the vocabulary split over groups of consecutive ranks")->capture_default_str();
  c->add_flag("--sequence-parallel", o.sequence_parallel, "Sequence parallelism: LayerNorm/dropout/residual rows sharded over the TP group");
  c->add_option("--dropout", o.dropout, "Embedding and residual dropout probability")->capture_default_str();
  c->add_option("--vocab-size", o.vocab_size, "Override the preset's vocabulary size (0: keep)")->capture_default_str();
  c->add_option("--n-layer", o.n_layer, "Override the preset's layer count (0: keep)")->capture_default_str();
  c->add_option("--n-head", o.n_head, "Override the preset's head count (0: keep)")->capture_default_str();
  c->add_option("--n-embd", o.n_embd, "Override the preset's width (0: keep)")->capture_default_str();
  c->add_option("--fsdp-shard-size", o.fsdp_shard_size, "HSDP: shard within groups of S ranks and replicate across groups (0: shard over all DP ranks)")->capture_default_str();
  c->add_option("--precision", o.precision, "fp32, bf16 or fp16: compute copies of parameters and matmul operands (master weights and AdamW moments stay fp32)")->capture_default_str();
  c->add_option("--reduce-dtype", o.reduce_dtype, "Gradients accumulated and reduced in fp32 (default) or, opted in, in the --precision dtype (half the gradient traffic and memory)")->capture_default_str();
  c->add_option("--bucket-mb", o.bucket_mb, "DDP gradient bucket size in MiB")->capture_default_str();
}

}  // namespace braid::cli
