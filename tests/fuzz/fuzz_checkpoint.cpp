// The checkpoint reader on any bytes: verify_checkpoint and load_checkpoint
// agree, a file that loads has a validated header and exactly the arrays it
// claims, and every refusal is a ConfigError / DataError (never a JSON or
// filesystem exception, a crash or a sanitizer report).
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "braid/core/error.h"
#include "braid/formats/checkpoint.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = braid::fuzz::write_scratch(data, size);
  bool verified = false;
  size_t n = 0;
  try {
    n = braid::formats::verify_checkpoint(path).header.at("n_params").get<size_t>();
    verified = true;
  } catch (const braid::ConfigError&) {
  }
  if (!verified) return 0;
  if (12 * n > size) std::abort();  // a verified file must hold its arrays
  std::vector<float> p(n), m(n), v(n);
  try {
    braid::formats::load_checkpoint(path, n, p.data(), m.data(), v.data());
  } catch (const braid::ConfigError&) {
    std::abort();  // verify accepted what load refuses
  }
  return 0;
}
