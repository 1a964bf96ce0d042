#include "braid/formats/gpt2_weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/formats/safetensors.h"
#include "braid/formats/weights_io.h"
#include "braid/model/param_layout.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/hf_llama.h"
#include "braid/formats/model_header.h"

namespace braid::formats {

namespace {

constexpr int32_t kLlmcModelMagic = 20240326;
constexpr const char* kHfPrefix = "transformer.";

using weights_io::element;
using weights_io::read_text;
using weights_io::write_text;

// Conv1D layers store (in, out): every 2-D tensor of a block.
bool conv1d(const model::ParamInfo& p) { return p.shape.size() == 2 && p.layer >= 0; }

// HF shape of braid tensor p: Conv1D transposed, wte without its padding rows.
std::vector<int64_t> hf_shape(const model::ParamInfo& p, const model::GPTConfig& c) {
  if (p.name == "wte.weight") return {c.vocab_size, c.n_embd};
  if (conv1d(p)) return {p.shape[1], p.shape[0]};
  return p.shape;
}

// dst (rows x cols) = src (cols x rows) transposed.
void transpose(float* dst, const float* src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * rows + r];
}

model::GPTConfig shape_config(const std::string& preset, int64_t block, int64_t V, int64_t L, int64_t H,
                              int64_t C) {
  model::GPTConfig c = model::GPTConfig::preset(preset);
  c.block_size = block;
  c.vocab_size = V, c.n_layer = L, c.n_head = H, c.n_embd = C;
  c.padded_vocab_size = model::GPTConfig::pad_vocab(V);
  c.name = c.name_from(preset);
  c.validate();
  return c;
}

}  // namespace

ModelWeights weights_for_shape(int64_t block_size, int64_t V, int64_t L, int64_t H, int64_t C,
                               const std::string& what) {
  // The preset of that context length, else gpt2's with its block size overridden
  // (a run then takes --block-size).
  std::string name = "gpt2";
  for (const char* p : {"tiny", "small", "gpt2"})
    if (model::GPTConfig::preset(p).block_size == block_size) name = p;
  BRAID_CONFIG_CHECK(block_size >= 1, what, " has a context length of ", block_size, "; it must be >= 1");
  ModelWeights w;
  w.model = name;
  w.config = shape_config(name, block_size, V, L, H, C);
  w.params.assign(model::unit_bounds(w.config).back(), 0.f);
  return w;
}

namespace {
// The parameters of sharded checkpoint `dir` into w.params (the whole model's layout).
void read_sharded_weights(const std::string& dir, ModelWeights& w) {
  ShardedCheckpointReader r(dir);
  const auto table = model::param_table(w.config);
  const auto& tensors = r.metadata().tensors;  // those of the header's model (checked when read)
  for (size_t i = 0; i < table.size(); ++i)
    r.read(static_cast<int64_t>(i), 0, tensors[i].whole(), 0, tensors[i].whole().numel(), w.params.data() + table[i].offset);
}
}  // namespace

model::GPTConfig header_config(const nlohmann::json& h) {
  const std::string model = h.at("model").get<std::string>();
  const int64_t block = h.contains("block_size") ? h["block_size"].get<int64_t>()
                                                 : model::GPTConfig::preset(model).block_size;
  model::GPTConfig c = model::GPTConfig::preset(model);
  c.block_size = block;
  c.vocab_size = h.at("vocab_size").get<int64_t>(), c.n_layer = h.at("n_layer").get<int64_t>();
  c.n_head = h.at("n_head").get<int64_t>(), c.n_embd = h.at("n_embd").get<int64_t>();
  c.padded_vocab_size = model::GPTConfig::pad_vocab(c.vocab_size);
  read_block_header(h, c);
  c.name = c.name_from(model);
  c.validate();
  return c;
}

