#include "braid/formats/sharded_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/core/hash.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/model/param_layout.h"

namespace braid::formats {

namespace fs = std::filesystem;

namespace {
constexpr char kMagic[8] = {'B', 'R', 'A', 'I', 'D', 'S', 'H', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kPrelude = 24;
constexpr uint64_t kMaxJson = uint64_t{1} << 30;
constexpr int64_t kMaxDim = int64_t{1} << 31;

[[noreturn]] void damaged(const std::string& path, const std::string& why) {
  throw DataError(detail::concat("checkpoint ", path, " is damaged: ", why,
                                 "; resume from an earlier checkpoint (`braid verify DIR` lists those that verify)"));
}

std::string metadata_path(const std::string& dir) { return (fs::path(dir) / kMetadataFile).string(); }

uint64_t chunk_count(uint64_t bytes) { return (bytes + kPieceChunkBytes - 1) / kPieceChunkBytes; }

// Field accessors that name what is wrong.
struct Fields {
  const std::string& path;
  const nlohmann::json& at(const nlohmann::json& o, const char* k, const std::string& where) const {
    if (!o.is_object() || !o.contains(k)) damaged(path, detail::concat(where, " has no field '", k, "'"));
    return o.at(k);
  }
  int64_t integer(const nlohmann::json& o, const char* k, int64_t lo, int64_t hi, const std::string& where) const {
    const auto& v = at(o, k, where);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      damaged(path, detail::concat(where, "'s field '", k, "' is ", v.dump(), ", expected an integer in [", lo, ", ",
                                   hi, "]"));
    return v.get<int64_t>();
  }
  std::vector<int64_t> ints(const nlohmann::json& o, const char* k, size_t lo_n, size_t hi_n, int64_t lo, int64_t hi,
                            const std::string& where) const {
    const auto& v = at(o, k, where);
    bool ok = v.is_array() && v.size() >= lo_n && v.size() <= hi_n;
    std::vector<int64_t> out;
    for (size_t i = 0; ok && i < v.size(); ++i) {
      ok = v[i].is_number_integer() && v[i].get<int64_t>() >= lo && v[i].get<int64_t>() <= hi;
      if (ok) out.push_back(v[i].get<int64_t>());
    }
    if (!ok)
      damaged(path, detail::concat(where, "'s field '", k, "' is not ", lo_n, "..", hi_n, " integers in [", lo, ", ",
                                   hi, "]"));
    return out;
  }
};

std::vector<TensorMeta> decode_tensors(const Fields& f, const nlohmann::json& j) {
  const auto& arr = f.at(j, "tensors", "the metadata");
  if (!arr.is_array() || arr.empty()) damaged(f.path, "its 'tensors' is not a non-empty array");
  std::vector<TensorMeta> out;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string where = detail::concat("tensor ", i);
    const auto& name = f.at(arr[i], "name", where);
    if (!name.is_string() || name.get<std::string>().empty()) damaged(f.path, where + "'s name is not a string");
    TensorMeta t{name.get<std::string>(), f.ints(arr[i], "shape", 1, 2, 1, kMaxDim - 1, where)};
    if (!seen.emplace(t.name, i).second) damaged(f.path, detail::concat("tensor '", t.name, "' is listed twice"));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<PieceFileMeta> decode_files(const Fields& f, const nlohmann::json& j) {
  static const std::regex ok_name("[A-Za-z0-9_][A-Za-z0-9._-]{0,200}");
  const auto& arr = f.at(j, "files", "the metadata");
  if (!arr.is_array()) damaged(f.path, "its 'files' is not an array");
  std::vector<PieceFileMeta> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string where = detail::concat("file ", i);
    const auto& name = f.at(arr[i], "name", where);
    if (!name.is_string() || !std::regex_match(name.get<std::string>(), ok_name) ||
        name.get<std::string>() == kMetadataFile)
      damaged(f.path, where + "'s name is not a plain file name");
    out.push_back({name.get<std::string>(), static_cast<int>(f.integer(arr[i], "rank", 0, kMaxDim - 1, where)),
                   static_cast<uint64_t>(f.integer(arr[i], "bytes", 0, INT64_MAX, where))});
  }
  return out;
}

PieceMeta decode_piece(const Fields& f, const nlohmann::json& p, size_t i, const ShardedMetadata& m) {
  const std::string where = detail::concat("piece ", i);
  PieceMeta pm;
  pm.tensor = f.integer(p, "tensor", 0, static_cast<int64_t>(m.tensors.size()) - 1, where);
  const auto& st = f.at(p, "state", where);
  const auto* it = st.is_string() ? std::find(std::begin(kPieceStates), std::end(kPieceStates), st.get<std::string>())
                                  : std::end(kPieceStates);
  if (it == std::end(kPieceStates)) damaged(f.path, where + "'s state is not param, exp_avg or exp_avg_sq");
  pm.state = static_cast<int>(it - std::begin(kPieceStates));
  const TensorBox whole = m.tensors[static_cast<size_t>(pm.tensor)].whole();
  const auto box = f.ints(p, "box", 4, 4, 0, kMaxDim, where);
  pm.box = {box[0], box[1], box[2], box[3]};
  if (pm.box.rows < 1 || pm.box.cols < 1 || pm.box.row0 + pm.box.rows > whole.rows ||
      pm.box.col0 + pm.box.cols > whole.cols)
    damaged(f.path, detail::concat(where, "'s box ", nlohmann::json(box).dump(), " does not fit tensor '",
                                   m.tensors[static_cast<size_t>(pm.tensor)].name, "'"));
  const auto range = f.ints(p, "range", 2, 2, 0, pm.box.numel(), where);
  pm.begin = range[0], pm.end = range[1];
  if (pm.begin >= pm.end) damaged(f.path, where + "'s range is empty");
  pm.file = f.integer(p, "file", 0, static_cast<int64_t>(m.files.size()) - 1, where);
  pm.offset = static_cast<uint64_t>(f.integer(p, "offset", 0, INT64_MAX, where));
  const uint64_t fbytes = m.files[static_cast<size_t>(pm.file)].bytes;
  if (pm.offset > fbytes || pm.bytes() > fbytes - pm.offset)
    damaged(f.path, detail::concat(where, "'s bytes [", pm.offset, ", ", pm.offset + pm.bytes(), ") pass the end of ",
                                   m.files[static_cast<size_t>(pm.file)].name, " (", fbytes, " bytes)"));
  const auto crcs = f.ints(p, "crc32", chunk_count(pm.bytes()), chunk_count(pm.bytes()), 0, 0xffffffffll, where);
  pm.crc32.assign(crcs.begin(), crcs.end());
  return pm;
}

// The pieces of every tensor and state add up to the tensor (their overlaps
// are found when a load finds elements covered twice or not at all).
void check_coverage(const std::string& path, const ShardedMetadata& m) {
  std::vector<int64_t> held(m.tensors.size() * 3, 0);
  for (const auto& p : m.pieces) held[static_cast<size_t>(p.tensor) * 3 + static_cast<size_t>(p.state)] += p.end - p.begin;
  for (size_t t = 0; t < m.tensors.size(); ++t)
    for (size_t s = 0; s < 3; ++s)
      if (held[t * 3 + s] != m.tensors[t].whole().numel())
        damaged(path, detail::concat("its pieces hold ", held[t * 3 + s], " elements of ", kPieceStates[s], " of '",
                                     m.tensors[t].name, "', which has ", m.tensors[t].whole().numel()));
}

// The tensors are those of the model the header describes, in its order.
void check_tensors(const std::string& path, const ShardedMetadata& m) {
  const auto table = model::param_table(header_config(m.header));
  bool same = m.tensors.size() == table.size();
  for (size_t i = 0; same && i < table.size(); ++i)
    same = m.tensors[i].name == table[i].name && m.tensors[i].shape == table[i].full_shape;
  if (!same)
    damaged(path, detail::concat("its ", m.tensors.size(), " tensors are not the ", table.size(),
                                 " of the model its header describes"));
}

nlohmann::json box_json(const TensorBox& b) { return {b.row0, b.col0, b.rows, b.cols}; }
}  // namespace

TensorBox TensorMeta::whole() const {
  return shape.size() == 1 ? TensorBox{0, 0, 1, shape[0]} : TensorBox{0, 0, shape[0], shape[1]};
}

std::vector<OverlapRun> overlap_runs(const TensorBox& a, int64_t ab, int64_t ae, const TensorBox& b, int64_t bb,
                                     int64_t be) {
  std::vector<OverlapRun> out;
  const int64_t c_lo = std::max(a.col0, b.col0), c_hi = std::min(a.col0 + a.cols, b.col0 + b.cols);
  if (ab >= ae || bb >= be || c_lo >= c_hi) return out;
  // Rows both ranges touch.
  const int64_t r_lo = std::max({a.row0, b.row0, a.row0 + ab / a.cols, b.row0 + bb / b.cols});
  const int64_t r_hi = std::min({a.row0 + a.rows, b.row0 + b.rows, a.row0 + (ae - 1) / a.cols + 1,
                                 b.row0 + (be - 1) / b.cols + 1});
  if (a.col0 == b.col0 && a.cols == b.cols && r_lo < r_hi) {
    // Same columns: the flattenings are one index space shifted by whole rows.
    const int64_t shift = (b.row0 - a.row0) * a.cols;  // index in a = index in b + shift
    const int64_t lo = std::max(ab, bb + shift), hi = std::min(ae, be + shift);
    if (lo < hi) out.push_back({lo - ab, lo - shift - bb, hi - lo});
    return out;
  }
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const int64_t base_a = (r - a.row0) * a.cols - a.col0, base_b = (r - b.row0) * b.cols - b.col0;
    const int64_t lo = std::max({c_lo, ab - base_a, bb - base_b});
    const int64_t hi = std::min({c_hi, ae - base_a, be - base_b});
    if (lo >= hi) continue;
    const OverlapRun run{base_a + lo - ab, base_b + lo - bb, hi - lo};
    if (!out.empty() && out.back().src + out.back().len == run.src && out.back().dst + out.back().len == run.dst)
      out.back().len += run.len;
    else
      out.push_back(run);
  }
  return out;
}

std::string encode_sharded_metadata(const ShardedMetadata& m) {
  nlohmann::json j = {{"format", "braid-sharded-checkpoint"}, {"chunk_bytes", kPieceChunkBytes},
                      {"header", m.header}, {"layout", m.layout}};
  auto& tensors = j["tensors"] = nlohmann::json::array();
  for (const auto& t : m.tensors) tensors.push_back({{"name", t.name}, {"shape", t.shape}});
  auto& files = j["files"] = nlohmann::json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}});
  auto& pieces = j["pieces"] = nlohmann::json::array();
  for (const auto& p : m.pieces)
    pieces.push_back({{"tensor", p.tensor}, {"state", kPieceStates[p.state]}, {"box", box_json(p.box)},
                      {"range", {p.begin, p.end}}, {"file", p.file}, {"offset", p.offset}, {"crc32", p.crc32}});
  const std::string body = j.dump();
  const uint64_t len = body.size();
  const uint32_t crc = crc32(body.data(), body.size());
  std::string out(kPrelude, '\0');
  std::memcpy(out.data(), kMagic, 8);
  std::memcpy(out.data() + 8, &kVersion, 4);
  std::memcpy(out.data() + 12, &len, 8);
  std::memcpy(out.data() + 20, &crc, 4);
  return out + body;
}

