// The Hugging Face Llama config.json reader on any bytes: a configuration it
// accepts is a valid model (GPTConfig::validate) that writes back to a
// config.json reading as the same model, and every refusal is a ConfigError /
// DataError (never a JSON exception, a crash or a sanitizer report).
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/formats/hf_llama.h"
#include "braid/formats/model_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  try {
    const braid::model::GPTConfig c = braid::formats::llama_config_from_hf(j, "config.json");
    c.validate();
    if (c.n_head % c.kv_heads() != 0 || !braid::formats::is_llama_block(c)) std::abort();
    const nlohmann::json back = nlohmann::json::parse(braid::formats::llama_hf_config(c).dump());
    const braid::model::GPTConfig d = braid::formats::llama_config_from_hf(back, "written config.json");
    if (braid::formats::block_header(c) != braid::formats::block_header(d) || c.n_layer != d.n_layer ||
        c.n_embd != d.n_embd || c.n_head != d.n_head || c.vocab_size != d.vocab_size || c.block_size != d.block_size)
      std::abort();
  } catch (const braid::ConfigError&) {
  }
  return 0;
}
