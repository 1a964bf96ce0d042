#include "braid/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/core/hash.h"

namespace braid::data {

// The ids are used in place: written from memory and mapped as they are.
static_assert(std::endian::native == std::endian::little, "token files hold little-endian ids");

namespace {

void put_le(std::vector<unsigned char>& buf, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) buf.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

[[noreturn]] void io_error(const char* op, const std::string& file) {
  throw ConfigError(detail::concat("cannot ", op, " ", file, ": ", std::strerror(errno),
                                   "; check that the directory is writable and has space"));
}

void pwrite_all(int fd, const void* p, size_t n, uint64_t off, const std::string& file) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, c, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) io_error("write", file);
    c += w, off += static_cast<uint64_t>(w), n -= static_cast<size_t>(w);
  }
}

void pread_all(int fd, void* p, size_t n, uint64_t off, const std::string& file) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::pread(fd, c, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) io_error("read back", file);
    if (r == 0) throw ConfigError(detail::concat("cannot read back ", file, ": it ended at byte ", off,
                                                 "; was it changed by another process?"));
    c += r, off += static_cast<uint64_t>(r), n -= static_cast<size_t>(r);
  }
}

}  // namespace

// ---- writing -------------------------------------------------------------------

TokenFileWriter::TokenFileWriter(std::string path, int64_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size) {
  BRAID_CHECK(vocab_size > 0 && vocab_size <= int64_t{kMaxWideVocab}, "token file ", path_, ": vocab_size ",
              vocab_size, " is not in [1, 2^31]");
  bytes_ = vocab_size > 65536 ? 4 : 2;
  file_ = std::make_unique<AtomicFile>(path_, "token file");
  block_.reserve(kTokenBlock);
}

namespace {
// ids (n) as `bytes`-wide little-endian values into out; and back.
void pack_ids(std::vector<unsigned char>& out, const uint32_t* ids, size_t n, int bytes) {
  out.resize(n * size_t(bytes));
  for (size_t i = 0; i < n; ++i) {
    if (bytes == 2) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(out.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(out.data() + 4 * i, ids + i, 4);
    }
  }
}
void unpack_ids(uint32_t* ids, const unsigned char* in, size_t n, int bytes) {
  for (size_t i = 0; i < n; ++i) {
    if (bytes == 2) {
      uint16_t v;
      std::memcpy(&v, in + 2 * i, 2);
      ids[i] = v;
    } else {
      std::memcpy(ids + i, in + 4 * i, 4);
    }
  }
}
}  // namespace

// The AtomicFile removes the temporary file unless finish() renamed it.
TokenFileWriter::~TokenFileWriter() = default;

template <typename T>
void TokenFileWriter::append_ids(const T* ids, size_t n) {
  BRAID_CHECK(!finished_, "token file ", path_, ": append after finish()");
  // Every id is checked first, so a bad one leaves the file as it was.
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(ids[i]);
    BRAID_CHECK(id >= 0 && id < vocab_size_, "token file ", path_, ": id ", id, " at position ", count_ + i,
                " is outside [0, ", vocab_size_, ")");
  }
  for (size_t i = 0; i < n;) {
    const size_t k = std::min(n - i, size_t{kTokenBlock} - block_.size());
    for (size_t j = 0; j < k; ++j) block_.push_back(static_cast<uint32_t>(ids[i + j]));
    i += k;
    count_ += k;
    if (block_.size() == kTokenBlock) write_block();
  }
}

void TokenFileWriter::append(const int32_t* ids, size_t n) { append_ids(ids, n); }
void TokenFileWriter::append(const uint16_t* ids, size_t n) { append_ids(ids, n); }

// Writes the buffered ids after those on disk, with their checksum.
void TokenFileWriter::write_block() {
  pack_ids(io_, block_.data(), block_.size(), bytes_);
  crcs_.push_back(crc32(io_.data(), io_.size()));
  pwrite_all(file_->fd(), io_.data(), io_.size(), uint64_t(bytes_) * on_disk_, file_->temp_path());
  on_disk_ += block_.size();
  block_.clear();
}

