#include "braid/model/config.h"

#include "braid/core/error.h"

namespace braid::model {

GPTConfig GPTConfig::preset(const std::string& name) {
  GPTConfig c;
  c.name = name;
  if (name == "tiny") {
    c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.block_size = 64;
  } else if (name == "small") {
    c.n_layer = 4, c.n_head = 4, c.n_embd = 256, c.block_size = 256;
  } else if (name == "gpt2") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.block_size = 1024;
  } else {
    throw ConfigError("unknown model preset '" + name + "'; valid presets: tiny, small, gpt2");
  }
  c.padded_vocab_size = pad_vocab(c.vocab_size);
  return c;
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