ShardedMetadata decode_sharded_metadata(const std::string& bytes, const std::string& path) {
  if (bytes.size() < kPrelude || std::memcmp(bytes.data(), kMagic, 8) != 0)
    damaged(path, "its metadata file does not start with \"BRAIDSHD\"");
  uint32_t version = 0, crc = 0;
  uint64_t len = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&len, bytes.data() + 12, 8);
  std::memcpy(&crc, bytes.data() + 20, 4);
  if (version != kVersion) damaged(path, detail::concat("its metadata version is ", version, "; this braid reads ", kVersion));
  if (len >= kMaxJson || len != bytes.size() - kPrelude)
    damaged(path, detail::concat("its metadata length ", len, " does not match its ", bytes.size() - kPrelude, " bytes"));
  if (kVerifyChecksums && crc32(bytes.data() + kPrelude, len) != crc) damaged(path, "its metadata's checksum does not match");
  const nlohmann::json j = nlohmann::json::parse(bytes.begin() + kPrelude, bytes.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) damaged(path, "its metadata is not a JSON object");
  const Fields f{path};
  const auto& fmt = f.at(j, "format", "the metadata");
  if (!fmt.is_string() || fmt.get<std::string>() != "braid-sharded-checkpoint")
    damaged(path, "its metadata's 'format' is not \"braid-sharded-checkpoint\"");
  if (f.integer(j, "chunk_bytes", 1, INT64_MAX, "the metadata") != static_cast<int64_t>(kPieceChunkBytes))
    damaged(path, detail::concat("its chunk size is not ", kPieceChunkBytes, " bytes"));
  ShardedMetadata m;
  m.header = f.at(j, "header", "the metadata");
  validate_checkpoint_header(path, m.header, false);
  m.layout = f.at(j, "layout", "the metadata");
  m.tensors = decode_tensors(f, j);
  check_tensors(path, m);
  m.files = decode_files(f, j);
  const auto& pieces = f.at(j, "pieces", "the metadata");
  if (!pieces.is_array()) damaged(path, "its 'pieces' is not an array");
  for (size_t i = 0; i < pieces.size(); ++i) m.pieces.push_back(decode_piece(f, pieces[i], i, m));
  check_coverage(path, m);
  return m;
}

