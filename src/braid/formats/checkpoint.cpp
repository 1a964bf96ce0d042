#include "braid/formats/checkpoint.h"


#include <csignal>
#include <cstring>
#include <filesystem>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/core/hash.h"
#include "braid/core/parse.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/model/param_layout.h"

namespace braid::formats {

namespace {
constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 2;
constexpr size_t kPreludeV1 = 20, kPreludeV2 = 24;
constexpr uint64_t kMaxHeader = uint64_t{1} << 24;
constexpr const char* kArrays[3] = {"parameters", "AdamW m", "AdamW v"};

[[noreturn]] void damaged(const std::string& path, const std::string& why) {
  throw DataError(detail::concat("checkpoint ", path, " is damaged: ", why,
                                 "; resume from an earlier checkpoint (`braid verify DIR` lists those that verify)"));
}

// The model sizes and n_params agree: an edited size field under a matching
// checksum is damage, not another model the run's flags should match.
void check_sizes(const std::string& path, const nlohmann::json& h) {
  size_t need = 0;
  try {
    need = model::unit_bounds(header_config(h)).back();
  } catch (const ConfigError& e) {
    damaged(path, detail::concat("its header's model sizes make no model (", e.what(), ")"));
  }
  const size_t n = h.at("n_params").get<size_t>();
  if (need != n)
    damaged(path, detail::concat("its header's sizes (n_layer ", h["n_layer"].dump(), ", n_head ", h["n_head"].dump(),
                                 ", n_embd ", h["n_embd"].dump(), ", vocab_size ", h["vocab_size"].dump(),
                                 ", block_size ", h.value("block_size", nlohmann::json("the preset's")).dump(),
                                 ") need ", need, " parameters but its n_params is ", n));
}

// Every header field, checked: a damaged or foreign header names the field.
void validate_header(const std::string& path, const nlohmann::json& h, bool with_crc32) {
  if (!h.is_object()) damaged(path, "its header is not a JSON object");
  auto field = [&](const char* k) -> const nlohmann::json& {
    if (!h.contains(k)) damaged(path, detail::concat("header field '", k, "' is missing"));
    return h.at(k);
  };
  auto integer = [&](const char* k, int64_t lo) {
    const auto& v = field(k);
    if (!v.is_number_integer() || v.get<int64_t>() < lo)
      damaged(path, detail::concat("header field '", k, "' is ", v.dump(), ", expected an integer >= ", lo));
  };
  const auto& fmt = field("format");
  if (!fmt.is_string() || fmt.get<std::string>() != "braid-checkpoint")
    damaged(path, detail::concat("header field 'format' is ", fmt.dump(), ", expected \"braid-checkpoint\""));
  if (!field("model").is_string()) damaged(path, "header field 'model' is not a string");
  if (!field("seed").is_number_unsigned()) damaged(path, "header field 'seed' is not a non-negative integer");
  // An imported model ("source": where its weights came from) has no training
  // run behind it: step, batch and sequence length 0.
  if (h.contains("source") && !h.at("source").is_string()) damaged(path, "header field 'source' is not a string");
  const int64_t run_min = h.contains("source") ? 0 : 1;
  integer("step", 0);
  for (const char* k : {"global_batch", "seq_len"}) integer(k, run_min);
  for (const char* k : {"n_params", "n_layer", "n_head", "n_embd", "vocab_size"}) integer(k, 1);
  if (h.contains("block_size")) integer("block_size", 1);
  if (h.contains("loss_scale")) {
    const auto& ls = h.at("loss_scale");
    const bool ok = ls.is_object() && ls.contains("scale") && ls["scale"].is_number() &&
                    ls["scale"].get<double>() > 0 && ls.contains("growth_tracker") &&
                    ls["growth_tracker"].is_number_integer() && ls.contains("hysteresis_left") &&
                    ls["hysteresis_left"].is_number_integer();
    if (!ok) damaged(path, "header field 'loss_scale' is not {scale > 0, growth_tracker, hysteresis_left}");
  }
  check_sizes(path, h);
  if (with_crc32) {
    const auto& c = field("crc32");
    bool ok = c.is_array() && c.size() == 3;
    for (size_t i = 0; ok && i < 3; ++i) ok = c[i].is_number_unsigned() && c[i].get<uint64_t>() <= 0xffffffffu;
    if (!ok) damaged(path, "header field 'crc32' is not three 32-bit checksums");
  }
}

// An open checkpoint whose prelude and header are read and checked; the
// payload is next in `in`.
struct OpenCheckpoint {
  FileReader in;
  CheckpointInfo info;
  size_t n = 0;  // elements per array
};

OpenCheckpoint open_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  BRAID_CONFIG_CHECK(fs::exists(path, ec), "checkpoint ", path, " not found; check --resume");
  BRAID_CONFIG_CHECK(!fs::is_directory(path, ec), "checkpoint ", path,
                     " is a directory; pass it as --resume DIR or name a file inside it");
  OpenCheckpoint ck{FileReader(path, "checkpoint"), {}, 0};
  const uint64_t size = ck.in.size();
  char magic[8];
  if (size < kPreludeV1 || !ck.in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0)
    throw DataError(detail::concat("checkpoint ", path, " is not a braid checkpoint (no \"BRAIDCKP\" magic in its ",
                                   size, " bytes); pass a file written by `braid train --save`"));
  uint32_t version = 0;
  uint64_t hlen = 0;
  ck.in.read(&version, 4);
  ck.in.read(&hlen, 8);
  if (version != 1 && version != kVersion)
    damaged(path, detail::concat("its version is ", version, "; this braid reads versions 1 and ", kVersion));
  uint32_t hcrc = 0;
  if (version >= 2 && !ck.in.read(&hcrc, 4)) damaged(path, "it ends inside its prelude");
  const uint64_t prelude = version >= 2 ? kPreludeV2 : kPreludeV1;
  if (hlen == 0 || hlen >= kMaxHeader || hlen > size - prelude)
    damaged(path, detail::concat("its header length ", hlen, " does not fit its ", size, " bytes"));
  std::string hdr(hlen, '\0');
  if (!ck.in.read(hdr.data(), hlen)) damaged(path, "its header is cut short");
  if (kVerifyChecksums && version >= 2 && crc32(hdr.data(), hdr.size()) != hcrc) damaged(path, "its header's checksum does not match");
  ck.info.header = nlohmann::json::parse(hdr, nullptr, false);
  ck.info.version = version;
  if (ck.info.header.is_discarded()) damaged(path, "its header is not valid JSON");
  validate_header(path, ck.info.header, version >= 2);
  ck.n = ck.info.header.at("n_params").get<size_t>();
  const uint64_t room = size - prelude - hlen;  // bytes for the payload (no overflow: n is checked first)
  if (ck.n > room / 12 || room != 12 * static_cast<uint64_t>(ck.n))
    damaged(path, detail::concat("it has ", room, " payload bytes but its header's ", ck.n, " parameters need 3 x 4 x ",
                                 ck.n, ck.n > room / 12 ? " (truncated)" : " (trailing bytes)"));
  return ck;
}

// Reads array `a` of ck into dst (n floats), or streams it when dst is null;
// checks its checksum on version 2 files.
void read_array(OpenCheckpoint& ck, const std::string& path, int a, float* dst) {
  constexpr size_t kPiece = size_t{1} << 18;  // floats: 1 MiB
  std::vector<float> scratch(dst ? 0 : std::min(kPiece, ck.n));
  uint32_t crc = 0;
  for (size_t done = 0; done < ck.n;) {
    const size_t k = std::min(kPiece, ck.n - done);
    float* p = dst ? dst + done : scratch.data();
    if (!ck.in.read(p, k * 4)) damaged(path, detail::concat("its ", kArrays[a], " are cut short"));
    crc = crc32(p, k * 4, crc);
    done += k;
  }
  if (kVerifyChecksums && ck.info.version >= 2 && crc != ck.info.header["crc32"][static_cast<size_t>(a)].get<uint32_t>())
    damaged(path, detail::concat("the checksum of its ", kArrays[a], " does not match (a changed byte)"));
}
}  // namespace

