// Checkpoints: parameters, AdamW moments and the step, written atomically
// (temporary file, fsync, rename) so a crash never leaves a torn file.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace braid::train {

/// File layout: 8-byte magic "BRAIDCKP", uint32 version (1), uint64 header
/// length, header (JSON: model config, step, n_params, ...), then three f32
/// arrays of n_params elements: parameters, AdamW m, AdamW v.
struct CheckpointView {
  nlohmann::json header;  // must contain "step" and "n_params"
  const float* params = nullptr;
  const float* m = nullptr;
  const float* v = nullptr;
};

/// Writes atomically to `path` (parent directories created). Throws Error on I/O failure.
void save_checkpoint(const std::string& path, const CheckpointView& ck);

/// Reads the header and fills params/m/v (each n_params floats, caller-owned).
/// Throws ConfigError naming the path when the file is missing, corrupt, or its
/// n_params differs from `n_params` (a different model).
nlohmann::json load_checkpoint(const std::string& path, size_t n_params, float* params, float* m,
                               float* v);

}  // namespace braid::train