void write_sharded_metadata(const std::string& dir, const ShardedMetadata& m, const SaveFault& fault) {
  const std::string bytes = encode_sharded_metadata(m);
  AtomicFile file(metadata_path(dir), "checkpoint metadata");
  file.writer().write(bytes.data(), bytes.size());
  file.sync();
  if (fault.phase == SavePhase::before_rename) die_here();
  file.rename_into_place();
  if (fault.phase == SavePhase::before_dir_fsync) die_here();
  file.sync_directory();
}

bool has_sharded_metadata(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(metadata_path(dir), ec);
}

ShardedMetadata read_sharded_metadata(const std::string& dir) {
  if (!has_sharded_metadata(dir)) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      BRAID_CONFIG_CHECK(e.path().filename().string().rfind("step_", 0) != 0, dir,
                         " is a --save directory, not a checkpoint; pass one of its checkpoints (", dir,
                         "/step_<N>), or to braid train --resume the directory itself");
    throw ConfigError(detail::concat("checkpoint ", dir, " has no metadata file: its save was interrupted before ",
                                     "it committed; resume from an earlier checkpoint"));
  }
  FileReader in(metadata_path(dir), "checkpoint metadata");
  if (in.size() >= kMaxJson + kPrelude) damaged(dir, detail::concat("its metadata file has ", in.size(), " bytes"));
  std::string bytes(in.size(), '\0');
  if (!in.read(bytes.data(), bytes.size())) damaged(dir, "its metadata file is cut short");
  return decode_sharded_metadata(bytes, dir);
}

