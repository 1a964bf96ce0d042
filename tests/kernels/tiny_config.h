// The model configuration the GPT kernel tests share: the `tiny` preset with a
// 100-token vocabulary padded to 128, so the head's padding columns are exercised.
#pragma once
#include "braid/model/config.h"

namespace testing_data {

inline braid::model::GPTConfig small_vocab_tiny() {
  braid::model::GPTConfig c = braid::model::GPTConfig::preset("tiny");
  c.name = "tiny-v100";
  c.vocab_size = 100;
  c.padded_vocab_size = 128;
  return c;
}

}  // namespace testing_data
