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
#include <string>
#include <vector>

namespace braid::data {

inline constexpr char kTokenFileMagic[8] = {'B', 'R', 'A', 'I', 'D', 'T', 'O', 'K'};
inline constexpr uint32_t kTokenFileVersion = 2;
inline constexpr size_t kTokenFileHeaderBytes = 32;   // version 2; version 1's is 24
inline constexpr uint32_t kTokenBlock = 1u << 19;     // tokens per checksummed block

/// How to read a token file: by its magic (braid, llm.c), or as nanoGPT's headerless ids.
enum class TokenFormat : uint8_t { detect, nanogpt };

inline constexpr int32_t kLlmcTokenMagic = 20240520;

struct TokenFile {
  uint32_t vocab_size = 0;
  uint32_t version = 0;          // braid: 1 is read without checksums; llm.c, nanoGPT: their own
  std::string format = "braid";  // "braid", "llmc" or "nanogpt"
  std::vector<uint16_t> tokens;  // (N,)
};

/// Writes `ids` (each in [0, vocab_size), vocab_size <= 65536) to `path`
/// atomically: creates parent directories, writes `<path>.tmp.<pid>`, fsyncs it
/// and renames it over `path`. Throws braid::Error on an out-of-range id and
/// braid::ConfigError on an I/O failure (naming the path).
void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size);
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids, int64_t vocab_size);

/// Reads and validates a token file (magic, version, header checksum, size,
/// each block's checksum as it is read, ids < vocab_size). Throws braid::ConfigError when it is missing and
/// braid::DataError when it is truncated or corrupt, each naming the path and
/// the fix ("run `braid prepare-data`"). llm.c and nanoGPT files hold GPT-2
/// ids (vocab_size 50257, no checksums); a file with no known magic is refused
/// unless `format` is nanogpt.
TokenFile read_token_file(const std::string& path, TokenFormat format = TokenFormat::detect);
/// "auto" -> detect, "nanogpt" -> nanogpt (case-insensitive); throws ConfigError naming both.
TokenFormat parse_token_format(const std::string& s);

}  // namespace braid::data
