// Whole-file I/O with the durability rules every braid output follows: a file
// appears complete under its name or not at all (temporary file, fsync,
// rename, directory fsync), and a failed write leaves no temporary behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace braid {

/// False only in fuzzing builds (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, the
/// libFuzzer convention: tests/fuzz), so the fuzzers reach the parsers behind
/// the checksums instead of stopping at the first CRC-32.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
inline constexpr bool kVerifyChecksums = false;
#else
inline constexpr bool kVerifyChecksums = true;
#endif

/// Sequential writes to an open descriptor (retried on EINTR and short writes). Throws ConfigError naming
/// the file and errno's text on failure.
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void write(const void* p, size_t n);

 private:
  int fd_;
  std::string path_;
};

/// Writes `path` atomically: bytes go to `<path>.tmp.<pid>` (parent
/// directories created), sync() fsyncs it, rename_into_place() renames it over
/// `path`, sync_directory() fsyncs the directory so the rename is durable. The
/// destructor removes the temporary file when the rename did not happen.
/// `what` names the file in messages ("checkpoint", "token file").
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  FileWriter& writer() { return writer_; }
  void sync();
  void rename_into_place();
  void sync_directory();
  /// All four steps after the bytes are written.
  void commit();
  const std::string& temp_path() const { return tmp_; }
  /// The temporary file's descriptor (open for reading and writing) until
  /// sync(), for positioned I/O (pread, pwrite, ftruncate) beside writer().
  int fd() const { return fd_; }

 private:
  [[noreturn]] void fail(const char* op, const std::string& file);
  std::string path_, what_, tmp_;
  int fd_ = -1;
  FileWriter writer_;
  bool renamed_ = false;
};

/// fsyncs directory `dir` (so entries created or renamed in it are durable).
/// Throws ConfigError naming it on failure.
void sync_directory(const std::string& dir);

/// Creates `dir` and its missing parents, fsyncing each new entry's parent.
/// Throws ConfigError (naming `flag` and the directory) when it cannot be
/// created or is not a writable directory.
void make_writable_directory(const std::string& dir, const std::string& flag);

/// Sequential reads of a whole file. Throws ConfigError naming the file when
/// it cannot be opened; read() returns false at end of file.
class FileReader {
 public:
  FileReader(const std::string& path, const std::string& what);
  ~FileReader();
  FileReader(FileReader&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  FileReader& operator=(FileReader&&) = delete;

  uint64_t size() const { return size_; }
  /// Reads exactly n bytes; false when the file ends first. Throws DataError
  /// naming the file on a read error (EIO).
  bool read(void* p, size_t n);
  /// Reads exactly n bytes at byte `offset` (pread: the sequential position
  /// stays); false when the file ends first. Throws as read().
  bool read_at(uint64_t offset, void* p, size_t n);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace braid
