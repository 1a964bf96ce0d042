#include "braid/formats/hf_llama.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/formats/safetensors.h"
#include "braid/formats/weights_io.h"
#include "braid/model/param_layout.h"

namespace braid::formats {

namespace {

// One Hugging Face tensor: its name, shape, and where its rows sit in a braid
// tensor (rows [row0, row0 + rows) of braid's `braid_name`; all its columns).
struct HfPiece {
  std::string hf_name, braid_name;
  int64_t row0, rows, cols;
};

// Every HF tensor of cfg in transformers' order, mapped onto braid's tensors:
// q/k/v_proj are the row blocks of c_attn, gate/up_proj those of c_fc; the
// embedding and the head keep the real vocabulary rows only.
std::vector<HfPiece> llama_pieces(const model::GPTConfig& c) {
  const int64_t C = c.n_embd, KV = c.kv_heads() * c.head_size(), H = c.hidden(), V = c.vocab_size;
  std::vector<HfPiece> out = {{"model.embed_tokens.weight", "wte.weight", 0, V, C}};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".", b = "h." + std::to_string(l) + ".";
    out.push_back({h + "input_layernorm.weight", b + "ln_1.weight", 0, 1, C});
    const std::pair<const char*, std::pair<int64_t, int64_t>> qkv[] = {
        {"q_proj", {0, C}}, {"k_proj", {C, KV}}, {"v_proj", {C + KV, KV}}};
    for (const auto& [name, rows] : qkv) {
      out.push_back({h + "self_attn." + name + ".weight", b + "attn.c_attn.weight", rows.first, rows.second, C});
      if (c.bias) out.push_back({h + "self_attn." + name + ".bias", b + "attn.c_attn.bias", 0, 1, 0});
    }
    out.push_back({h + "self_attn.o_proj.weight", b + "attn.c_proj.weight", 0, C, C});
    if (c.bias) out.push_back({h + "self_attn.o_proj.bias", b + "attn.c_proj.bias", 0, 1, C});
    out.push_back({h + "post_attention_layernorm.weight", b + "ln_2.weight", 0, 1, C});
    out.push_back({h + "mlp.gate_proj.weight", b + "mlp.c_fc.weight", 0, H, C});
    if (c.bias) out.push_back({h + "mlp.gate_proj.bias", b + "mlp.c_fc.bias", 0, 1, 0});
    out.push_back({h + "mlp.up_proj.weight", b + "mlp.c_fc.weight", H, H, C});
    if (c.bias) out.push_back({h + "mlp.up_proj.bias", b + "mlp.c_fc.bias", 0, 1, 0});
    out.push_back({h + "mlp.down_proj.weight", b + "mlp.c_proj.weight", 0, C, H});
    if (c.bias) out.push_back({h + "mlp.down_proj.bias", b + "mlp.c_proj.bias", 0, 1, C});
  }
  out.push_back({"model.norm.weight", "ln_f.weight", 0, 1, C});
  if (!c.tied_head) out.push_back({"lm_head.weight", "lm_head.weight", 0, V, C});
  // A 1-D bias piece of a packed tensor: its elements are the rows of the weight's piece.
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].cols == 0) out[i] = {out[i].hf_name, out[i].braid_name, out[i - 1].row0, 1, out[i - 1].rows};
  return out;
}

// The HF shape of a piece ((rows, cols), or (cols) for a vector).
std::vector<int64_t> hf_shape_of(const HfPiece& p) {
  return p.rows == 1 && p.hf_name.find("proj.weight") == std::string::npos &&
                 p.hf_name.find("embed") == std::string::npos && p.hf_name != "lm_head.weight"
             ? std::vector<int64_t>{p.cols}
             : std::vector<int64_t>{p.rows, p.cols};
}

// Offset in the flat layout of the piece's first element (vectors: the
// piece's row0 counts elements).
size_t piece_offset(const HfPiece& p, const std::map<std::string, const model::ParamInfo*>& by_name) {
  const model::ParamInfo& t = *by_name.at(p.braid_name);
  const bool vector = t.shape.size() == 1;
  return t.offset + static_cast<size_t>(vector ? p.row0 : p.row0 * p.cols);
}

std::map<std::string, const model::ParamInfo*> index_by_name(const std::vector<model::ParamInfo>& table) {
  std::map<std::string, const model::ParamInfo*> m;
  for (const auto& p : table) m[p.name] = &p;
  return m;
}

}  // namespace

