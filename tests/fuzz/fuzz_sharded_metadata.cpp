// The sharded checkpoint's metadata reader on any bytes: every refusal is a
// DataError (never a JSON exception, a crash or a sanitizer report), and what
// it accepts encodes and decodes back to the same bytes, with every piece
// inside its file and the pieces of each tensor and state adding up to it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "braid/core/error.h"
#include "braid/formats/sharded_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  braid::formats::ShardedMetadata m;
  try {
    m = braid::formats::decode_sharded_metadata(bytes, "fuzz");
  } catch (const braid::DataError&) {
    return 0;
  }
  for (const auto& p : m.pieces) {
    const auto& f = m.files.at(static_cast<size_t>(p.file));
    if (p.offset + p.bytes() > f.bytes || p.begin >= p.end || p.end > p.box.numel()) std::abort();
  }
  const std::string again = braid::formats::encode_sharded_metadata(m);
  braid::formats::ShardedMetadata back;
  try {
    back = braid::formats::decode_sharded_metadata(again, "fuzz");
  } catch (const braid::DataError&) {
    std::abort();  // what was accepted must survive its own encoding
  }
  if (braid::formats::encode_sharded_metadata(back) != again) std::abort();
  return 0;
}
