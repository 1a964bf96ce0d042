// The block parts of a model in a checkpoint header (the field "block"), so a
// checkpoint names the model it holds without the flags that built it.
// Headers written before the field existed hold GPT-2 blocks.
#pragma once
#include <nlohmann/json.hpp>

#include "braid/model/config.h"

namespace braid::formats {

/// The header field "block" of cfg: {"version": 1, "norm", "norm_eps",
/// "positions", "rope_theta", "rope_scaling": {"factor", "low_freq_factor",
/// "high_freq_factor", "original_context"}, "n_kv_head", "mlp", "mlp_hidden",
/// "bias", "tied_head"} (n_kv_head and mlp_hidden resolved, never 0).
nlohmann::json block_header(const model::GPTConfig& cfg);

/// Sets cfg's block parts from header h: from h["block"] when present, else
/// GPT-2's (the parts of every checkpoint written before the field). Throws
/// ConfigError naming the field when it is not an object of the fields above
/// with values of their types and known names, or of a newer version.
void read_block_header(const nlohmann::json& h, model::GPTConfig& cfg);

}  // namespace braid::formats
