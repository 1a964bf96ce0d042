// Checks a run makes before its first step, so that bad input fails at once
// with the values and the fix instead of after hours of training.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "braid/model/gpt.h"
#include "braid/train/options.h"

namespace braid::train {

/// Throws ConfigError when a token id of `train` (or of `val`, which is only
/// read when validation is on) is outside cfg's vocabulary, naming the id and
/// the --vocab-size that fits, or when `val` holds fewer than --seq-len + 1
/// tokens.
void check_token_data(const TrainOptions& opt, const model::GPTConfig& cfg, const std::vector<uint16_t>& train,
                      const std::vector<uint16_t>* val);

/// Throws ConfigError when a checkpoint could not be written to `path` (a
/// directory, or a folder this process cannot write in); creates missing
/// parent folders. Probes with a file named by pid: call it on one rank.
void check_writable(const std::string& path);

}  // namespace braid::train