bool is_llama_block(const model::GPTConfig& c) {
  return c.norm == model::NormKind::rmsnorm && c.positions == model::PositionKind::rope &&
         c.mlp == model::MlpKind::swiglu;
}

model::GPTConfig llama_config_from_hf(const nlohmann::json& cfg, const std::string& where) {
  BRAID_DATA_CHECK(cfg.is_object(), where, " is not a JSON object");
  auto num = [&](const char* k) {
    BRAID_DATA_CHECK(cfg.contains(k) && cfg[k].is_number_integer() && cfg[k].get<int64_t>() > 0, where, ": field ",
                     k, " is missing or not a positive integer");
    return cfg[k].get<int64_t>();
  };
  auto real = [&](const char* k, double dflt) {
    if (!cfg.contains(k)) return dflt;
    BRAID_DATA_CHECK(cfg[k].is_number(), where, ": field ", k, " is ", cfg[k].dump(), ", expected a number");
    return cfg[k].get<double>();
  };
  auto flag = [&](const char* k, bool dflt) {
    if (!cfg.contains(k)) return dflt;
    BRAID_DATA_CHECK(cfg[k].is_boolean(), where, ": field ", k, " is ", cfg[k].dump(), ", expected true or false");
    return cfg[k].get<bool>();
  };
  const std::string type = weights_io::string_or(cfg, "model_type", "", where);
  BRAID_CONFIG_CHECK(type == "llama", where, " describes a '", type, "' model; braid imports Llama (model_type llama)");
  const std::string act = weights_io::string_or(cfg, "hidden_act", "silu", where);
  BRAID_CONFIG_CHECK(act == "silu", where, ": hidden_act '", act, "'; braid's SwiGLU gates with silu");
  model::GPTConfig c = model::GPTConfig::preset("llama-tiny");
  c.n_embd = num("hidden_size"), c.mlp_hidden = num("intermediate_size"), c.n_layer = num("num_hidden_layers");
  c.n_head = num("num_attention_heads");
  c.n_kv_head = cfg.contains("num_key_value_heads") && !cfg["num_key_value_heads"].is_null()
                    ? num("num_key_value_heads") : c.n_head;
  // transformers' LlamaConfig defaults where a field may be left out.
  c.vocab_size = num("vocab_size");
  c.block_size = cfg.contains("max_position_embeddings") ? num("max_position_embeddings") : 2048;
  c.padded_vocab_size = model::GPTConfig::pad_vocab(c.vocab_size);
  if (cfg.contains("head_dim") && !cfg["head_dim"].is_null())
    BRAID_CONFIG_CHECK(num("head_dim") * c.n_head == c.n_embd, where, ": head_dim ", num("head_dim"), " x ",
                       c.n_head, " heads != hidden_size ", c.n_embd, "; braid's heads split the width");
  c.norm_eps = static_cast<float>(real("rms_norm_eps", 1e-6));
  c.rope_theta = real("rope_theta", 10000.0);
  const bool attention_bias = flag("attention_bias", false), mlp_bias = flag("mlp_bias", false);
  BRAID_CONFIG_CHECK(attention_bias == mlp_bias, where, ": attention_bias ", attention_bias, " and mlp_bias ",
                     mlp_bias, " differ; braid's linears all have biases or none");
  c.bias = attention_bias;
  c.tied_head = flag("tie_word_embeddings", false);
  c.rope_scaling = {};
  const nlohmann::json rs = cfg.contains("rope_scaling") ? cfg["rope_scaling"] : nlohmann::json();
  BRAID_DATA_CHECK(rs.is_null() || rs.is_object(), where, ": rope_scaling is ", rs.dump(), ", expected an object or null");
  const std::string rt =
      rs.is_object() ? weights_io::string_or(rs, "rope_type", weights_io::string_or(rs, "type", "default", where), where)
                     : "default";
  if (rt != "default") {  // "default": no scaling, as null
    BRAID_CONFIG_CHECK(rt == "llama3", where, ": rope_scaling type '", rt,
                       "'; braid computes none (default) and Llama 3's (llama3)");
    auto get = [&](const char* k) {
      BRAID_DATA_CHECK(rs.contains(k) && rs[k].is_number(), where, ": rope_scaling.", k, " is missing or not a number");
      return rs[k].get<double>();
    };
    BRAID_DATA_CHECK(rs.contains("original_max_position_embeddings") &&
                         rs["original_max_position_embeddings"].is_number_integer(),
                     where, ": rope_scaling.original_max_position_embeddings is missing or not an integer");
    c.rope_scaling = {get("factor"), get("low_freq_factor"), get("high_freq_factor"),
                      rs["original_max_position_embeddings"].get<int64_t>()};
  }
  c.name = "hf llama";
  c.validate();
  return c;
}