void TokenFileWriter::move_tail(uint64_t n, TokenFileWriter& to) {
  BRAID_CHECK(n <= count_ && &to != this && !finished_, "token file ", path_, ": cannot move ", n, " of ",
              count_, " ids");
  const uint64_t keep = count_ - n, b = uint64_t(bytes_);
  std::vector<uint32_t> buf;
  for (uint64_t i = keep; i < on_disk_;) {  // the tail's ids on disk, a block at a time
    const uint64_t k = std::min<uint64_t>(on_disk_ - i, kTokenBlock);
    buf.resize(k);
    io_.resize(b * k);
    pread_all(file_->fd(), io_.data(), b * k, b * i, file_->temp_path());
    unpack_ids(buf.data(), io_.data(), k, bytes_);
    to.append_ids(buf.data(), k);
    i += k;
  }
  if (keep >= on_disk_) {
    to.append_ids(block_.data() + (keep - on_disk_), count_ - keep);
    block_.resize(keep - on_disk_);
  } else {
    to.append_ids(block_.data(), block_.size());
    // Back to the whole blocks before `keep`; the block `keep` falls in is buffered again.
    const uint64_t whole = keep / kTokenBlock * kTokenBlock;
    block_.resize(keep - whole);
    io_.resize(b * block_.size());
    pread_all(file_->fd(), io_.data(), io_.size(), b * whole, file_->temp_path());
    unpack_ids(block_.data(), io_.data(), block_.size(), bytes_);
    if (::ftruncate(file_->fd(), static_cast<off_t>(b * whole)) != 0) io_error("truncate", file_->temp_path());
    on_disk_ = whole;
    crcs_.resize(whole / kTokenBlock);
  }
  count_ = keep;
}

void TokenFileWriter::finish() {
  BRAID_CHECK(!finished_, "token file ", path_, ": finish() twice");
  if (!block_.empty()) write_block();
  std::vector<unsigned char> head;
  head.insert(head.end(), kTokenFileMagic, kTokenFileMagic + 8);
  put_le(head, bytes_ == 4 ? kTokenFileVersionWide : kTokenFileVersion, 4);
  put_le(head, static_cast<uint64_t>(vocab_size_), 4);
  put_le(head, count_, 8);
  put_le(head, kTokenBlock, 4);
  put_le(head, crc32(head.data(), head.size()), 4);
  for (uint32_t c : crcs_) put_le(head, c, 4);
  // The ids move up past the header, last bytes first, so none is overwritten before it is read.
  const int fd = file_->fd();
  const std::string& tmp = file_->temp_path();
  const uint64_t chunk = uint64_t(bytes_) * kTokenBlock;
  io_.resize(chunk);  // the buffer of the move
  for (uint64_t end = uint64_t(bytes_) * count_; end > 0;) {
    const uint64_t n = std::min(end, chunk);
    pread_all(fd, io_.data(), n, end - n, tmp);
    pwrite_all(fd, io_.data(), n, end - n + head.size(), tmp);
    end -= n;
  }
  io_.clear();
  pwrite_all(fd, head.data(), head.size(), 0, tmp);
  file_->commit();
  finished_ = true;
}

void write_token_file(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab_size) {
  TokenFileWriter w(path, vocab_size);
  w.append(ids);
  w.finish();
}
void write_token_file(const std::string& path, const std::vector<uint16_t>& ids, int64_t vocab_size) {
  TokenFileWriter w(path, vocab_size);
  w.append(ids);
  w.finish();
}

// ---- mapping -------------------------------------------------------------------

