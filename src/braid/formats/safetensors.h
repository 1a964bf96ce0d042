// The safetensors file format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON header, then the raw little-endian tensor data.
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} (byte offsets into the data that follows the header) and may
// hold a "__metadata__" object of string values. Specification:
// https://github.com/huggingface/safetensors (README, "Format").
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace braid::formats {

/// One tensor to write: `data` holds product(shape) elements of `dtype`
/// ("F32", "BF16", "F16", "I64", ...; element size from safetensors_dtype_size).
struct TensorView {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

/// Bytes per element of a safetensors dtype name; 0 when the name is not one
/// of BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64.
size_t safetensors_dtype_size(const std::string& dtype);

/// Writes `tensors` (in the given order, data packed without gaps) and
/// `metadata` to `path` atomically (temporary file, fsync, rename). The header
/// is padded with spaces to a multiple of 8 bytes so every tensor is 8-byte
/// aligned. Throws ConfigError for an unknown dtype or a repeated name, and
/// Error naming the file on I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// A whole safetensors file in memory.
class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // byte range in the data section
  };

  /// Reads and validates `path`: header length inside the file, JSON object,
  /// every entry with a known dtype, a shape of non-negative sizes whose
  /// element count times the dtype size equals its byte range, ranges inside
  /// the data section, not overlapping and covering it. Throws DataError naming
  /// the file and the entry at fault; ConfigError when it cannot be opened.
  static SafetensorsFile read(const std::string& path);

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  /// Entry `name`; throws DataError naming the file when it is absent.
  const Entry& entry(const std::string& name) const;
  /// The raw bytes of entry `name` (little-endian elements).
  const unsigned char* data(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::vector<unsigned char> bytes_;  // the data section
};

}  // namespace braid::formats
