// Flags shared by `braid train` and `braid plan`: the model and the parallel
// layout, so the plan of a run takes exactly the flags of the run.
#include <algorithm>
#include <cctype>

#include "braid/core/parse.h"
#include "braid/parallel/pipeline/schedule.h"
#include "commands.h"

namespace braid::cli {

std::vector<std::string> schedule_choices() {
  std::vector<std::string> names;
  for (const auto& d : parallel::schedules()) names.emplace_back(d.name);
  return names;
}

std::string schedule_help() {
  std::string h = "Pipeline schedule:";
  for (const auto& d : parallel::schedules()) {
    h += std::string("\n  ") + d.name + ": " + d.description;
    const std::string refused = d.refuse ? d.refuse({"full"}) : "";
    if (!refused.empty()) h += " (needs --recompute none)";
  }
  return h;
}

CLI::Validator one_of(std::vector<std::string> names) {
  std::string desc = "{";
  for (size_t i = 0; i < names.size(); ++i) desc += (i ? "," : "") + names[i];
  desc += "}";
  return CLI::Validator(
      [names, desc](std::string& s) -> std::string {
        std::string l = s;
        std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (std::find(names.begin(), names.end(), l) == names.end()) return "'" + s + "' is not one of " + desc;
        s = l;
        return "";
      },
      desc);
}

namespace {

// The preset and the sizes that override it.
void add_model_options(CLI::App* c, train::TrainOptions& o) {
  const std::string model = "Model";
  c->add_option("--model", o.model,
                "Model preset: GPT-2 blocks tiny (2 layers, C=64), small (4, 256), gpt2 (12, 768: 124M); Llama "
                "blocks (RMSNorm, RoPE, SwiGLU, grouped-query attention, untied head) llama-tiny (2, 64), "
                "llama-small (4, 256), and Meta's shapes llama3.2-1b, llama3.1-8b, llama3.1-70b, llama3.1-405b")
      ->transform(one_of(model::GPTConfig::preset_names()))
      ->capture_default_str()
      ->group(model);
  c->add_option("--vocab-size", o.vocab_size, "Override the preset's vocabulary size (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--n-layer", o.n_layer, "Override the preset's layer count (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--n-head", o.n_head, "Override the preset's head count (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--n-embd", o.n_embd, "Override the preset's width (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--block-size", o.block_size,
                "Override the preset's context length: the most positions a sequence may have (wpe rows, "
                "GPT-2's n_positions; 0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--n-kv-head", o.n_kv_head,
                "Override the preset's key/value heads (grouped-query attention; must divide n_head; 0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--mlp-hidden", o.mlp_hidden, "Override the preset's MLP hidden features (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--rope-theta", o.rope_theta, "Override the rotary base of a Llama preset (0: keep)")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(model);
  c->add_option("--dropout", o.dropout, "Embedding and residual dropout probability, in [0, 1)")
      ->capture_default_str()->group(model);
}

// --fsdp-shard-size S|node into o.fsdp_shard_size (kShardSizeNode for node).
void parse_shard_size(const std::string& s, train::TrainOptions& o) {
  uint64_t n = 0;
  if (s == "node") {
    o.fsdp_shard_size = parallel::kShardSizeNode;
    return;
  }
  BRAID_CONFIG_CHECK(parse_count(s, n) && n < (uint64_t{1} << 30), "--fsdp-shard-size '", s,
                     "' is not a rank count (0 for all DP ranks) or node");
  o.fsdp_shard_size = static_cast<int>(n);
}

// --micro-batch N|auto into o.micro_batch (kMicroBatchAuto for auto).
void parse_micro_batch(const std::string& s, train::TrainOptions& o) {
  uint64_t n = 0;
  if (s == "auto") {
    o.micro_batch = parallel::kMicroBatchAuto;
    return;
  }
  BRAID_CONFIG_CHECK(parse_count(s, n) && n >= 1 && n < (uint64_t{1} << 40), "--micro-batch '", s,
                     "' is not a positive integer or auto");
  o.micro_batch = static_cast<int64_t>(n);
}

// The global batch, how it splits into micro-batches, and the sequence length.
void add_batch_options(CLI::App* c, train::TrainOptions& o) {
  const std::string batch = "Batch";
  c->add_option("--batch", o.global_batch, "Global batch in sequences (over all DP ranks)")
      ->capture_default_str()->group(batch);
  auto* micro_batch =
      c->add_option("--micro-batch", [&o](const std::vector<std::string>& v) {
           parse_micro_batch(v.at(0), o);
           return true;
         }, "Sequences per forward/backward on one rank, or auto: the largest up to 8 that divides batch / dp "
            "(with --pp P, leaving at least P micro-batches)")
          ->default_str(o.micro_batch == parallel::kMicroBatchAuto ? "auto" : std::to_string(o.micro_batch))
          ->type_name("N|auto")
          ->group(batch);
  c->add_option("--micro-batches", o.micro_batches, "Micro-batches per step and pipeline (sets --micro-batch = batch / (dp x m))")
      ->capture_default_str()
      ->excludes(micro_batch)
      ->group(batch);
  c->add_option("--seq-len", o.seq_len, "Sequence length T (0: min(128, the model's block size))")
      ->check(CLI::NonNegativeNumber)->capture_default_str()->group(batch);
}

// Data, tensor and pipeline parallelism: degrees, sharding, schedule,
// recomputation and how gradients travel.
void add_layout_options(CLI::App* c, train::TrainOptions& o) {
  const std::string layout = "Parallel layout";
  c->add_option("--dp-mode", o.dp_mode, "ddp (ring all-reduce) or ps (rank 0 is a parameter server, the others workers)")
      ->transform(one_of({"ddp", "ps"}))->capture_default_str()->group(layout);
  c->add_option("--dp", o.dp, "Data-parallel degree (0: derived: ranks / (tp x pp), or ranks - 1 with --dp-mode ps)")
      ->capture_default_str()->group(layout);
  c->add_option("--zero", o.zero, "ZeRO stage: 0 (DDP all-reduce), 1 (AdamW moments sharded over DP), 2 (+ gradients), 3 (+ parameters, gathered per layer)")
      ->capture_default_str()->group(layout);
  c->add_flag("--fsdp", o.fsdp, "FSDP: shard parameters, gradients and optimizer states with one flat parameter per transformer block (ZeRO-3 by unit)")
      ->group(layout);
  c->add_option("--fsdp-shard-size", [&o](const std::vector<std::string>& v) {
       parse_shard_size(v.at(0), o);
       return true;
     }, "HSDP: shard within groups of S ranks and replicate across groups (0: shard over all DP ranks; node: "
        "the DP ranks of one node)")
      ->default_str("0")->type_name("S|node")->group(layout);
  c->add_option("--tp", o.tp, "Tensor-parallel degree: heads, MLP columns and the vocabulary split over groups of consecutive ranks")
      ->capture_default_str()->group(layout);
  c->add_option("--cp", o.cp, "Context-parallel degree: each sequence split over CP ranks in 2 CP chunks, rank r "
                "holding chunks r and 2 CP - 1 - r (rank order TP, CP, DP, PP)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str()->group(layout);
  c->add_option("--cp-comm", o.cp_comm, "How a CP group attends: ring (key/value blocks passed round the group "
                "while each rank computes on the block it holds) or a2a (all-to-all to a head split and back; "
                "heads / TP must divide by CP)")
      ->check(CLI::IsMember({"ring", "a2a"}))->capture_default_str()->group(layout);
  c->add_flag("--tp-across-nodes", o.tp_across_nodes, "Let a TP group span nodes (refused by default: TP's all-reduces sit on every layer's critical path)")
      ->group(layout);
  c->add_flag("--sequence-parallel", o.sequence_parallel, "Sequence parallelism: LayerNorm/dropout/residual rows sharded over the TP group")
      ->group(layout);
  c->add_option("--pp", o.pp, "Pipeline stages: consecutive layer ranges on groups of ranks (TP fastest, then DP, then PP)")
      ->capture_default_str()->group(layout);
  c->add_option("--pp-layers", o.pp_layers, "Layers per stage, e.g. 3,5 (interleaved: one count per virtual stage, pp x v of them; default: even split)")
      ->group(layout);
  c->add_option("--schedule", o.schedule, schedule_help())
      ->transform(one_of(schedule_choices()))->capture_default_str()->group(layout);
  c->add_option("--virtual-stages", o.virtual_stages, "Model chunks per pipeline rank (--schedule interleaved; a schedule with a fixed count takes it)")
      ->capture_default_str()->group(layout);
  c->add_option("--recompute", o.recompute, "Activation checkpointing: none, selective (attention internals and GELU) or full (each block)")
      ->transform(one_of({"none", "selective", "full"}))->capture_default_str()->group(layout);
  c->add_option("--bucket-mb", o.bucket_mb, "DDP gradient bucket size in MiB")->capture_default_str()->group(layout);
  c->add_flag("--no-overlap", [&o](int64_t) { o.overlap = false; }, "All-reduce after backward instead of during it")
      ->group(layout);
  c->add_flag("--no-zero-copy", [&o](int64_t) { o.zero_copy = false; },
              "Data parallelism reduces gradients (and ZeRO-3/FSDP gathers parameters) by messages through "
              "private memory, instead of through memory the data-parallel ranks of a node share, where each "
              "reads and writes its peers' directly")
      ->group(layout);
}

void add_precision_options(CLI::App* c, train::TrainOptions& o) {
  const std::string precision = "Precision";
  c->add_option("--precision", o.precision, "Compute copies of parameters and matmul operands (master weights and AdamW moments stay fp32)")
      ->transform(one_of({"fp32", "bf16", "fp16"}))->capture_default_str()->group(precision);
  c->add_option("--reduce-dtype", o.reduce_dtype, "Gradients accumulated and reduced in fp32 (default) or, opted in, in the --precision dtype (half the gradient traffic and memory)")
      ->transform(one_of({"fp32", "bf16", "fp16"}))->capture_default_str()->group(precision);
  c->add_option("--matmul-precision", o.matmul_precision, "half: bf16/fp16 matmul operands stored and multiplied in that dtype where oneDNN has the matmul on this CPU; fp32: rounded to it and multiplied in f32 (faster where oneDNN's half-precision matmul is slower than f32: compare the ceilings `braid train` prints)")
      ->transform(one_of({"half", "fp32"}))->capture_default_str()->group(precision);
  c->add_flag("--fp32-residual", o.fp32_residual, "Keep the residual stream in f32 under --precision bf16|fp16 (as torch autocast; Megatron-LM's --fp32-residual-connection): by default it is rounded to the compute dtype after each add and stored in it")
      ->group(precision);
}

}  // namespace

void add_model_and_layout_options(CLI::App* c, train::TrainOptions& o) {
  add_model_options(c, o);
  add_batch_options(c, o);
  add_layout_options(c, o);
  add_precision_options(c, o);
}

}  // namespace braid::cli