ModelWeights read_checkpoint_weights(const std::string& path) {
  std::error_code ec;
  const bool sharded = std::filesystem::is_directory(path, ec);
  const nlohmann::json h = sharded ? read_sharded_metadata(path).header : verify_checkpoint(path).header;
  ModelWeights w;
  w.model = h.at("model").get<std::string>();
  w.config = header_config(h);
  const size_t n = h.at("n_params").get<size_t>();
  BRAID_DATA_CHECK(n == model::unit_bounds(w.config).back(), "checkpoint ", path, " holds ", n,
                   " parameters but its model's sizes need ", model::unit_bounds(w.config).back());
  w.params.assign(n, 0.f);
  if (sharded) {
    read_sharded_weights(path, w);  // every chunk read is checked; the moments are not read
    return w;
  }
  std::vector<float> m(n), v(n);
  load_checkpoint(path, n, w.params.data(), m.data(), v.data());
  return w;
}

void write_imported_checkpoint(const std::string& path, const ModelWeights& w, const std::string& source) {
  const size_t n = w.params.size();
  const std::vector<float> zero(n, 0.f);
  CheckpointView ck;
  ck.header = {{"format", "braid-checkpoint"}, {"model", w.model},     {"step", 0},
               {"n_params", n},                 {"seed", 0},           {"global_batch", 0},
               {"seq_len", 0},                  {"n_layer", w.config.n_layer},
               {"n_head", w.config.n_head},     {"n_embd", w.config.n_embd},
               {"vocab_size", w.config.vocab_size}, {"block_size", w.config.block_size},
               {"source", source},              {"block", block_header(w.config)}};
  ck.params = w.params.data();
  ck.m = zero.data();
  ck.v = zero.data();
  save_checkpoint(path, ck);
}

// ---- Hugging Face ----

void export_hf(const ModelWeights& w, const std::string& dir, const std::string& tokenizer_dir) {
  if (!w.config.is_gpt2_block()) return export_hf_llama(w, dir, tokenizer_dir);
  const model::GPTConfig& c = w.config;
  make_writable_directory(dir, "braid export");
  const auto table = model::param_table(c);
  std::vector<std::vector<float>> data;
  std::vector<TensorView> views;
  data.reserve(table.size());
  for (const auto& p : table) {
    const std::vector<int64_t> shape = hf_shape(p, c);
    const float* src = w.params.data() + p.offset;
    if (conv1d(p)) {
      data.emplace_back(p.numel);
      transpose(data.back().data(), src, shape[0], shape[1]);
      src = data.back().data();
    }
    views.push_back({kHfPrefix + p.name, "F32", shape, src});
  }
  write_safetensors(dir + "/model.safetensors", views, {{"format", "pt"}});
  const nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"activation_function", "gelu_new"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", nullptr},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"bos_token_id", 50256},
      {"eos_token_id", 50256},
      {"torch_dtype", "float32"}};
  write_text(dir + "/config.json", config.dump(2) + "\n", "config.json");
  // The GPT-2 BPE files under Hugging Face's names (the same content).
  write_text(dir + "/vocab.json", read_text(tokenizer_dir + "/encoder.json", "tokenizer file"), "vocab.json");
  write_text(dir + "/merges.txt", read_text(tokenizer_dir + "/vocab.bpe", "tokenizer file"), "merges.txt");
}

