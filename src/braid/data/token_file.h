// Token files: the tokenized corpus that `braid prepare-data` writes and the
// data loader reads.
//
// Format, version 2 (all little-endian):
//   offset 0   8 bytes  magic "BRAIDTOK"
//   offset 8   uint32   version (2)
//   offset 12  uint32   vocab_size (every id is < vocab_size <= 65536)
//   offset 16  uint64   token count N
//   offset 24  uint32   tokens per checksum block B (524288: 1 MiB of ids)
//   offset 28  uint32   CRC-32 (zlib's) of bytes 0..27
//   offset 32  ceil(N / B) x uint32: CRC-32 of each block's id bytes
//   then       N x uint16 token ids
// Version 3 is the same with uint32 ids, for vocabularies over 65,536 (Llama
// 3's 128,256); writers use it only when the vocabulary does not fit uint16.
// Version 1 (no checksums: the 24-byte header, then the ids) is still read.
// Each document is preceded by the end-of-text token (50256 for GPT-2).
//
// Read as well: llm.c's token files (256 int32 header: magic 20240520, version
// 1, token count; then uint16 GPT-2 ids), recognised by their magic, and
// nanoGPT's headerless uint16 files (prepare.py's train.bin), which carry no
// magic and are read only when asked for (TokenFormat::nanogpt).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "braid/data/token_view.h"

namespace braid {
class AtomicFile;
}

namespace braid::data {

inline constexpr char kTokenFileMagic[8] = {'B', 'R', 'A', 'I', 'D', 'T', 'O', 'K'};
inline constexpr uint32_t kTokenFileVersion = 2;
inline constexpr uint32_t kTokenFileVersionWide = 3;  // uint32 ids
inline constexpr uint32_t kMaxWideVocab = uint32_t{1} << 31;  // ids stay int32 in the model
inline constexpr size_t kTokenFileHeaderBytes = 32;   // version 2; version 1's is 24
inline constexpr uint32_t kTokenBlock = 1u << 19;     // tokens per checksummed block

/// How to read a token file: by its magic (braid, llm.c), or as nanoGPT's headerless ids.
enum class TokenFormat : uint8_t { detect, nanogpt };

inline constexpr int32_t kLlmcTokenMagic = 20240520;

/// The ids of a token file as a read-only memory map (PROT_READ, MAP_SHARED):
/// ranks of one machine that map the same file share its pages in the page
/// cache, and nothing is copied. Move-only; unmaps on destruction. Zero ids map
/// nothing (data() is null). The file must not be truncated or rewritten in
/// place while mapped (reading a page past its end raises SIGBUS); braid's
/// writers replace files by rename, which leaves an open map intact.
class MappedTokens {
 public:
  MappedTokens() = default;
  /// Maps `count` ids of `bytes` each (2: uint16, 4: uint32) at byte `offset`
  /// (a multiple of `bytes`) of `path`; the map starts at byte 0, as mmap
  /// offsets must be page-aligned. Throws ConfigError naming the path when it
  /// cannot be opened or mapped, DataError when the file is shorter than
  /// offset + bytes * count bytes.
  static MappedTokens map(const std::string& path, uint64_t offset, uint64_t count, int bytes = 2);
  MappedTokens(MappedTokens&& o) noexcept;
  MappedTokens& operator=(MappedTokens&& o) noexcept;
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;
  ~MappedTokens();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// True when the ids are uint32 (a version-3 file).
  bool wide() const { return wide_; }
  uint32_t operator[](size_t i) const { return view()[i]; }
  /// The ids, of either width.
  TokenView view() const {
    return wide_ ? TokenView(std::span<const uint32_t>(static_cast<const uint32_t*>(data_), size_))
                 : TokenView(std::span<const uint16_t>(static_cast<const uint16_t*>(data_), size_));
  }
  operator TokenView() const { return view(); }
  /// The first id's bytes (uint16 or uint32 ids, per wide()).
  const void* raw() const { return data_; }