nlohmann::ordered_json llama_hf_config(const model::GPTConfig& c) {
  nlohmann::ordered_json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.hidden()},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.kv_heads()},
      {"head_dim", c.head_size()},
      {"hidden_act", "silu"},
      {"rms_norm_eps", c.norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", nullptr},
      {"max_position_embeddings", c.block_size},
      {"attention_bias", c.bias},
      {"attention_dropout", 0.0},
      {"mlp_bias", c.bias},
      {"tie_word_embeddings", c.tied_head},
      {"vocab_size", c.vocab_size},
      {"initializer_range", 0.02},
      {"pretraining_tp", 1},
      {"use_cache", true},
      {"torch_dtype", "float32"}};
  if (c.rope_scaling.factor != 1.0)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_context}};
  if (c.vocab_size == 50257) j["bos_token_id"] = 50256, j["eos_token_id"] = 50256;  // GPT-2's <|endoftext|>
  return j;
}

void export_hf_llama(const ModelWeights& w, const std::string& dir, const std::string& tokenizer_dir) {
  const model::GPTConfig& c = w.config;
  BRAID_CONFIG_CHECK(is_llama_block(c), "braid export --format hf: model '", c.name, "' has a ",
                     model::GPTConfig::norm_name(c.norm), " / ", model::GPTConfig::positions_name(c.positions), " / ",
                     model::GPTConfig::mlp_name(c.mlp), " block with ", c.kv_heads(), " key/value heads for ", c.n_head,
                     " query heads and an MLP of ", c.hidden(), " for width ", c.n_embd,
                     ": GPT2LMHeadModel needs as many key/value heads as heads and an MLP of 4 x width, "
                     "LlamaForCausalLM rmsnorm / rope / swiglu; no Hugging Face class computes it");
  make_writable_directory(dir, "braid export");
  // A sharded export left in the directory would be read instead of this one
  // (braid and this export's own readers prefer the index): refuse, losing nothing.
  std::error_code ec;
  BRAID_CONFIG_CHECK(!std::filesystem::exists(dir + "/model.safetensors.index.json", ec), "braid export: ", dir,
                     " holds a sharded model (model.safetensors.index.json) that a reader would take instead of "
                     "the model.safetensors written now; export into an empty directory or remove that index and its shards");
  const auto table = model::param_table(c);
  const auto by_name = index_by_name(table);
  std::vector<TensorView> views;
  for (const HfPiece& p : llama_pieces(c))
    views.push_back({p.hf_name, "F32", hf_shape_of(p), w.params.data() + piece_offset(p, by_name)});
  write_safetensors(dir + "/model.safetensors", views, {{"format", "pt"}});
  weights_io::write_text(dir + "/config.json", llama_hf_config(c).dump(2) + "\n", "config.json");
  // The vocabulary it was trained with: GPT-2's BPE under Hugging Face's names.
  weights_io::write_text(dir + "/vocab.json", weights_io::read_text(tokenizer_dir + "/encoder.json", "tokenizer file"), "vocab.json");
  weights_io::write_text(dir + "/merges.txt", weights_io::read_text(tokenizer_dir + "/vocab.bpe", "tokenizer file"), "merges.txt");
  const nlohmann::ordered_json tok = {{"tokenizer_class", "GPT2Tokenizer"},
                                      {"bos_token", "<|endoftext|>"},
                                      {"eos_token", "<|endoftext|>"},
                                      {"unk_token", "<|endoftext|>"},
                                      {"model_max_length", c.block_size}};
  weights_io::write_text(dir + "/tokenizer_config.json", tok.dump(2) + "\n", "tokenizer_config.json");
}