ModelWeights import_hf(const std::string& dir) {
  const std::string cpath = dir + "/config.json";
  const nlohmann::json cfg = nlohmann::json::parse(read_text(cpath, "Hugging Face config"), nullptr, false);
  BRAID_DATA_CHECK(cfg.is_object(), cpath, " is not a JSON object");
  auto num = [&](const char* k) {
    BRAID_DATA_CHECK(cfg.contains(k) && cfg[k].is_number_integer() && cfg[k].get<int64_t>() > 0, cpath,
                     ": field ", k, " is missing or not a positive integer");
    return cfg[k].get<int64_t>();
  };
  const std::string type = weights_io::string_or(cfg, "model_type", "", cpath);
  if (type == "llama") return import_hf_llama(dir);
  BRAID_CONFIG_CHECK(type == "gpt2", cpath, " describes a '", type,
                     "' model; braid imports GPT-2 (model_type gpt2) and Llama (model_type llama)");
  const std::string act = weights_io::string_or(cfg, "activation_function", "gelu_new", cpath);
  BRAID_CONFIG_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", cpath, ": activation_function '", act,
                     "'; braid's GPT-2 uses the tanh GELU (gelu_new)");
  BRAID_CONFIG_CHECK(weights_io::bool_or(cfg, "tie_word_embeddings", true, cpath), cpath,
                     ": tie_word_embeddings is false; braid's head is tied to wte");
  BRAID_CONFIG_CHECK(!cfg.contains("n_inner") || cfg["n_inner"].is_null() || cfg["n_inner"] == 4 * num("n_embd"),
                     cpath, ": n_inner ", cfg.value("n_inner", nlohmann::json()).dump(), "; braid's MLP is 4 x n_embd");
  ModelWeights w = weights_for_shape(num("n_positions"), num("vocab_size"), num("n_layer"), num("n_head"),
                                     num("n_embd"), cpath);
  const SafetensorsFile st = SafetensorsFile::read(dir + "/model.safetensors");
  for (const auto& p : model::param_table(w.config)) {
    const std::string name = st.contains(kHfPrefix + p.name) ? kHfPrefix + p.name : p.name;
    const SafetensorsFile::Entry& e = st.entry(name);
    const std::vector<int64_t> want = hf_shape(p, w.config);
    BRAID_DATA_CHECK(e.shape == want, st.path(), ": tensor ", name, " has shape ", nlohmann::json(e.shape).dump(),
                     ", expected ", nlohmann::json(want).dump(), " for the sizes in config.json");
    BRAID_DATA_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16", st.path(), ": tensor ", name,
                     " is ", e.dtype, "; braid reads F32, BF16 and F16");
    const unsigned char* src = st.data(name);
    float* dst = w.params.data() + p.offset;
    size_t count = 1;
    for (int64_t d : want) count *= static_cast<size_t>(d);
    if (conv1d(p)) {
      // HF (in, out) -> braid (out, in).
      const size_t in = static_cast<size_t>(want[0]), out = static_cast<size_t>(want[1]);
      for (size_t i = 0; i < in; ++i)
        for (size_t o = 0; o < out; ++o) dst[o * in + i] = element(src, e.dtype, i * out + o);
    } else {
      for (size_t i = 0; i < count; ++i) dst[i] = element(src, e.dtype, i);
    }
  }
  return w;
}

// ---- llm.c ----

namespace {

// The tensors of llm.c's file in its order: (braid name suffix, per layer?).
const std::vector<std::pair<std::string, bool>>& llmc_order() {
  static const std::vector<std::pair<std::string, bool>> order = {
      {"wte.weight", false},      {"wpe.weight", false},         {"ln_1.weight", true},
      {"ln_1.bias", true},        {"attn.c_attn.weight", true},  {"attn.c_attn.bias", true},
      {"attn.c_proj.weight", true}, {"attn.c_proj.bias", true},  {"ln_2.weight", true},
      {"ln_2.bias", true},        {"mlp.c_fc.weight", true},     {"mlp.c_fc.bias", true},
      {"mlp.c_proj.weight", true}, {"mlp.c_proj.bias", true},    {"ln_f.weight", false},
      {"ln_f.bias", false}};
  return order;
}

// Each braid tensor in llm.c's order (wte with `vp` rows) and the callback
// f(tensor, rows_in_file) for it.
template <typename F>
void for_each_llmc_tensor(const model::GPTConfig& c, F f) {
  const auto table = model::param_table(c);
  auto find = [&](const std::string& name) -> const model::ParamInfo& {
    for (const auto& p : table)
      if (p.name == name) return p;
    throw Error("llm.c layout: no tensor " + name);
  };
  for (const auto& [suffix, per_layer] : llmc_order()) {
    if (!per_layer) {
      f(find(suffix));
      continue;
    }
    for (int64_t l = 0; l < c.n_layer; ++l) f(find("h." + std::to_string(l) + "." + suffix));
  }
}

}  // namespace