 private:
  void release();
  void* base_ = nullptr;  // the mapping: bytes [0, map_bytes_) of the file
  size_t map_bytes_ = 0;
  const void* data_ = nullptr;
  size_t size_ = 0;
  bool wide_ = false;
};

struct TokenFile {
  uint32_t vocab_size = 0;
  uint32_t version = 0;          // braid: 1 is read without checksums; llm.c, nanoGPT: their own
  std::string format = "braid";  // "braid", "llmc" or "nanogpt"
  MappedTokens tokens;           // (N,) ids, mapped read-only
};

/// Writes a version-2 token file (version 3, uint32 ids, when vocab_size
/// exceeds 65,536) from ids appended in pieces, in memory bounded by one
/// checksum block (1 or 2 MiB) plus 4 bytes per block: ids go to
/// `<path>.tmp.<pid>` (parent directories created) as they come, each block's
/// CRC-32 as it completes. finish() moves the ids up by the size of the header
/// and checksum table (known only then), writes those in front, fsyncs and
/// renames the file over `path`. A writer destroyed before finish() removes
/// its temporary file and leaves `path` as it was.
class TokenFileWriter {
 public:
  /// Throws braid::Error unless 0 < vocab_size <= 2^31, ConfigError when the
  /// temporary file cannot be created (naming it).
  TokenFileWriter(std::string path, int64_t vocab_size);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  /// Appends ids[0..n); each must be in [0, vocab_size), else braid::Error
  /// names the id and its position in the file (nothing of this call is kept).
  void append(const int32_t* ids, size_t n);
  void append(const uint16_t* ids, size_t n);
  void append(std::span<const int32_t> ids) { append(ids.data(), ids.size()); }
  void append(std::span<const uint16_t> ids) { append(ids.data(), ids.size()); }
  /// Moves the last n ids appended (n <= size()) to the end of `to` (another
  /// writer), reading them back in bounded pieces: a split that is known only
  /// once the whole stream has been written.
  void move_tail(uint64_t n, TokenFileWriter& to);
  /// Ids appended so far.
  uint64_t size() const { return count_; }
  const std::string& path() const { return path_; }
  /// Writes the header and checksums, fsyncs, renames into place and fsyncs
  /// the directory. Throws ConfigError naming the file on an I/O failure.
  void finish();

 private:
  template <typename T>
  void append_ids(const T* ids, size_t n);
  void write_block();
  std::string path_;
  int64_t vocab_size_;
  std::unique_ptr<AtomicFile> file_;
  uint64_t count_ = 0;            // ids appended
  uint64_t on_disk_ = 0;          // ids in the temporary file: whole blocks
  int bytes_ = 2;                 // per id on disk: 2, or 4 for a wide vocabulary
  std::vector<uint32_t> block_;   // the ids after them, fewer than kTokenBlock
  std::vector<unsigned char> io_; // a block's bytes as written or read back
  std::vector<uint32_t> crcs_;    // CRC-32 of each block on disk
  bool finished_ = false;
};

/// Writes `ids` (each in [0, vocab_size), vocab_size <= 2^31) to `path`
/// atomically with a TokenFileWriter. Throws braid::Error on an out-of-range
/// id and braid::ConfigError on an I/O failure (naming the path).
void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size);
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids, int64_t vocab_size);

/// Opens and validates a token file (magic, version, header checksum, size,
/// each block's checksum, ids < vocab_size), reading every page once, and
/// returns its ids mapped in place (MappedTokens: no copy). Throws
/// braid::ConfigError when it is missing and braid::DataError when it is
/// truncated or corrupt, each naming the path and the fix ("run `braid
/// prepare-data`"). llm.c and nanoGPT files hold GPT-2 ids (vocab_size 50257,
/// no checksums); a file with no known magic is refused unless `format` is
/// nanogpt.
TokenFile read_token_file(const std::string& path, TokenFormat format = TokenFormat::detect);
/// "auto" -> detect, "nanogpt" -> nanogpt (case-insensitive); throws ConfigError naming both.
TokenFormat parse_token_format(const std::string& s);

}  // namespace braid::data
