#include "braid/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "braid/core/error.h"

namespace braid::train {

namespace {
constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0) {
      ::close(fd);
      ::unlink(path.c_str());
      throw Error("writing checkpoint " + path + " failed: " + std::strerror(errno));
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
}
}  // namespace

void save_checkpoint(const std::string& path, const CheckpointView& ck) {
  const size_t n = ck.header.at("n_params").get<size_t>();
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw Error("cannot create " + tmp + ": " + std::strerror(errno));
  const std::string hdr = ck.header.dump();
  const uint64_t hlen = hdr.size();
  write_all(fd, kMagic, 8, tmp);
  write_all(fd, &kVersion, 4, tmp);
  write_all(fd, &hlen, 8, tmp);
  write_all(fd, hdr.data(), hdr.size(), tmp);
  write_all(fd, ck.params, n * 4, tmp);
  write_all(fd, ck.m, n * 4, tmp);
  write_all(fd, ck.v, n * 4, tmp);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error("cannot flush " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw Error("cannot move checkpoint into place at " + path + ": " + ec.message());
  }
}

nlohmann::json load_checkpoint(const std::string& path, size_t n_params, float* params, float* m,
                               float* v) {
  std::ifstream f(path, std::ios::binary);
  BRAID_CONFIG_CHECK(f.good(), "checkpoint ", path, " not found; check --resume");
  char magic[8];
  uint32_t version = 0;
  uint64_t hlen = 0;
  f.read(magic, 8).read(reinterpret_cast<char*>(&version), 4).read(reinterpret_cast<char*>(&hlen), 8);
  BRAID_CONFIG_CHECK(f.good() && std::memcmp(magic, kMagic, 8) == 0 && version == kVersion &&
                         hlen < (size_t{1} << 24),
                     "checkpoint ", path, " is not a braid v", kVersion, " checkpoint (bad header)");
  std::string hdr(hlen, '\0');
  f.read(hdr.data(), static_cast<std::streamsize>(hlen));
  nlohmann::json header = nlohmann::json::parse(hdr, nullptr, false);
  BRAID_CONFIG_CHECK(f.good() && header.is_object() && header.contains("n_params") && header.contains("step"),
                     "checkpoint ", path, " is corrupt (unreadable header)");
  const size_t n = header.at("n_params").get<size_t>();
  BRAID_CONFIG_CHECK(n == n_params, "checkpoint ", path, " holds ", n,
                     " parameters but the model has ", n_params,
                     "; resume with the model of the saved run: --model ", header.value("model", std::string("?")),
                     " --n-layer ", header.value("n_layer", int64_t{0}), " --n-head ", header.value("n_head", int64_t{0}),
                     " --n-embd ", header.value("n_embd", int64_t{0}), " --vocab-size ",
                     header.value("vocab_size", int64_t{0}));
  for (float* dst : {params, m, v}) {
    f.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(n * 4));
    BRAID_CONFIG_CHECK(f.good(), "checkpoint ", path, " is truncated");
  }
  return header;
}

}  // namespace braid::train
