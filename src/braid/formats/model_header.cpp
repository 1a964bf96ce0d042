#include "braid/formats/model_header.h"

#include "braid/core/error.h"

namespace braid::formats {

namespace {
constexpr int kBlockVersion = 1;
}  // namespace

nlohmann::json block_header(const model::GPTConfig& c) {
  using model::GPTConfig;
  return {{"version", kBlockVersion},
          {"norm", GPTConfig::norm_name(c.norm)},
          {"norm_eps", c.norm_eps},
          {"positions", GPTConfig::positions_name(c.positions)},
          {"rope_theta", c.rope_theta},
          {"rope_scaling",
           {{"factor", c.rope_scaling.factor},
            {"low_freq_factor", c.rope_scaling.low_freq_factor},
            {"high_freq_factor", c.rope_scaling.high_freq_factor},
            {"original_context", c.rope_scaling.original_context}}},
          {"n_kv_head", c.kv_heads()},
          {"mlp", GPTConfig::mlp_name(c.mlp)},
          {"mlp_hidden", c.hidden()},
          {"bias", c.bias},
          {"tied_head", c.tied_head}};
}

void read_block_header(const nlohmann::json& h, model::GPTConfig& c) {
  using model::GPTConfig;
  const GPTConfig gpt2;
  if (!h.contains("block")) {  // written before block parts were recorded: GPT-2
    c.n_kv_head = 0, c.mlp_hidden = 0;
    c.norm = gpt2.norm, c.norm_eps = gpt2.norm_eps, c.positions = gpt2.positions, c.rope_theta = gpt2.rope_theta;
    c.rope_scaling = gpt2.rope_scaling, c.mlp = gpt2.mlp, c.bias = gpt2.bias, c.tied_head = gpt2.tied_head;
    return;
  }
  const nlohmann::json& b = h.at("block");
  BRAID_CONFIG_CHECK(b.is_object(), "header field 'block' is ", b.dump(), ", expected an object");
  auto field = [&](const nlohmann::json& o, const char* k, bool (nlohmann::json::*is)() const noexcept,
                   const char* type) -> const nlohmann::json& {
    BRAID_CONFIG_CHECK(o.contains(k) && (o.at(k).*is)(), "header field 'block.", k, "' is ",
                       o.contains(k) ? o.at(k).dump() : std::string("missing"), ", expected ", type);
    return o.at(k);
  };
  using J = nlohmann::json;
  const int64_t version = field(b, "version", &J::is_number_integer, "an integer").get<int64_t>();
  BRAID_CONFIG_CHECK(version >= 1 && version <= kBlockVersion, "header field 'block.version' is ", version,
                     "; this braid reads versions 1 to ", kBlockVersion,
                     version > kBlockVersion ? " (a newer braid wrote it: read it with that braid)" : "");
  c.norm = GPTConfig::parse_norm(field(b, "norm", &J::is_string, "a string").get<std::string>());
  c.norm_eps = field(b, "norm_eps", &J::is_number, "a number").get<float>();
  c.positions = GPTConfig::parse_positions(field(b, "positions", &J::is_string, "a string").get<std::string>());
  c.rope_theta = field(b, "rope_theta", &J::is_number, "a number").get<double>();
  const J& rs = field(b, "rope_scaling", &J::is_object, "an object");
  c.rope_scaling.factor = field(rs, "factor", &J::is_number, "a number").get<double>();
  c.rope_scaling.low_freq_factor = field(rs, "low_freq_factor", &J::is_number, "a number").get<double>();
  c.rope_scaling.high_freq_factor = field(rs, "high_freq_factor", &J::is_number, "a number").get<double>();
  c.rope_scaling.original_context = field(rs, "original_context", &J::is_number_integer, "an integer").get<int64_t>();
  c.n_kv_head = field(b, "n_kv_head", &J::is_number_integer, "an integer").get<int64_t>();
  c.mlp = GPTConfig::parse_mlp(field(b, "mlp", &J::is_string, "a string").get<std::string>());
  c.mlp_hidden = field(b, "mlp_hidden", &J::is_number_integer, "an integer").get<int64_t>();
  c.bias = field(b, "bias", &J::is_boolean, "true or false").get<bool>();
  c.tied_head = field(b, "tied_head", &J::is_boolean, "true or false").get<bool>();
  BRAID_CONFIG_CHECK(c.n_kv_head >= 1 && c.mlp_hidden >= 1, "header fields 'block.n_kv_head' (", c.n_kv_head,
                     ") and 'block.mlp_hidden' (", c.mlp_hidden, ") must be >= 1");
}

}  // namespace braid::formats