MappedTokens MappedTokens::map(const std::string& path, uint64_t offset, uint64_t count, int bytes) {
  BRAID_CHECK((bytes == 2 || bytes == 4) && offset % uint64_t(bytes) == 0, "token file ", path, ": ids of ", bytes,
              " bytes at offset ", offset);
  MappedTokens m;
  if (count == 0) return m;  // mmap refuses length 0
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CONFIG_CHECK(fd >= 0, "token file ", path, " cannot be opened: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw ConfigError(detail::concat("token file ", path, " cannot be read: ", std::strerror(e)));
  }
  const uint64_t need = offset + uint64_t(bytes) * count;
  if (static_cast<uint64_t>(st.st_size) < need) {
    ::close(fd);
    throw DataError(detail::concat("token file ", path, " has ", st.st_size, " bytes, fewer than the ", need,
                                   " that its ", count, " ids need (truncated?); run `braid prepare-data` to "
                                   "(re)create it"));
  }
  // The map starts at byte 0 (mmap offsets must be page-aligned); the ids start `offset` bytes in.
  void* p = ::mmap(nullptr, need, PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    throw ConfigError(detail::concat("cannot map token file ", path, " (", need, " bytes): ", std::strerror(e),
                                     "; check the address-space limit (ulimit -v)"));
  m.base_ = p;
  m.map_bytes_ = need;
  m.data_ = static_cast<const unsigned char*>(p) + offset;
  m.size_ = count;
  m.wide_ = bytes == 4;
  return m;
}

MappedTokens::MappedTokens(MappedTokens&& o) noexcept
    : base_(o.base_), map_bytes_(o.map_bytes_), data_(o.data_), size_(o.size_), wide_(o.wide_) {
  o.base_ = nullptr, o.map_bytes_ = 0, o.data_ = nullptr, o.size_ = 0;
}

MappedTokens& MappedTokens::operator=(MappedTokens&& o) noexcept {
  if (this != &o) {
    release();
    base_ = o.base_, map_bytes_ = o.map_bytes_, data_ = o.data_, size_ = o.size_, wide_ = o.wide_;
    o.base_ = nullptr, o.map_bytes_ = 0, o.data_ = nullptr, o.size_ = 0;
  }
  return *this;
}

MappedTokens::~MappedTokens() { release(); }

void MappedTokens::release() {
  if (base_) ::munmap(base_, map_bytes_);
  base_ = nullptr;
}

// ---- reading -------------------------------------------------------------------

namespace {

constexpr uint32_t kGpt2Vocab = 50257;

// Position of the first id >= limit in ids[0, n), or n. The max runs vectorized.
template <typename Id>
size_t first_out_of_range(const Id* ids, size_t n, uint32_t limit) {
  Id mx = 0;
  for (size_t i = 0; i < n; ++i) mx = std::max(mx, ids[i]);
  if (mx < limit) return n;
  size_t i = 0;
  while (ids[i] < limit) ++i;
  return i;
}

// `count` GPT-2 ids at byte `offset` of `path` (llm.c, nanoGPT: no checksums), checked < 50257.
MappedTokens map_gpt2_ids(const std::string& path, uint64_t offset, uint64_t count, const char* kind) {
  MappedTokens ids = MappedTokens::map(path, offset, count);
  const size_t bad =
      first_out_of_range(static_cast<const uint16_t*>(ids.raw()), ids.size(), kGpt2Vocab);
  if (bad < ids.size())
    throw DataError(detail::concat(kind, " token file ", path, ": token ", ids[bad], " at position ", bad,
                                   " is not a GPT-2 id (< ", kGpt2Vocab, "); is it another tokenizer's file?"));
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
  tf.tokens = map_gpt2_ids(path, sizeof h, count, "llm.c");
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
    tf.tokens = map_gpt2_ids(path, 0, size / 2, "nanoGPT");
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
  if (tf.version != 1 && tf.version != kTokenFileVersion && tf.version != kTokenFileVersionWide)
    throw corrupt(detail::concat("version ", tf.version, ", this build reads versions 1 to ", kTokenFileVersionWide));
  const int bytes = tf.version == kTokenFileVersionWide ? 4 : 2;
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
  const uint32_t max_vocab = bytes == 4 ? kMaxWideVocab : 65536;
  if (tf.vocab_size == 0 || tf.vocab_size > max_vocab)
    throw corrupt(detail::concat("vocab_size ", tf.vocab_size, " is not in [1, ", max_vocab, "] (version ", tf.version,
                                 ")"));
  const uint64_t count = get_le(hdr + 16, 8);
  const uint64_t blocks = block ? (count + block - 1) / block : 0;
  if (count > size / uint64_t(bytes) || size != head + 4 * blocks + uint64_t(bytes) * count)
    throw corrupt(detail::concat("header says ", count, " tokens (", head + 4 * blocks + uint64_t(bytes) * count,
                                 " bytes) but the file has ", size, " bytes (truncated?)"));
  std::vector<unsigned char> crcs(4 * blocks);  // 4 bytes per block of ids
  if (blocks && !in.read(crcs.data(), crcs.size())) throw corrupt("short read");
  tf.tokens = MappedTokens::map(path, head + 4 * blocks, count, bytes);
  // Each block's checksum, then its ids, while its pages are fresh in cache;
  // a version-1 file (no checksums) is checked in blocks of the same size.
  const uint64_t step = block ? block : kTokenBlock;
  const unsigned char* all = static_cast<const unsigned char*>(tf.tokens.raw());
  for (uint64_t a = 0; a < count; a += step) {
    const uint64_t n = std::min(step, count - a);
    const unsigned char* ids = all + a * uint64_t(bytes);
    if (block && kVerifyChecksums && crc32(ids, uint64_t(bytes) * n) != get_le(crcs.data() + 4 * (a / block), 4))
      throw corrupt(detail::concat("the checksum of tokens ", a, "..", a + n - 1, " does not match (a changed byte)"));
    const size_t bad = bytes == 4 ? first_out_of_range(reinterpret_cast<const uint32_t*>(ids), n, tf.vocab_size)
                                  : first_out_of_range(reinterpret_cast<const uint16_t*>(ids), n, tf.vocab_size);
    if (bad < n)
      throw corrupt(detail::concat("token ", tf.tokens[a + bad], " at position ", a + bad, " >= vocab_size ",
                                   tf.vocab_size));
  }
  return tf;
}

}  // namespace braid::data
