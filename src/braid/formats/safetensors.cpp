#include "braid/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/core/file_io.h"

namespace braid::formats {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference reader's limit

size_t element_count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

void put_u64_le(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t get_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

size_t safetensors_dtype_size(const std::string& t) {
  if (t == "BOOL" || t == "U8" || t == "I8") return 1;
  if (t == "I16" || t == "U16" || t == "F16" || t == "BF16") return 2;
  if (t == "I32" || t == "U32" || t == "F32") return 4;
  if (t == "I64" || t == "U64" || t == "F64") return 8;
  return 0;
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  size_t offset = 0;
  for (const TensorView& t : tensors) {
    const size_t esz = safetensors_dtype_size(t.dtype);
    BRAID_CONFIG_CHECK(esz > 0, "safetensors: tensor ", t.name, " has unknown dtype '", t.dtype, "'");
    BRAID_CONFIG_CHECK(names.insert(t.name).second, "safetensors: tensor name ", t.name, " appears twice");
    const size_t bytes = element_count(t.shape) * esz;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // aligns the data section to 8 bytes
  unsigned char len[8];
  put_u64_le(len, text.size());
  AtomicFile f(path, "safetensors file");
  f.writer().write(len, 8);
  f.writer().write(text.data(), text.size());
  for (const TensorView& t : tensors) f.writer().write(t.data, element_count(t.shape) * safetensors_dtype_size(t.dtype));
  f.commit();
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  FileReader in(path, "safetensors file");
  auto bad = [&path](const auto&... what) {
    return DataError(detail::concat("safetensors file ", path, ": ", what...,
                                    "; it is damaged or not a safetensors file (write it again with "
                                    "save_pretrained / safetensors.torch.save_file or braid export)"));
  };
  unsigned char len[8];
  if (!in.read(len, 8)) throw bad("shorter than its 8-byte header length");
  const uint64_t n = get_u64_le(len);
  if (n > kMaxHeaderBytes || n > in.size() - 8) throw bad("header length ", n, " exceeds the file (", in.size(), " bytes)");
  std::string text(n, '\0');
  if (!in.read(text.data(), n)) throw bad("header cut short");
  nlohmann::json h = nlohmann::json::parse(text, nullptr, false);
  if (!h.is_object()) throw bad("header is not a JSON object");
  SafetensorsFile f;
  f.path_ = path;
  const size_t data_bytes = in.size() - 8 - n;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) throw bad("__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) throw bad("__metadata__ value ", m.key(), " is not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      throw bad("tensor ", name, " lacks dtype, shape or a [begin, end] data_offsets");
    Entry en;
    en.dtype = e["dtype"].get<std::string>();
    const size_t esz = safetensors_dtype_size(en.dtype);
    if (esz == 0) throw bad("tensor ", name, " has unknown dtype '", en.dtype, "'");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw bad("tensor ", name, " has a bad shape");
      en.shape.push_back(d.get<int64_t>());
    }
    for (const auto& o : e["data_offsets"])
      if (!o.is_number_unsigned()) throw bad("tensor ", name, " has bad data_offsets");
    en.begin = e["data_offsets"][0].get<size_t>();
    en.end = e["data_offsets"][1].get<size_t>();
    if (en.begin > en.end || en.end > data_bytes)
      throw bad("tensor ", name, " spans bytes [", en.begin, ", ", en.end, ") outside the ", data_bytes,
                "-byte data section");
    // Shapes are small; the product cannot overflow before it exceeds the range checked here.
    size_t count = 1;
    for (int64_t d : en.shape) {
      if (d != 0 && count > data_bytes / static_cast<size_t>(d)) throw bad("tensor ", name, " shape exceeds the file");
      count *= static_cast<size_t>(d);
    }
    if (count * esz != en.end - en.begin)
      throw bad("tensor ", name, " holds ", en.end - en.begin, " bytes but its shape and dtype need ", count * esz);
    ranges.emplace_back(en.begin, en.end);
    f.entries_.emplace(name, std::move(en));
  }
  std::sort(ranges.begin(), ranges.end());
  size_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b != at) throw bad("tensor data ", b < at ? "overlaps" : "leaves a gap", " at byte ", std::min(b, at));
    at = e;
  }
  if (at != data_bytes) throw bad("the data section has ", data_bytes - at, " bytes no tensor covers");
  f.bytes_.resize(data_bytes);
  if (data_bytes > 0 && !in.read(f.bytes_.data(), data_bytes)) throw bad("data section cut short");
  return f;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end())
    throw DataError(detail::concat("safetensors file ", path_, " has no tensor ", name));
  return it->second;
}

const unsigned char* SafetensorsFile::data(const std::string& name) const {
  return bytes_.data() + entry(name).begin;
}

}  // namespace braid::formats
