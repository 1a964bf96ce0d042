#include "braid/model/config.h"

#include "braid/core/error.h"

namespace braid::model {

namespace {

// Llama's block on top of c's sizes: RMSNorm, rotary positions, SwiGLU of
// `hidden`, n_kv key/value heads, no biases, an untied head.
void llama_block(GPTConfig& c, int64_t n_kv, int64_t hidden) {
  c.n_kv_head = n_kv, c.mlp_hidden = hidden;
  c.norm = NormKind::rmsnorm, c.positions = PositionKind::rope, c.mlp = MlpKind::swiglu;
  c.bias = false, c.tied_head = false;
}

// Meta's Llama 3 shapes (config.json of meta-llama/Llama-3.x): 128,256
// tokens, RMSNorm eps 1e-5, RoPE theta 500,000 with Llama 3 scaling by
// `factor` (low 1, high 4, original 8,192), 131,072 positions.
void llama3(GPTConfig& c, int64_t L, int64_t NH, int64_t C, int64_t hidden, double factor, bool tied) {
  c.n_layer = L, c.n_head = NH, c.n_embd = C, c.block_size = 131072, c.vocab_size = 128256;
  llama_block(c, 8, hidden);
  c.rope_theta = 500000.0;
  c.rope_scaling = {factor, 1.0, 4.0, 8192};
  c.tied_head = tied;
}

}  // namespace

const std::vector<std::string>& GPTConfig::preset_names() {
  static const std::vector<std::string> names = {"tiny",        "small",       "gpt2",         "llama-tiny",
                                                 "llama-small", "llama3.2-1b", "llama3.1-8b", "llama3.1-70b",
                                                 "llama3.1-405b"};
  return names;
}

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;
  c.name = name;
  if (name == "tiny") {
    c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.block_size = 64;
  } else if (name == "small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 256, c.block_size = 256;
  } else if (name == "gpt2") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.block_size = 1024;
  } else if (name == "llama-tiny") {
    c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.block_size = 64;
    llama_block(c, 2, 176);
  } else if (name == "llama-small") {
    // SwiGLU's hidden 8C/3 (Shazeer 2020, sec. 2) rounded up to a multiple of 16.
    c.n_layer = 4, c.n_head = 4, c.n_embd = 256, c.block_size = 256;
    llama_block(c, 2, 688);
  } else if (name == "llama3.2-1b") {
    llama3(c, 16, 32, 2048, 8192, 32.0, true);
  } else if (name == "llama3.1-8b") {
    llama3(c, 32, 32, 4096, 14336, 8.0, false);
  } else if (name == "llama3.1-70b") {
    llama3(c, 80, 64, 8192, 28672, 8.0, false);
  } else if (name == "llama3.1-405b") {
    llama3(c, 126, 128, 16384, 53248, 8.0, false);
  } else {
    std::string all;
    for (const auto& n : preset_names()) all += (all.empty() ? "" : ", ") + n;
    throw ConfigError("unknown model preset '" + name + "'; valid presets: " + all);
  }
  c.padded_vocab_size = pad_vocab(c.vocab_size);
  return c;
}

bool GPTConfig::is_gpt2_block() const {
  return kv_heads() == n_head && hidden() == 4 * n_embd && norm == NormKind::layernorm &&
         positions == PositionKind::learned && mlp == MlpKind::gelu && bias && tied_head;
}

const char* GPTConfig::norm_name(NormKind k) { return k == NormKind::rmsnorm ? "rmsnorm" : "layernorm"; }
const char* GPTConfig::positions_name(PositionKind k) { return k == PositionKind::rope ? "rope" : "learned"; }
const char* GPTConfig::mlp_name(MlpKind k) { return k == MlpKind::swiglu ? "swiglu" : "gelu"; }

NormKind GPTConfig::parse_norm(const std::string& s) {
  if (s == "layernorm") return NormKind::layernorm;
  if (s == "rmsnorm") return NormKind::rmsnorm;
  throw ConfigError("norm '" + s + "' is not known; use layernorm or rmsnorm");
}
PositionKind GPTConfig::parse_positions(const std::string& s) {
  if (s == "learned") return PositionKind::learned;
  if (s == "rope") return PositionKind::rope;
  throw ConfigError("positions '" + s + "' is not known; use learned or rope");
}
MlpKind GPTConfig::parse_mlp(const std::string& s) {
  if (s == "gelu") return MlpKind::gelu;
  if (s == "swiglu") return MlpKind::swiglu;
  throw ConfigError("mlp '" + s + "' is not known; use gelu or swiglu");
}

