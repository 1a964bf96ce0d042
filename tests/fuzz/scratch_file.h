// The readers take paths: each input is written to one scratch file of this
// process (in the temporary directory), which the harness then reads.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace braid::fuzz {

inline const std::string& scratch_path() {
  static const std::string p =
      (std::filesystem::temp_directory_path() / ("braid_fuzz_" + std::to_string(::getpid()) + ".bin")).string();
  return p;
}

inline const std::string& write_scratch(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(scratch_path().c_str(), "wb");
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return scratch_path();
}

}  // namespace braid::fuzz