// ---- writing one rank's pieces ----

struct PieceFileWriter::Impl {
  AtomicFile file;
  FaultyWriter w;
  const SaveFault& fault;
  bool armed;
  Impl(const std::string& path, const SaveFault& f, bool a) : file(path, "checkpoint piece file"), w(file.writer(), f, a), fault(f), armed(a) {}
};

PieceFileWriter::PieceFileWriter(const std::string& dir, const std::string& name, const SaveFault& fault, bool armed)
    : impl_(std::make_unique<Impl>((fs::path(dir) / name).string(), fault, armed)) {}

PieceFileWriter::~PieceFileWriter() = default;

uint64_t PieceFileWriter::append(const float* data, size_t n, std::vector<uint32_t>& crcs) {
  const uint64_t offset = impl_->w.written();
  const auto* bytes = reinterpret_cast<const char*>(data);
  const uint64_t total = static_cast<uint64_t>(n) * 4;
  crcs.clear();
  for (uint64_t done = 0; done < total;) {
    const uint64_t k = std::min(kPieceChunkBytes, total - done);
    crcs.push_back(crc32(bytes + done, k));
    impl_->w.write(bytes + done, k);
    done += k;
  }
  return offset;
}

void PieceFileWriter::finish() {
  if (impl_->armed && impl_->fault.phase == SavePhase::before_file_fsync) die_here();
  if (impl_->armed && impl_->fault.phase == SavePhase::write_error)
    throw ConfigError(detail::concat("cannot write ", impl_->file.temp_path(),
                                     ": input/output error (injected by --inject-save-fault write-error)"));
  impl_->file.sync();
  impl_->file.rename_into_place();
}