namespace {

// The safetensors files of `dir` by tensor name: model.safetensors, or the
// shards model.safetensors.index.json's weight_map names.
struct TensorSource {
  std::map<std::string, std::shared_ptr<SafetensorsFile>> files;  // by file name
  std::map<std::string, SafetensorsFile*> by_tensor;
};

TensorSource open_tensors(const std::string& dir) {
  TensorSource s;
  const std::string index = dir + "/model.safetensors.index.json";
  std::error_code ec;
  // Both forms at once: which holds the model is not knowable; refuse.
  BRAID_DATA_CHECK(!std::filesystem::exists(index, ec) || !std::filesystem::exists(dir + "/model.safetensors", ec),
                   dir, " holds both model.safetensors and model.safetensors.index.json; keep the one that is "
                   "the model and remove the other");
  if (!std::filesystem::exists(index, ec)) {
    auto f = std::make_shared<SafetensorsFile>(SafetensorsFile::read(dir + "/model.safetensors"));
    for (const auto& [name, e] : f->entries()) s.by_tensor[name] = f.get();
    s.files["model.safetensors"] = std::move(f);
    return s;
  }
  const nlohmann::json j = parse_hf_index(weights_io::read_text(index, "safetensors index"), index);
  for (const auto& [tensor, file] : j.at("weight_map").items()) {
    const std::string fname = file.get<std::string>();
    auto& f = s.files[fname];
    if (!f) f = std::make_shared<SafetensorsFile>(SafetensorsFile::read(dir + "/" + fname));
    BRAID_DATA_CHECK(f->contains(tensor), index, " maps tensor ", tensor, " to ", fname, ", which does not hold it");
    s.by_tensor[tensor] = f.get();
  }
  return s;
}

// Every tensor of the directory is one the configuration reads (older
// checkpoints' rotary `inv_freq` buffers aside): a tensor left over means the
// configuration and the weights disagree (fewer layers, a tied head beside a
// trained lm_head), and reading on would silently drop trained weights.
void check_all_used(const TensorSource& src, const std::vector<HfPiece>& pieces, const std::string& dir) {
  std::map<std::string, bool> used;
  for (const HfPiece& p : pieces) used[p.hf_name] = true;
  std::string unused;
  size_t n = 0;
  for (const auto& [name, file] : src.by_tensor) {
    if (used.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (n++ < 4) unused += (unused.empty() ? "" : ", ") + name;
  }
  BRAID_DATA_CHECK(n == 0, dir, " holds ", n, " tensor(s) its config.json does not use (", unused,
                   n > 4 ? ", ..." : "", "); the configuration and the weights disagree (layer count, "
                   "tie_word_embeddings, biases): fix config.json");
}

}  // namespace

nlohmann::json parse_hf_index(const std::string& text, const std::string& where) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  BRAID_DATA_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), where,
                   " is not a JSON object with a weight_map object");
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    BRAID_DATA_CHECK(file.is_string(), where, ": weight_map[", tensor, "] is ", file.dump(), ", expected a file name");
    const std::string f = file.get<std::string>();
    BRAID_DATA_CHECK(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..", where, ": weight_map[",
                     tensor, "] names '", f, "', which is not a file of the directory");
  }
  return j;
}

ModelWeights import_hf_llama(const std::string& dir) {
  const std::string cpath = dir + "/config.json";
  const nlohmann::json cfg = nlohmann::json::parse(weights_io::read_text(cpath, "Hugging Face config"), nullptr, false);
  ModelWeights w;
  w.config = llama_config_from_hf(cfg, cpath);
  w.model = "llama-tiny";  // the preset under the header's block and sizes
  w.config.name = w.config.name_from(w.model);
  const auto table = model::param_table(w.config);
  w.params.assign(model::unit_bounds(w.config).back(), 0.f);
  const auto by_name = index_by_name(table);
  const TensorSource src = open_tensors(dir);
  const std::vector<HfPiece> pieces = llama_pieces(w.config);
  check_all_used(src, pieces, dir);
  for (const HfPiece& p : pieces) {
    auto it = src.by_tensor.find(p.hf_name);
    BRAID_DATA_CHECK(it != src.by_tensor.end(), dir, ": tensor ", p.hf_name, " is missing");
    const SafetensorsFile& f = *it->second;
    const SafetensorsFile::Entry& e = f.entry(p.hf_name);
    const std::vector<int64_t> want = hf_shape_of(p);
    BRAID_DATA_CHECK(e.shape == want, f.path(), ": tensor ", p.hf_name, " has shape ", nlohmann::json(e.shape).dump(),
                     ", expected ", nlohmann::json(want).dump(), " for the sizes in config.json");
    BRAID_DATA_CHECK(e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16", f.path(), ": tensor ", p.hf_name,
                     " is ", e.dtype, "; braid reads F32, BF16 and F16");
    const unsigned char* data = f.data(p.hf_name);
    float* dst = w.params.data() + piece_offset(p, by_name);
    const size_t n = static_cast<size_t>(p.rows * p.cols);
    for (size_t i = 0; i < n; ++i) dst[i] = weights_io::element(data, e.dtype, i);
  }
  return w;
}

}  // namespace braid::formats
