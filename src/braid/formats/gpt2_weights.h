// A GPT-2 model's weights leaving and entering braid: braid checkpoints,
// Hugging Face directories (model.safetensors + config.json + the BPE files)
// and llm.c model files, all converted through one in-memory form, the whole
// model's flat layout (TP = PP = 1, param_layout.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/model/config.h"

namespace braid::formats {

/// A model's shape and its parameters in braid's whole-model flat layout
/// (model::param_table(config): nn.Linear (out, in) matrices, wte padded to
/// padded_vocab_size rows with zeros, alignment gaps zero). `model` is the
/// preset name the sizes override (a checkpoint's "model" field).
struct ModelWeights {
  std::string model;
  model::GPTConfig config;
  std::vector<float> params;
};

/// The model a checkpoint header's sizes describe (its "model" preset with
/// n_layer, n_head, n_embd, vocab_size and block_size). Throws ConfigError
/// when they do not make a model.
model::GPTConfig header_config(const nlohmann::json& header);

/// The parameters of a braid checkpoint (a sharded directory, or a BRAIDCKP
/// file of any version) with its shape; the AdamW moments are not kept. Throws DataError as
/// formats::load_checkpoint does for a damaged file.
ModelWeights read_checkpoint_weights(const std::string& path);

/// Writes `w` as a braid checkpoint at step 0 with zero AdamW moments and the
/// header field "source" (e.g. "hf", "llmc"): training from it fine-tunes the
/// weights with a fresh optimizer. Atomic.
void write_imported_checkpoint(const std::string& path, const ModelWeights& w, const std::string& source);

/// Hugging Face GPT2LMHeadModel: writes `dir`/model.safetensors (names
/// "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ... with
/// Conv1D's (in, out) matrices, wte without its padding rows, f32; the head is
/// tied to wte and not stored, as save_pretrained does), config.json (GPT2Config's
/// fields) and, from `tokenizer_dir` (encoder.json, vocab.bpe), vocab.json and
/// merges.txt. Creates `dir`; every file is written atomically.
void export_hf(const ModelWeights& w, const std::string& dir, const std::string& tokenizer_dir);

/// Reads a Hugging Face GPT-2 directory (config.json + model.safetensors, F32,
/// BF16 or F16 tensors; names with or without the "transformer." prefix;
/// attention mask buffers and a tied lm_head.weight ignored). The preset is
/// the one whose block size equals n_positions. Throws DataError naming the
/// file and tensor when a tensor is missing or misshapen, ConfigError when
/// the architecture is not GPT-2's (activation, untied head, no preset with
/// that n_positions).
ModelWeights import_hf(const std::string& dir);

/// llm.c's model file (gpt2_124M.bin layout, version 3: fp32): a header of 256
/// int32 (magic 20240326, version, max_seq_len, vocab_size, num_layers,
/// num_heads, channels, padded_vocab_size), then every tensor kind over all
/// layers in llm.c's order (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw,
/// attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw, lnfb), matrices
/// (out, in). Atomic.
void export_llmc(const ModelWeights& w, const std::string& path);

/// Reads an llm.c model file (version 3 fp32 or 5 bf16). Throws DataError
/// naming the file for a wrong magic, version, size or a header field
/// out of range.
ModelWeights import_llmc(const std::string& path);

/// The preset whose block size is `block_size` ("tiny" 64, "small" 256,
/// "gpt2" 1024), else "gpt2" with its block size overridden (train from it with
/// --block-size), with the other sizes overridden; throws ConfigError when
/// block_size < 1 or the sizes do not make a model (GPTConfig::validate).
ModelWeights weights_for_shape(int64_t block_size, int64_t vocab_size, int64_t n_layer, int64_t n_head,
                               int64_t n_embd, const std::string& what);

}  // namespace braid::formats
