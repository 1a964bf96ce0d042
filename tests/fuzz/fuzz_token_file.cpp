// The token-file reader on any bytes (versions 1 to 3, llm.c's): it returns a
// file whose every id is below its vocabulary, or throws ConfigError /
// DataError; nothing else.
#include <cstdint>
#include <cstdlib>

#include "braid/core/error.h"
#include "braid/data/token_file.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tf = braid::data::read_token_file(braid::fuzz::write_scratch(data, size));
    // Either width (version 3: uint32 ids).
    for (size_t i = 0; i < tf.tokens.size(); ++i)
      if (tf.tokens[i] >= tf.vocab_size) std::abort();  // the reader let an out-of-range id through
  } catch (const braid::ConfigError&) {
  }
  return 0;
}