uint64_t PieceFileWriter::bytes() const { return impl_->w.written(); }

// ---- reading ----

struct ShardedCheckpointReader::Files {
  std::map<int64_t, std::unique_ptr<FileReader>> open;
};

namespace {
// Every piece file is there, a regular file (never a pipe to block on) of the
// size its metadata says.
void check_files(const std::string& dir, const ShardedMetadata& m) {
  for (const auto& f : m.files) {
    std::error_code ec;
    const auto path = fs::path(dir) / f.name;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) damaged(dir, detail::concat("its piece file ", f.name, ", written by rank ", f.rank, ", is missing"));
    if (!fs::is_regular_file(st))
      damaged(dir, detail::concat("its piece file ", f.name, ", written by rank ", f.rank, ", is not a regular file"));
    const uint64_t size = fs::file_size(path, ec);
    if (ec || size != f.bytes)
      damaged(dir, detail::concat("its piece file ", f.name, ", written by rank ", f.rank, ", has ", size,
                                  " bytes, not the ", f.bytes, " its metadata says"));
  }
}
}  // namespace

ShardedCheckpointReader::ShardedCheckpointReader(std::string dir)
    : dir_(std::move(dir)), meta_(read_sharded_metadata(dir_)), files_(std::make_unique<Files>()) {
  check_files(dir_, meta_);
  for (size_t i = 0; i < meta_.pieces.size(); ++i)
    by_tensor_[{meta_.pieces[i].tensor, meta_.pieces[i].state}].push_back(i);
}

ShardedCheckpointReader::~ShardedCheckpointReader() = default;

