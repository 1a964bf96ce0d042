// The safetensors reader on any bytes: a file it accepts has every tensor's
// byte range inside the file and of the size its shape and dtype need, and
// every refusal is a ConfigError / DataError (never a JSON exception, a crash
// or a sanitizer report).
#include <cstdint>
#include <cstdlib>

#include "braid/core/error.h"
#include "braid/formats/safetensors.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = braid::fuzz::write_scratch(data, size);
  try {
    const auto f = braid::formats::SafetensorsFile::read(path);
    for (const auto& [name, e] : f.entries()) {
      size_t n = braid::formats::safetensors_dtype_size(e.dtype);
      for (int64_t d : e.shape) n *= static_cast<size_t>(d);
      if (e.end > size || e.end - e.begin != n) std::abort();
      volatile unsigned char sink = e.end > e.begin ? f.data(name)[e.end - e.begin - 1] : 0;
      (void)sink;
    }
  } catch (const braid::ConfigError&) {
  }
  return 0;
}