void save_checkpoint(const std::string& path, const CheckpointView& ck, const SaveFault& fault) {
  const size_t n = ck.header.at("n_params").get<size_t>();
  nlohmann::json header = ck.header;
  header["crc32"] = {crc32(ck.params, n * 4), crc32(ck.m, n * 4), crc32(ck.v, n * 4)};
  const std::string hdr = header.dump();
  const uint64_t hlen = hdr.size();
  const uint32_t hcrc = crc32(hdr.data(), hdr.size());
  const uint64_t total = kPreludeV2 + hlen + 12 * static_cast<uint64_t>(n);
  BRAID_CONFIG_CHECK(fault.phase != SavePhase::payload || fault.at_byte < total, "--inject-save-fault payload:",
                     fault.at_byte, " is past the checkpoint's ", total, " bytes, so the fault would never fire");
  AtomicFile file(path, "checkpoint");
  FaultyWriter w(file.writer(), fault);
  w.write(kMagic, 8);
  w.write(&kVersion, 4);
  w.write(&hlen, 8);
  w.write(&hcrc, 4);
  w.write(hdr.data(), hdr.size());
  for (const float* a : {ck.params, ck.m, ck.v}) w.write(a, n * 4);
  if (fault.phase == SavePhase::before_file_fsync) die_here();
  file.sync();
  if (fault.phase == SavePhase::before_rename) die_here();
  file.rename_into_place();
  if (fault.phase == SavePhase::before_dir_fsync) die_here();
  file.sync_directory();
}

CheckpointInfo load_checkpoint(const std::string& path, size_t n_params, float* params, float* m, float* v) {
  OpenCheckpoint ck = open_checkpoint(path);
  const auto& h = ck.info.header;
  BRAID_CONFIG_CHECK(ck.n == n_params, "checkpoint ", path, " holds ", ck.n, " parameters but the model has ",
                     n_params, "; resume with the model of the saved run: --model ", h["model"].get<std::string>(),
                     " --n-layer ", h["n_layer"].get<int64_t>(), " --n-head ", h["n_head"].get<int64_t>(),
                     " --n-embd ", h["n_embd"].get<int64_t>(), " --vocab-size ", h["vocab_size"].get<int64_t>());
  float* dst[3] = {params, m, v};
  for (int a = 0; a < 3; ++a) read_array(ck, path, a, dst[a]);
  return ck.info;
}

void validate_checkpoint_header(const std::string& path, const nlohmann::json& h, bool with_crc32) {
  validate_header(path, h, with_crc32);
}

CheckpointInfo read_checkpoint_header(const std::string& path) { return open_checkpoint(path).info; }

CheckpointInfo verify_checkpoint(const std::string& path) {
  OpenCheckpoint ck = open_checkpoint(path);
  for (int a = 0; a < 3; ++a) read_array(ck, path, a, nullptr);
  return ck.info;
}

}  // namespace braid::formats
