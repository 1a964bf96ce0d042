// Checks a run makes before its first step, so that bad input fails at once
// with the values and the fix instead of after hours of training.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "braid/data/token_view.h"
#include "braid/model/gpt.h"
#include "braid/train/options.h"

namespace braid::train {

/// Throws ConfigError when a token id of `train` (or of `val`, which is only
/// read when validation is on; empty: none) is outside cfg's vocabulary, naming
/// the id and the --vocab-size that fits, or when `val` holds fewer than
/// --seq-len + 1 tokens.
void check_token_data(const TrainOptions& opt, const model::GPTConfig& cfg, data::TokenView train,
                      data::TokenView val);

/// --save / --save-every / --keep-last / --resume / --inject-save-fault taken
/// together: throws ConfigError for a flag that would do nothing or a bad value.
void check_checkpoint_flags(const TrainOptions& opt, int world_size);

/// Creates --save's directory (ConfigError when it is a file or not writable)
/// and removes the temporary files of interrupted saves, saying so when
/// verbose. Unless `resuming`, the directory must hold no checkpoint yet (a
/// fresh run would overwrite another run's): ConfigError naming the newest.
void prepare_save_dir(const std::string& dir, bool resuming, bool verbose);

}  // namespace braid::train