int64_t ShardedCheckpointReader::tensor_index(const std::string& name) const {
  for (size_t i = 0; i < meta_.tensors.size(); ++i)
    if (meta_.tensors[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

const char* ShardedCheckpointReader::load_chunk(size_t piece, uint64_t c) {
  if (chunk_piece_ == static_cast<int64_t>(piece) && chunk_index_ == c) return chunk_.data();
  const PieceMeta& p = meta_.pieces[piece];
  const PieceFileMeta& f = meta_.files[static_cast<size_t>(p.file)];
  auto& reader = files_->open[p.file];
  const std::string path = (fs::path(dir_) / f.name).string();
  if (!reader) reader = std::make_unique<FileReader>(path, "checkpoint piece file");
  const uint64_t k = std::min(kPieceChunkBytes, p.bytes() - c * kPieceChunkBytes);
  chunk_.resize(kPieceChunkBytes);
  chunk_piece_ = -1;
  const std::string which = detail::concat(kPieceStates[p.state], " of '", meta_.tensors[static_cast<size_t>(p.tensor)].name,
                                           "' (piece ", piece, ", chunk ", c, ") in ", f.name, ", written by rank ", f.rank, ",");
  if (!reader->read_at(p.offset + c * kPieceChunkBytes, chunk_.data(), k)) damaged(dir_, which + " is cut short");
  if (kVerifyChecksums && crc32(chunk_.data(), k) != p.crc32[c]) damaged(dir_, "the checksum of " + which + " does not match");
  bytes_read_ += k;
  chunk_piece_ = static_cast<int64_t>(piece);
  chunk_index_ = c;
  return chunk_.data();
}

void ShardedCheckpointReader::read_elements(size_t piece, int64_t first, int64_t n, float* dst) {
  uint64_t byte = static_cast<uint64_t>(first) * 4;
  const uint64_t end = byte + static_cast<uint64_t>(n) * 4;
  auto* out = reinterpret_cast<char*>(dst);
  while (byte < end) {
    const uint64_t c = byte / kPieceChunkBytes, in_chunk = byte % kPieceChunkBytes;
    const uint64_t k = std::min(end - byte, kPieceChunkBytes - in_chunk);
    std::memcpy(out, load_chunk(piece, c) + in_chunk, k);
    out += k;
    byte += k;
  }
}

void ShardedCheckpointReader::read(int64_t tensor, int state, const TensorBox& box, int64_t begin, int64_t end,
                                   float* dst) {
  int64_t covered = 0;
  const auto it = by_tensor_.find({tensor, state});
  if (it != by_tensor_.end()) {
    for (size_t i : it->second) {
      const PieceMeta& p = meta_.pieces[i];
      for (const auto& r : overlap_runs(p.box, p.begin, p.end, box, begin, end)) {
        read_elements(i, r.src, r.len, dst + r.dst);
        covered += r.len;
      }
    }
  }
  if (covered != end - begin)
    damaged(dir_, detail::concat("its pieces hold ", covered, " of the ", end - begin, " elements of ",
                                 kPieceStates[state], " of '", meta_.tensors[static_cast<size_t>(tensor)].name,
                                 "' requested (box ", box_json(box).dump(), ", range [", begin, ", ", end, "))"));
}

nlohmann::json verify_sharded_checkpoint(const std::string& dir, size_t part, size_t parts) {
  ShardedCheckpointReader r(dir);  // checks every piece file's presence and size
  const ShardedMetadata& m = r.metadata();
  std::vector<float> sink(kPieceChunkBytes / 4);
  for (size_t i = part; i < m.pieces.size(); i += parts) {
    const PieceMeta& p = m.pieces[i];
    // Reading the piece's own box and range touches every one of its chunks.
    for (int64_t e = p.begin; e < p.end;) {
      const int64_t k = std::min<int64_t>(static_cast<int64_t>(sink.size()), p.end - e);
      r.read(p.tensor, p.state, p.box, e, e + k, sink.data());
      e += k;
    }
  }
  return m.header;
}

nlohmann::json verify_any_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? verify_sharded_checkpoint(path) : verify_checkpoint(path).header;
}

std::vector<std::string> unreferenced_files(const std::string& dir) {
  std::vector<std::string> names;
  if (has_sharded_metadata(dir)) {
    try {
      for (const auto& f : read_sharded_metadata(dir).files) names.push_back(f.name);
    } catch (const DataError&) {
      return {};  // damaged: left as it is, for `braid verify` to name
    }
    names.emplace_back(kMetadataFile);
  }
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (std::find(names.begin(), names.end(), e.path().filename().string()) == names.end())
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace braid::formats