void export_llmc(const ModelWeights& w, const std::string& path) {
  const model::GPTConfig& c = w.config;
  BRAID_CONFIG_CHECK(c.is_gpt2_block(), "braid export --format llmc: llm.c's model file (version 3) holds GPT-2 "
                     "blocks, and model '", c.name, "' is not one; use --format hf");
  int32_t header[256] = {};
  header[0] = kLlmcModelMagic;
  header[1] = 3;  // fp32
  header[2] = static_cast<int32_t>(c.block_size);
  header[3] = static_cast<int32_t>(c.vocab_size);
  header[4] = static_cast<int32_t>(c.n_layer);
  header[5] = static_cast<int32_t>(c.n_head);
  header[6] = static_cast<int32_t>(c.n_embd);
  header[7] = static_cast<int32_t>(c.padded_vocab_size);
  AtomicFile f(path, "llm.c model file");
  f.writer().write(header, sizeof header);
  for_each_llmc_tensor(c, [&](const model::ParamInfo& p) {
    f.writer().write(w.params.data() + p.offset, p.numel * sizeof(float));
  });
  f.commit();
}

ModelWeights import_llmc(const std::string& path) {
  FileReader in(path, "llm.c model file");
  int32_t h[256];
  BRAID_DATA_CHECK(in.read(h, sizeof h), "llm.c model file ", path, " is shorter than its 1024-byte header");
  BRAID_DATA_CHECK(h[0] == kLlmcModelMagic, "file ", path, " does not start with llm.c's model magic ",
                   kLlmcModelMagic, " (found ", h[0], "); pass an llm.c model file such as gpt2_124M.bin");
  BRAID_DATA_CHECK(h[1] == 3 || h[1] == 5, "llm.c model file ", path, " has version ", h[1],
                   "; braid reads 3 (fp32) and 5 (bf16)");
  for (int i = 2; i <= 7; ++i)
    BRAID_DATA_CHECK(h[i] > 0, "llm.c model file ", path, ": header field ", i, " is ", h[i], ", expected > 0");
  const int64_t Vp_file = h[7];
  BRAID_DATA_CHECK(Vp_file >= h[3], "llm.c model file ", path, ": padded vocabulary ", Vp_file, " < vocabulary ", h[3]);
  ModelWeights w = weights_for_shape(h[2], h[3], h[4], h[5], h[6], "llm.c model file " + path);
  const model::GPTConfig& c = w.config;
  const size_t esz = h[1] == 3 ? 4 : 2;
  // Expected size: braid's tensors with wte at the file's padded row count.
  uint64_t elems = 0;
  for_each_llmc_tensor(c, [&](const model::ParamInfo& p) {
    elems += p.name == "wte.weight" ? static_cast<uint64_t>(Vp_file * c.n_embd) : p.numel;
  });
  BRAID_DATA_CHECK(in.size() == sizeof h + elems * esz, "llm.c model file ", path, " has ", in.size(),
                   " bytes; its header's sizes need ", sizeof h + elems * esz);
  std::vector<unsigned char> buf;
  for_each_llmc_tensor(c, [&](const model::ParamInfo& p) {
    const bool wte = p.name == "wte.weight";
    const size_t n = wte ? static_cast<size_t>(Vp_file * c.n_embd) : p.numel;
    buf.resize(n * esz);
    BRAID_DATA_CHECK(in.read(buf.data(), buf.size()), "llm.c model file ", path, " is cut short in ", p.name);
    // Only the real vocabulary rows: braid's padding may differ from the file's and stays zero.
    const size_t keep = wte ? static_cast<size_t>(c.vocab_size * c.n_embd) : n;
    float* dst = w.params.data() + p.offset;
    for (size_t i = 0; i < keep; ++i) dst[i] = element(buf.data(), esz == 4 ? "F32" : "BF16", i);
  });
  return w;
}

}  // namespace braid::formats
