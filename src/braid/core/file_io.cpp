#include "braid/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "braid/core/error.h"

namespace braid {

namespace fs = std::filesystem;

namespace {
[[noreturn]] void io_error(const std::string& op, const std::string& file) {
  throw ConfigError(detail::concat("cannot ", op, " ", file, ": ", std::strerror(errno),
                                   "; check that the directory exists, is writable and has space"));
}

std::string parent_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}
}  // namespace

void FileWriter::write(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      io_error("write", path_);
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) io_error("open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) io_error("fsync directory", dir);
}

void make_writable_directory(const std::string& dir, const std::string& flag) {
  std::error_code ec;
  BRAID_CONFIG_CHECK(!fs::exists(dir, ec) || fs::is_directory(dir, ec), flag, " ", dir,
                     " is a file, not a directory; pass a directory (it is created when missing)");
  // Create missing parents one by one so each new entry can be made durable.
  std::vector<fs::path> made;
  for (fs::path p = fs::path(dir); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) made.push_back(p);
  fs::create_directories(dir, ec);
  BRAID_CONFIG_CHECK(!ec, flag, " ", dir, ": cannot create the directory (", ec.message(),
                     "); choose a writable location");
  for (auto it = made.rbegin(); it != made.rend(); ++it) sync_directory(parent_of(it->string()));
  // A probe file, not access(): root passes access() even where writes fail.
  // Named by process and thread: ranks that are threads of one process probe at once.
  const std::string probe = (fs::path(dir) / (".braid_write_probe." + std::to_string(::getpid()) + "." +
                                              std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()))))
                                .string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  BRAID_CONFIG_CHECK(fd >= 0, flag, " ", dir, ": cannot write in the directory (", std::strerror(errno),
                     "); choose a writable location");
  ::close(fd);
  ::unlink(probe.c_str());
}

AtomicFile::AtomicFile(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)), writer_(-1, "") {
  const fs::path p(path_);
  if (p.has_parent_path()) make_writable_directory(p.parent_path().string(), what_ + " directory");
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error("create " + what_, tmp_);
  writer_ = FileWriter(fd_, tmp_);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!renamed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const char* op, const std::string& file) {
  const int e = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  errno = e;
  io_error(op, file);
}

void AtomicFile::sync() {
  if (::fsync(fd_) != 0) fail("fsync", tmp_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    io_error("close", tmp_);
  }
  fd_ = -1;
}

void AtomicFile::rename_into_place() {
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) io_error("move into place", path_);
  renamed_ = true;
}

void AtomicFile::sync_directory() { braid::sync_directory(parent_of(path_)); }

void AtomicFile::commit() {
  sync();
  rename_into_place();
  sync_directory();
}

FileReader::FileReader(const std::string& path, const std::string& what) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BRAID_CONFIG_CHECK(fd_ >= 0, what, " ", path, " cannot be opened: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    throw ConfigError(detail::concat(what, " ", path, " cannot be read: ", std::strerror(errno)));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool FileReader::read(void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd_, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(detail::concat("cannot read ", path_, ": ", std::strerror(errno)));
    if (r == 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool FileReader::read_at(uint64_t offset, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, c, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw DataError(detail::concat("cannot read ", path_, ": ", std::strerror(errno)));
    if (r == 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

}  // namespace braid
