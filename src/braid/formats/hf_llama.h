// Hugging Face LlamaForCausalLM directories in and out of braid's whole-model
// flat layout (gpt2_weights.h's ModelWeights): config.json with transformers'
// LlamaConfig keys, safetensors with its tensor names (nn.Linear (out, in)
// matrices, as braid stores them), single or sharded
// (model.safetensors.index.json), and the tokenizer files of the vocabulary.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "braid/formats/gpt2_weights.h"

namespace braid::formats {

/// True when cfg's block is Llama's (RMSNorm, rotary positions, SwiGLU), the
/// block LlamaForCausalLM computes.
bool is_llama_block(const model::GPTConfig& cfg);

/// The model config.json describes (transformers' LlamaConfig: hidden_size,
/// intermediate_size, num_hidden_layers, num_attention_heads,
/// num_key_value_heads, head_dim, hidden_act "silu", rms_norm_eps, rope_theta,
/// rope_scaling null or rope_type "llama3", max_position_embeddings,
/// attention_bias = mlp_bias, tie_word_embeddings, vocab_size), built from it
/// alone (no preset needs to match). `where` names the file in errors. Throws
/// DataError for a missing or mistyped field, ConfigError for a model braid's
/// block cannot compute (another activation, head_dim other than hidden /
/// heads, attention and MLP biases that differ, another rope_type).
model::GPTConfig llama_config_from_hf(const nlohmann::json& config, const std::string& where);

/// config.json of cfg (the inverse of llama_config_from_hf, plus architectures,
/// model_type, torch_dtype and the token ids of GPT-2's vocabulary).
nlohmann::ordered_json llama_hf_config(const model::GPTConfig& cfg);

/// Writes `dir`: model.safetensors (f32; model.embed_tokens.weight and
/// lm_head.weight without the vocabulary's padding rows; c_attn as q_proj,
/// k_proj, v_proj; c_fc as gate_proj and up_proj), config.json, and the GPT-2
/// BPE files from `tokenizer_dir` as vocab.json, merges.txt with a
/// tokenizer_config.json naming GPT2Tokenizer. Throws ConfigError unless
/// is_llama_block(w.config). Every file is written atomically.
void export_hf_llama(const ModelWeights& w, const std::string& dir, const std::string& tokenizer_dir);

/// model.safetensors.index.json's text: an object whose "weight_map" maps
/// tensor names to file names of the same directory (no '/'). Throws DataError
/// naming `where` otherwise.
nlohmann::json parse_hf_index(const std::string& text, const std::string& where);

/// Reads a LlamaForCausalLM directory: config.json (llama_config_from_hf) and
/// model.safetensors or the shards model.safetensors.index.json maps (F32,
/// BF16 or F16). Throws DataError naming the file and tensor for a missing or
/// misshapen tensor or a damaged index.
ModelWeights import_hf_llama(const std::string& dir);

}  // namespace braid::formats
