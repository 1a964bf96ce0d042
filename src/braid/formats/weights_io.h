// Helpers the weight converters share (gpt2_weights.cpp, hf_llama.cpp): a
// whole small file as text, an atomic text write, and one element of a
// safetensors tensor widened to f32.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include <nlohmann/json.hpp>

namespace braid::formats::weights_io {

/// The bytes of `path`; throws ConfigError naming `what` and the path when it cannot be opened.
inline std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  BRAID_CONFIG_CHECK(in.good(), what, " ", path, " cannot be opened");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// Writes `text` to `path` atomically (temporary file, fsync, rename).
inline void write_text(const std::string& path, const std::string& text, const std::string& what) {
  AtomicFile f(path, what);
  f.writer().write(text.data(), text.size());
  f.commit();
}

/// Element e of a little-endian tensor of safetensors dtype t ("F32", "BF16", "F16"), as f32.
inline float element(const unsigned char* p, const std::string& t, size_t e) {
  if (t == "F32") {
    float f;
    std::memcpy(&f, p + 4 * e, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * e, 2);
  return t == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
}

/// Field `key` of a config.json object as a string, `dflt` when absent; throws
/// DataError naming `where` and the field when it holds another type.
inline std::string string_or(const nlohmann::json& j, const char* key, const std::string& dflt,
                             const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  BRAID_DATA_CHECK(j[key].is_string(), where, ": field ", key, " is ", j[key].dump(), ", expected a string");
  return j[key].get<std::string>();
}

/// The same for a true / false field.
inline bool bool_or(const nlohmann::json& j, const char* key, bool dflt, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  BRAID_DATA_CHECK(j[key].is_boolean(), where, ": field ", key, " is ", j[key].dump(), ", expected true or false");
  return j[key].get<bool>();
}

}  // namespace braid::formats::weights_io
