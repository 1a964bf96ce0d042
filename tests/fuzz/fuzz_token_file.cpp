// The token-file reader on any bytes: it returns a file whose every id is
// below its vocabulary, or throws ConfigError / DataError; nothing else.
#include <cstdint>
#include <cstdlib>

#include "braid/core/error.h"
#include "braid/data/token_file.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto tf = braid::data::read_token_file(braid::fuzz::write_scratch(data, size));
    for (uint16_t t : tf.tokens)
      if (t >= tf.vocab_size) std::abort();  // the reader let an out-of-range id through
  } catch (const braid::ConfigError&) {
  }
  return 0;
}
