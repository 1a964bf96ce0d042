// Checkpoint files: parameters, AdamW moments and the step, each array
// checksummed, written atomically (temporary file, fsync, rename, directory
// fsync) so a crash at any point leaves either the old file or the new one.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "braid/formats/save_fault.h"

namespace braid::formats {

/// File layout, version 2 (little-endian, as x86 stores it):
///   offset 0    8 bytes  magic "BRAIDCKP"
///   offset 8    uint32   version (2)
///   offset 12   uint64   header length H (bytes, < 16 MiB)
///   offset 20   uint32   CRC-32 (zlib's, ISO 3309) of the H header bytes
///   offset 24   H bytes  header: JSON object (model sizes, step, n_params, seed,
///                        global_batch, seq_len, optional block_size and
///                        loss_scale, and "crc32": the CRC-32 of each payload
///                        array). A model imported from another format has
///                        "source" (e.g. "hf", "llmc") and step, global_batch,
///                        seq_len 0.
///   offset 24+H          payload: three f32 arrays of n_params elements:
///                        parameters, AdamW m, AdamW v; nothing after them.
/// Version 1 (no checksums: magic, version, H, header, payload) is still read.
struct CheckpointView {
  nlohmann::json header;  // the fields above except "crc32", which the writer adds
  const float* params = nullptr;
  const float* m = nullptr;
  const float* v = nullptr;
};

/// Writes `path` atomically: `<path>.tmp.<pid>`, fsync, rename, fsync of the
/// directory. Throws Error (naming the file and errno's text) on I/O failure,
/// removing the temporary file.
void save_checkpoint(const std::string& path, const CheckpointView& ck, const SaveFault& fault = {});

/// What load_checkpoint and verify_checkpoint found.
struct CheckpointInfo {
  nlohmann::json header;   // validated field by field
  uint32_t version = 0;    // 1: written before checksums, loaded unverified
};

/// Reads `path` into params/m/v (each n_params floats, caller-owned) and checks
/// every checksum. Throws DataError naming the file and the damaged part or
/// header field, and ConfigError when its n_params differs from `n_params`
/// (another model: the message names the saved model's flags).
CheckpointInfo load_checkpoint(const std::string& path, size_t n_params, float* params, float* m, float* v);

/// Reads and checks `path`'s prelude and header (fields, header checksum, the
/// file's size against n_params) but not its payload: what a run needs to know
/// before it allocates anything. Throws ConfigError when it is missing and
/// DataError as load_checkpoint.
CheckpointInfo read_checkpoint_header(const std::string& path);

/// Checks every field of a checkpoint header (the fields above; "crc32" only
/// when with_crc32) and that n_params is what its model sizes need. Throws
/// DataError naming `path` and the field.
void validate_checkpoint_header(const std::string& path, const nlohmann::json& h, bool with_crc32);

/// Checks `path` (header fields, size, every checksum) without keeping the
/// payload (it is streamed in 1 MiB pieces). Throws DataError as load_checkpoint.
CheckpointInfo verify_checkpoint(const std::string& path);

}  // namespace braid::formats
