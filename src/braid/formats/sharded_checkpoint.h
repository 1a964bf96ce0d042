// Sharded checkpoints: a directory in which every rank writes the pieces of the
// training state it owns, and a metadata file, written last, that commits the
// checkpoint (after PyTorch DCP's `.metadata` and Megatron-LM's
// dist_checkpointing ShardedTensor with its `flattened_range`).
//
// A piece is a box of one global tensor (offsets and shape in the whole
// model's layout, TP = PP = 1) and a range of that box's row-major
// flattening: a TP slice is a box, a ZeRO-3 / FSDP shard of it a range. Its
// values are little-endian f32 in one piece file, checksummed per chunk of
// kPieceChunkBytes so that a partial read is checked too.
//
// Directory layout (docs/FORMATS.md):
//   metadata          the commit: prelude + JSON (below); absent = interrupted save
//   r<R>.<token>.bin  rank R's pieces, back to back; <token> names one save
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/formats/save_fault.h"

namespace braid::formats {

/// Bytes per checksummed chunk of a piece.
inline constexpr uint64_t kPieceChunkBytes = uint64_t{1} << 20;
/// Ranges held by several ranks and longer than this are split among them
/// when a save assigns writers (elements: 1 MiB of f32), so the bytes each
/// rank writes stay balanced (train/checkpoint_pieces.h).
inline constexpr int64_t kSplitElems = int64_t{1} << 18;
/// The metadata file's name inside a checkpoint directory.
inline constexpr const char* kMetadataFile = "metadata";

/// A 2-D box of a global tensor: rows [row0, row0 + rows) x columns
/// [col0, col0 + cols). A 1-D tensor of n elements is one row of n columns.
struct TensorBox {
  int64_t row0 = 0, col0 = 0, rows = 0, cols = 0;
  int64_t numel() const { return rows * cols; }
  bool operator==(const TensorBox&) const = default;
};

/// Where a piece and a request share elements: `len` elements at element
/// `src` of the piece's range and element `dst` of the request's range.
struct OverlapRun {
  int64_t src, dst, len;
};

/// The runs where range [ab, ae) of box a's flattening and range [bb, be) of
/// box b's flattening (boxes of one tensor) hold the same elements, in
/// increasing order of both src and dst; consecutive runs are merged.
std::vector<OverlapRun> overlap_runs(const TensorBox& a, int64_t ab, int64_t ae, const TensorBox& b, int64_t bb,
                                     int64_t be);

/// The optimizer states a piece can hold (PyTorch's AdamW state names).
inline constexpr const char* kPieceStates[3] = {"param", "exp_avg", "exp_avg_sq"};

struct TensorMeta {
  std::string name;            // Hugging Face GPT-2 name, e.g. "h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // the whole tensor's (1 or 2 dimensions)
  TensorBox whole() const;
};

struct PieceFileMeta {
  std::string name;    // file name inside the directory
  int rank = 0;        // the rank that wrote it
  uint64_t bytes = 0;  // its size
};

struct PieceMeta {
  int64_t tensor = 0;  // index into ShardedMetadata::tensors
  int state = 0;       // index into kPieceStates
  TensorBox box;
  int64_t begin = 0, end = 0;  // the range of box's flattening held (elements)
  int64_t file = 0;            // index into ShardedMetadata::files
  uint64_t offset = 0;         // byte offset of the first element in the file
  std::vector<uint32_t> crc32;  // CRC-32 of each kPieceChunkBytes chunk of the piece's bytes
  uint64_t bytes() const { return static_cast<uint64_t>(end - begin) * 4; }
};

struct ShardedMetadata {
  nlohmann::json header;  // the single-file checkpoint's header fields (checkpoint.h), without "crc32"
  nlohmann::json layout;  // the saving run's layout (world, tp, pp, dp, cp, ...), for people and tools
  std::vector<TensorMeta> tensors;
  std::vector<PieceFileMeta> files;
  std::vector<PieceMeta> pieces;
};

/// Metadata file, version 1 (little-endian):
///   offset 0   8 bytes  magic "BRAIDSHD"
///   offset 8   uint32   version (1)
///   offset 12  uint64   JSON length J (bytes, < 1 GiB)
///   offset 20  uint32   CRC-32 of the J bytes
///   offset 24  J bytes  {"format": "braid-sharded-checkpoint", "chunk_bytes", "header",
///                        "layout", "tensors": [{name, shape}], "files": [{name, rank, bytes}],
///                        "pieces": [{tensor, state, box: [row0, col0, rows, cols],
///                        range: [begin, end], file, offset, crc32: [...]}]}
std::string encode_sharded_metadata(const ShardedMetadata& m);
/// Parses and checks every field (bounds, overlaps of a piece with its file, that
/// the pieces of each tensor and state add up to the tensor). Throws DataError
/// naming `path` and the field.
ShardedMetadata decode_sharded_metadata(const std::string& bytes, const std::string& path);

/// Writes dir/metadata atomically (temporary, fsync, rename, directory fsync);
/// `fault`'s before_rename / before_dir_fsync fire around the rename.
void write_sharded_metadata(const std::string& dir, const ShardedMetadata& m, const SaveFault& fault = {});
/// Reads dir/metadata. Throws ConfigError when it is missing (an interrupted
/// save) and DataError when it is damaged.
ShardedMetadata read_sharded_metadata(const std::string& dir);
/// Whether dir/metadata exists (the save committed; it may still be damaged).
bool has_sharded_metadata(const std::string& dir);

/// One rank's piece file: written as `<name>.tmp.<pid>`, then fsync'd and
/// renamed by finish() (the directory fsync is the committer's, rank 0's).
class PieceFileWriter {
 public:
  /// `armed`: whether `fault`'s payload / before_file_fsync phases apply here.
  PieceFileWriter(const std::string& dir, const std::string& name, const SaveFault& fault, bool armed);
  ~PieceFileWriter();
  /// Appends n f32 values as the next piece: returns its byte offset, fills its chunk CRCs.
  uint64_t append(const float* data, size_t n, std::vector<uint32_t>& crcs);
  void finish();
  uint64_t bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Reads the parts of a sharded checkpoint a rank needs: only the chunks that
/// hold requested elements are read (each checked against its CRC), through a
/// buffer of one chunk. Not thread-safe.
class ShardedCheckpointReader {
 public:
  /// Reads and checks dir/metadata (as read_sharded_metadata).
  explicit ShardedCheckpointReader(std::string dir);
  ~ShardedCheckpointReader();
  const ShardedMetadata& metadata() const { return meta_; }
  const std::string& dir() const { return dir_; }
  /// Index of tensor `name`, or -1.
  int64_t tensor_index(const std::string& name) const;
  /// Fills dst (end - begin floats) with elements [begin, end) of the row-major
  /// flattening of `box` of tensor `tensor`'s state `state` (kPieceStates).
  /// Throws DataError naming the piece's file and the rank that wrote it when
  /// a chunk is damaged or cut short, or when no pieces cover the request.
  void read(int64_t tensor, int state, const TensorBox& box, int64_t begin, int64_t end, float* dst);
  /// Bytes read from piece files so far.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  struct Files;
  std::string dir_;
  ShardedMetadata meta_;
  std::map<std::pair<int64_t, int>, std::vector<size_t>> by_tensor_;  // (tensor, state) -> pieces
  std::unique_ptr<Files> files_;
  std::vector<char> chunk_;  // the last chunk read
  int64_t chunk_piece_ = -1;
  uint64_t chunk_index_ = 0;
  uint64_t bytes_read_ = 0;
  const char* load_chunk(size_t piece, uint64_t c);
  void read_elements(size_t piece, int64_t first, int64_t n, float* dst);
};

/// Checks dir's metadata and every chunk of every piece (streamed a chunk at a
/// time), or with parts > 1 share `part` of that work: the pieces i with
/// i % parts == part (and, in part 0, the files' sizes), so that parts ranks
/// verify a checkpoint together. Returns the header. Throws DataError naming
/// the damaged piece's file and the rank that wrote it.
nlohmann::json verify_sharded_checkpoint(const std::string& dir, size_t part = 0, size_t parts = 1);

/// Checks checkpoint `path`, a sharded directory (verify_sharded_checkpoint)
/// or a single file (verify_checkpoint); returns its header.
nlohmann::json verify_any_checkpoint(const std::string& path);

/// The files of dir that its metadata does not name (left by an interrupted
/// save of the same step), or every file when it has no metadata.
std::vector<std::string> unreferenced_files(const std::string& dir);

}  // namespace braid::formats
