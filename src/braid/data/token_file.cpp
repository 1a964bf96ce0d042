#include "braid/data/token_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include "braid/core/error.h"
#include "braid/core/file_io.h"

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
  std::vector<unsigned char> buf;
  buf.reserve(kTokenFileHeaderBytes + 2 * ids.size());
  buf.insert(buf.end(), kTokenFileMagic, kTokenFileMagic + 8);
  put_le(buf, kTokenFileVersion, 4);
  put_le(buf, static_cast<uint64_t>(vocab_size), 4);
  put_le(buf, ids.size(), 8);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    BRAID_CHECK(id >= 0 && id < vocab_size, "token file ", path, ": id ", id, " at position ", i,
                " is outside [0, ", vocab_size, ")");
    put_le(buf, static_cast<uint64_t>(id), 2);
  }

  AtomicFile out(path, "token file");
  out.writer().write(buf.data(), buf.size());
  out.commit();
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size) {
  write_impl(path, ids, vocab_size);
}
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids, int64_t vocab_size) {
  write_impl(path, ids, vocab_size);
}

TokenFile read_token_file(const std::string& path) {
  const std::string fix = "; run `braid prepare-data` to (re)create it";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw ConfigError(detail::concat("token file ", path, " not found", fix));
  struct Closer {
    std::FILE* f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  auto corrupt = [&](const std::string& why) {
    return DataError(detail::concat("token file ", path, " is corrupt: ", why, fix));
  };

  unsigned char hdr[kTokenFileHeaderBytes];
  if (std::fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) throw corrupt("shorter than the 24-byte header");
  if (std::memcmp(hdr, kTokenFileMagic, 8) != 0) throw corrupt("bad magic (expected \"BRAIDTOK\")");
  const uint32_t version = static_cast<uint32_t>(get_le(hdr + 8, 4));
  if (version != kTokenFileVersion)
    throw corrupt(detail::concat("version ", version, ", this build reads version ", kTokenFileVersion));
  TokenFile tf;
  tf.vocab_size = static_cast<uint32_t>(get_le(hdr + 12, 4));
  if (tf.vocab_size == 0 || tf.vocab_size > 65536)
    throw corrupt(detail::concat("vocab_size ", tf.vocab_size, " is not in [1, 65536]"));
  const uint64_t count = get_le(hdr + 16, 8);

  struct stat st {};
  if (::fstat(::fileno(f), &st) != 0) throw corrupt("cannot stat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (count > (size - kTokenFileHeaderBytes) / 2 || size != kTokenFileHeaderBytes + 2 * count)
    throw corrupt(detail::concat("header says ", count, " tokens (", kTokenFileHeaderBytes + 2 * count,
                                 " bytes) but the file has ", size, " bytes (truncated?)"));
  std::vector<unsigned char> raw(2 * count);
  if (count && std::fread(raw.data(), 1, raw.size(), f) != raw.size()) throw corrupt("short read");
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
