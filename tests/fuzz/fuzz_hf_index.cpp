// The sharded safetensors index reader (model.safetensors.index.json) on any
// bytes: an index it accepts maps every tensor to a file name inside the
// directory, and every refusal is a DataError (never a JSON exception, a
// crash or a sanitizer report).
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/formats/hf_llama.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nlohmann::json j =
        braid::formats::parse_hf_index(std::string(reinterpret_cast<const char*>(data), size), "index");
    for (const auto& [tensor, file] : j.at("weight_map").items()) {
      const std::string f = file.get<std::string>();
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") std::abort();
    }
  } catch (const braid::ConfigError&) {
  }
  return 0;
}
