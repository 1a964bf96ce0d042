#include "braid/data/token_file.h"


#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/core/hash.h"

namespace braid::data {
namespace {

void put_le(std::vector<unsigned char>& buf, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) buf.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

template <typename T>
void write_impl(const std::string& path, const std::vector<T>& ids, int64_t vocab_size) {
  BRAID_CHECK(vocab_size > 0 && vocab_size <= 65536, "token file ", path, ": vocab_size ",
              vocab_size, " does not fit uint16 ids");
  std::vector<unsigned char> body;
  body.reserve(2 * ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    BRAID_CHECK(id >= 0 && id < vocab_size, "token file ", path, ": id ", id, " at position ", i,
                " is outside [0, ", vocab_size, ")");
    put_le(body, static_cast<uint64_t>(id), 2);
  }
  std::vector<unsigned char> head;
  head.insert(head.end(), kTokenFileMagic, kTokenFileMagic + 8);
  put_le(head, kTokenFileVersion, 4);
  put_le(head, static_cast<uint64_t>(vocab_size), 4);
  put_le(head, ids.size(), 8);
  put_le(head, kTokenBlock, 4);
  put_le(head, crc32(head.data(), head.size()), 4);
  const size_t block_bytes = 2 * size_t{kTokenBlock};
  for (size_t a = 0; a < body.size(); a += block_bytes)
    put_le(head, crc32(body.data() + a, std::min(block_bytes, body.size() - a)), 4);

  AtomicFile out(path, "token file");
  out.writer().write(head.data(), head.size());
  out.writer().write(body.data(), body.size());
  out.commit();
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size) {
  write_impl(path, ids, vocab_size);
}
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids, int64_t vocab_size) {
  write_impl(path, ids, vocab_size);
}

namespace {

constexpr uint32_t kGpt2Vocab = 50257;

// `count` little-endian uint16 GPT-2 ids from `in` (already past any header).
std::vector<uint16_t> read_gpt2_ids(FileReader& in, uint64_t count, const std::string& path, const char* kind) {
  std::vector<unsigned char> raw(2 * count);
  if (count && !in.read(raw.data(), raw.size()))
    throw DataError(detail::concat(kind, " token file ", path, " is cut short"));
  std::vector<uint16_t> ids(count);
  for (uint64_t i = 0; i < count; ++i) {
    ids[i] = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    if (ids[i] >= kGpt2Vocab)
      throw DataError(detail::concat(kind, " token file ", path, ": token ", ids[i], " at position ", i,
                                     " is not a GPT-2 id (< ", kGpt2Vocab, "); is it another tokenizer's file?"));
  }
  return ids;
}

// llm.c's data file: 256 int32 (magic, version 1, token count), then uint16 ids.
TokenFile read_llmc(FileReader& in, const unsigned char* first24, const std::string& path) {
  int32_t h[256];
  std::memcpy(h, first24, 24);
  if (!in.read(reinterpret_cast<unsigned char*>(h) + 24, sizeof h - 24))
    throw DataError(detail::concat("llm.c token file ", path, " is shorter than its 1024-byte header"));
  if (h[1] != 1)
    throw DataError(detail::concat("llm.c token file ", path, " has version ", h[1],
                                   "; braid reads version 1 (uint16 GPT-2 ids)"));
  const uint64_t count = h[2] < 0 ? 0 : static_cast<uint64_t>(h[2]);
  if (h[2] < 0 || in.size() != sizeof h + 2 * count)
    throw DataError(detail::concat("llm.c token file ", path, ": header says ", h[2], " tokens but the file has ",
                                   in.size(), " bytes"));
  TokenFile tf;
  tf.format = "llmc";
  tf.version = 1;
  tf.vocab_size = kGpt2Vocab;
  tf.tokens = read_gpt2_ids(in, count, path, "llm.c");
  return tf;
}

}  // namespace

TokenFormat parse_token_format(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (l == "auto") return TokenFormat::detect;
  if (l == "nanogpt") return TokenFormat::nanogpt;
  throw ConfigError(detail::concat("--data-format '", s, "' is not known; use auto (braid and llm.c files, ",
                                   "by their magic) or nanogpt (headerless uint16 GPT-2 ids)"));
}

TokenFile read_token_file(const std::string& path, TokenFormat format) {
  const std::string fix = "; run `braid prepare-data` to (re)create it";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw ConfigError(detail::concat("token file ", path, " not found", fix));
  FileReader in(path, "token file");
  auto corrupt = [&](const std::string& why) {
    return DataError(detail::concat("token file ", path, " is corrupt: ", why, fix));
  };
  const uint64_t size = in.size();
  if (format == TokenFormat::nanogpt) {
    if (size % 2 != 0)
      throw DataError(detail::concat("nanoGPT token file ", path, " has an odd size (", size,
                                     " bytes); it should hold uint16 ids"));
    TokenFile tf;
    tf.format = "nanogpt";
    tf.vocab_size = kGpt2Vocab;
    tf.tokens = read_gpt2_ids(in, size / 2, path, "nanoGPT");
    return tf;
  }
  unsigned char hdr[kTokenFileHeaderBytes];
  if (size < 24 || !in.read(hdr, 24))
    throw corrupt("shorter than the 24-byte header; for nanoGPT's headerless uint16 files pass --data-format nanogpt");
  int32_t magic32;
  std::memcpy(&magic32, hdr, 4);
  if (magic32 == kLlmcTokenMagic) return read_llmc(in, hdr, path);
  if (std::memcmp(hdr, kTokenFileMagic, 8) != 0)
    throw corrupt("no known magic (braid's \"BRAIDTOK\", llm.c's 20240520); for nanoGPT's headerless "
                  "uint16 files pass --data-format nanogpt");
  TokenFile tf;
  tf.version = static_cast<uint32_t>(get_le(hdr + 8, 4));
  if (tf.version != 1 && tf.version != kTokenFileVersion)
    throw corrupt(detail::concat("version ", tf.version, ", this build reads versions 1 and ", kTokenFileVersion));
  uint64_t block = 0;
  uint64_t head = 24;
  if (tf.version >= 2) {
    if (!in.read(hdr + 24, 8)) throw corrupt("shorter than the 32-byte header");
    if (kVerifyChecksums && crc32(hdr, 28) != get_le(hdr + 28, 4)) throw corrupt("the header's checksum does not match");
    block = get_le(hdr + 24, 4);
    if (block == 0) throw corrupt("a checksum block of 0 tokens");
    head = kTokenFileHeaderBytes;
  }
  tf.vocab_size = static_cast<uint32_t>(get_le(hdr + 12, 4));
  if (tf.vocab_size == 0 || tf.vocab_size > 65536)
    throw corrupt(detail::concat("vocab_size ", tf.vocab_size, " is not in [1, 65536]"));
  const uint64_t count = get_le(hdr + 16, 8);
  const uint64_t blocks = block ? (count + block - 1) / block : 0;
  if (count > size / 2 || size != head + 4 * blocks + 2 * count)
    throw corrupt(detail::concat("header says ", count, " tokens (", head + 4 * blocks + 2 * count,
                                 " bytes) but the file has ", size, " bytes (truncated?)"));
  std::vector<unsigned char> crcs(4 * blocks);
  if (blocks && !in.read(crcs.data(), crcs.size())) throw corrupt("short read");
  std::vector<unsigned char> raw(2 * count);
  if (count && !in.read(raw.data(), raw.size())) throw corrupt("short read");
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t a = 2 * b * block, n = std::min<uint64_t>(2 * block, raw.size() - a);
    if (kVerifyChecksums && crc32(raw.data() + a, n) != get_le(crcs.data() + 4 * b, 4))
      throw corrupt(detail::concat("the checksum of tokens ", b * block, "..", b * block + n / 2 - 1,
                                   " does not match (a changed byte)"));
  }
  tf.tokens.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    tf.tokens[i] = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    if (tf.tokens[i] >= tf.vocab_size)
      throw corrupt(detail::concat("token ", tf.tokens[i], " at position ", i, " >= vocab_size ",
                                   tf.vocab_size));
  }
  return tf;
}

}  // namespace braid::data