int64_t GPTConfig::pad_vocab(int64_t v, int64_t multiple) {
  BRAID_CHECK(multiple > 0, "pad_vocab: multiple must be positive, got ", multiple);
  return (v + multiple - 1) / multiple * multiple;
}

std::string GPTConfig::name_from(const std::string& base) const {
  const GPTConfig b = preset(base);
  std::string changes;  // "key=value" of each size that differs, comma-separated
  auto note = [&](const char* key, int64_t v, int64_t was) {
    if (v != was) changes += (changes.empty() ? "" : ", ") + std::string(key) + "=" + std::to_string(v);
  };
  if (n_layer != b.n_layer && n_head != b.n_head && n_embd != b.n_embd) {
    note("vocab_size", vocab_size, b.vocab_size);
    note("block_size", block_size, b.block_size);
    const std::string sizes =
        "L=" + std::to_string(n_layer) + " H=" + std::to_string(n_head) + " C=" + std::to_string(n_embd);
    return changes.empty() ? sizes : sizes + " with " + changes;
  }
  note("n_layer", n_layer, b.n_layer);
  note("n_head", n_head, b.n_head);
  note("n_embd", n_embd, b.n_embd);
  note("vocab_size", vocab_size, b.vocab_size);
  note("block_size", block_size, b.block_size);
  note("n_kv_head", kv_heads(), b.kv_heads());
  note("mlp_hidden", hidden(), b.hidden());
  return changes.empty() ? base : base + " with " + changes;
}

void GPTConfig::validate() const {
  const std::string who = "model '" + name + "': ";
  BRAID_CONFIG_CHECK(vocab_size > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0,
                     who, "all sizes must be positive (vocab_size=", vocab_size,
                     " block_size=", block_size, " n_layer=", n_layer, " n_head=", n_head,
                     " n_embd=", n_embd, ")");
  BRAID_CONFIG_CHECK(n_embd % n_head == 0, who, "n_embd=", n_embd, " is not divisible by n_head=",
                     n_head, "; choose n_head dividing n_embd");
  BRAID_CONFIG_CHECK(n_kv_head >= 0 && mlp_hidden >= 0, who, "n_kv_head=", n_kv_head, " and mlp_hidden=",
                     mlp_hidden, " must be >= 0 (0: n_head and 4 n_embd)");
  BRAID_CONFIG_CHECK(n_head % kv_heads() == 0, who, "n_head=", n_head, " is not a multiple of n_kv_head=",
                     kv_heads(), " (each key/value head serves an equal group of query heads); choose a divisor of ",
                     n_head);
  BRAID_CONFIG_CHECK(positions != PositionKind::rope || head_size() % 2 == 0, who, "rotary positions pair the ",
                     head_size(), " features of a head in halves; choose n_embd / n_head even");
  BRAID_CONFIG_CHECK(norm_eps > 0 && rope_theta > 1 && rope_scaling.factor > 0 &&
                         rope_scaling.low_freq_factor > 0 &&
                         rope_scaling.low_freq_factor < rope_scaling.high_freq_factor &&
                         rope_scaling.original_context > 0,
                     who, "norm_eps=", norm_eps, " rope_theta=", rope_theta, " rope scaling factor=",
                     rope_scaling.factor, " low=", rope_scaling.low_freq_factor, " high=",
                     rope_scaling.high_freq_factor, " original context=", rope_scaling.original_context,
                     ": need eps > 0, theta > 1, factors > 0 with low < high, and an original context > 0");
  BRAID_CONFIG_CHECK(padded_vocab_size >= vocab_size, who, "padded_vocab_size=",
                     padded_vocab_size, " < vocab_size=", vocab_size, "; use ",
                     pad_vocab(vocab_size));
  BRAID_CONFIG_CHECK(padded_vocab_size % 64 == 0, who, "padded_vocab_size=", padded_vocab_size,
                     " is not a multiple of 64; use ", pad_vocab(vocab_size));
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  throw ConfigError("--recompute '" + s + "' is not known; use none, selective or full");
}

std::vector<PipelineChunk> PipelineStage::resolved(int64_t n_layer) const {
  if (chunks.empty()) return {{first_layer, last_layer < 0 ? n_layer : last_layer, slots}};
  std::vector<PipelineChunk> r = chunks;
  for (auto& c : r)
    if (c.last_layer < 0) c.last_layer = n_layer;
  return r;
}

Precision Precision::of(DType compute, bool half_matmuls) {
  return {compute, half_matmuls ? compute : DType::f32};
}

}  // namespace braid::model
