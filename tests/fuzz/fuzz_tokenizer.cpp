// The GPT-2 tokenizer on any bytes: every id is in the vocabulary and
// decode(encode(s)) == s (byte-level BPE is lossless for every byte string).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "braid/data/tokenizer.h"

namespace {
std::unique_ptr<braid::data::Gpt2Tokenizer> tok;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tok = std::make_unique<braid::data::Gpt2Tokenizer>(
      braid::data::Gpt2Tokenizer::load(braid::data::Gpt2Tokenizer::default_dir()));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view s(reinterpret_cast<const char*>(data), size);
  const auto ids = tok->encode(s);
  for (int32_t id : ids)
    if (id < 0 || id >= tok->vocab_size()) std::abort();
  if (tok->decode(ids) != s) std::abort();
  return 0;
}
