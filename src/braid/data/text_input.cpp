#include "braid/data/text_input.h"

#include <glob.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/core/error.h"
#include "braid/data/corpus.h"
#include "braid/data/tokenizer.h"

namespace braid::data {
namespace {

namespace fs = std::filesystem;

InputFile input_file(const std::string& path, InputKind kind) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(path, ec);
  return InputFile{path, kind, ec ? 0 : static_cast<uint64_t>(n)};
}

InputKind kind_of(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jsonl" || ext == ".ndjson" ? InputKind::jsonl : InputKind::text;
}

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

// Regular files under `dir`, recursively, sorted by path; hidden names skipped.
std::vector<std::string> files_under(const std::string& dir, const std::string& value) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (hidden(it->path())) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec)) out.push_back(it->path().string());
  }
  BRAID_CONFIG_CHECK(!ec, "--input ", value, ": cannot list ", dir, " (", ec.message(), "); check its permissions");
  std::sort(out.begin(), out.end());
  return out;
}

void add_directory(const std::string& dir, const std::string& value, std::vector<InputFile>& out) {
  const std::vector<std::string> files = files_under(dir, value);
  BRAID_CONFIG_CHECK(!files.empty(), "--input ", value, ": directory ", dir,
                     " holds no files (names starting with '.' are skipped); pass a directory of text or "
                     ".jsonl files");
  for (const auto& f : files) out.push_back(input_file(f, kind_of(f)));
}

std::vector<std::string> glob_matches(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  BRAID_CONFIG_CHECK(rc == 0 || rc == GLOB_NOMATCH, "--input ", pattern, ": glob failed (",
                     rc == GLOB_ABORTED ? "a directory could not be read" : "out of memory",
                     "); check the directories' permissions");
  BRAID_CONFIG_CHECK(!out.empty(), "--input ", pattern, " matches no file; check the pattern (quote it, e.g. ",
                     "'shards/*.txt', so braid expands it) or pass a file or directory");
  // glob(3) sorts by the locale's collation; byte order is the same everywhere.
  std::sort(out.begin(), out.end());
  return out;
}

// nlohmann's message without its "[json.exception...] " tag and its line (always 1 here).
std::string json_reason(const std::exception& e) {
  std::string m = e.what();
  if (const size_t p = m.find("] "); m.rfind("[json.exception", 0) == 0 && p != std::string::npos) m.erase(0, p + 2);
  if (const size_t p = m.find("at line 1, "); p != std::string::npos) m.erase(p + 3, 8);
  return m;
}

}  // namespace

std::vector<InputFile> expand_inputs(const std::vector<std::string>& values) {
  std::vector<InputFile> out;
  for (const std::string& v : values) {
    BRAID_CONFIG_CHECK(!v.empty(), "--input '' names nothing; pass a text file, a directory, a glob pattern or a "
                       ".jsonl file");
    std::error_code ec;
    const fs::file_status st = fs::status(v, ec);
    if (fs::is_directory(st)) {
      add_directory(v, v, out);
    } else if (fs::exists(st)) {
      out.push_back(input_file(v, kind_of(v)));
    } else if (v.find_first_of("*?[") != std::string::npos) {
      for (const std::string& m : glob_matches(v)) {
        if (fs::is_directory(m, ec)) add_directory(m, v, out);
        else out.push_back(input_file(m, kind_of(m)));
      }
    } else {
      throw ConfigError(detail::concat("--input ", v, " not found; pass a text file, a directory, a glob pattern ",
                                       "such as 'shards/*.txt' (quoted), or a .jsonl file"));
    }
  }
  return out;
}

std::vector<InputFile> brown_inputs(const std::string& dir) {
  std::vector<InputFile> out;
  for (const std::string& name : list_brown_files(dir)) out.push_back(input_file(dir + "/" + name, InputKind::brown));
  return out;
}

size_t piece_end(std::string_view text, bool more, size_t target, size_t cap) {
  cap = std::max(cap, target + 1);
  if (text.size() <= target) return more ? std::string_view::npos : text.size();
  // A split at k reads text[k], so look in text[0, cap] for one at or before cap.
  const std::string_view window = text.substr(0, cap + 1);
  const size_t k = find_safe_split(window, target);
  if (k < window.size()) return k;
  if (text.size() <= cap) return more ? std::string_view::npos : text.size();
  // No safe split in [target, cap]: cut after the last line break, else before a UTF-8 lead byte.
  const size_t nl = text.substr(0, cap).rfind('\n');
  if (nl != std::string_view::npos && nl >= target) return nl + 1;
  size_t c = cap;
  while (c > target && (static_cast<unsigned char>(text[c]) & 0xC0) == 0x80) --c;
  return c;
}

DocumentReader::DocumentReader(std::vector<InputFile> files, std::string text_field, size_t piece_bytes)
    : files_(std::move(files)), field_(std::move(text_field)), piece_bytes_(std::max<size_t>(piece_bytes, 16)) {}

uint64_t DocumentReader::total_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f.bytes;
  return n;
}

bool DocumentReader::next(TextPiece& out) {
  out.text.clear();
  out.starts_document = false;
  for (;;) {
    if (doc_pending_) {
      cut_from_doc(out);
      return true;
    }
    if (file_ && file_->kind == InputKind::text && next_text(out)) return true;
    if (file_ && file_->kind == InputKind::jsonl && next_line_document()) continue;
    if (!open_next()) return false;  // the current file is done
  }
}

bool DocumentReader::open_next() {
  if (in_.is_open()) in_.close();
  file_ = nullptr;
  if (next_file_ == files_.size()) return false;
  file_ = &files_[next_file_++];
  in_.clear();
  in_.open(file_->path, std::ios::binary);
  BRAID_CONFIG_CHECK(in_.is_open(), "--input ", file_->path, " cannot be opened (", std::strerror(errno),
                     "); pass a readable file");
  buf_.clear();
  eof_ = false;
  first_piece_ = true;
  offset_ = 0;
  line_ = 1;
  jsonl_line_ = 0;
  file_documents_ = 0;
  if (file_->kind == InputKind::brown) {
    std::ostringstream ss;
    ss << in_.rdbuf();
    BRAID_CONFIG_CHECK(!in_.bad(), "cannot read Brown corpus file ", file_->path);
    bytes_read_ += ss.str().size();
    doc_ = brown_to_text(ss.str());
    doc_pos_ = 0;
    doc_pending_ = true;
    doc_started_ = false;
  }
  return true;
}

bool DocumentReader::next_text(TextPiece& out) {
  const size_t cap = 16 * piece_bytes_;
  size_t cut;
  while ((cut = piece_end(buf_, !eof_, piece_bytes_, cap)) == std::string_view::npos) {
    const size_t had = buf_.size();
    buf_.resize(had + piece_bytes_);
    in_.read(buf_.data() + had, static_cast<std::streamsize>(piece_bytes_));
    const size_t got = static_cast<size_t>(in_.gcount());
    buf_.resize(had + got);
    if (got < piece_bytes_) {
      BRAID_CONFIG_CHECK(!in_.bad(), "cannot read --input ", file_->path, " at byte ", offset_ + had + got);
      eof_ = true;
    }
  }
  if (buf_.empty()) {
    BRAID_DATA_CHECK(!first_piece_, "--input ", file_->path, " is empty; nothing to tokenize (pass a UTF-8 text file)");
    return false;
  }
  out.text.assign(buf_, 0, cut);
  buf_.erase(0, cut);
  line_ += check_text_piece(out.text, file_->path, offset_, line_);
  offset_ += cut;
  bytes_read_ += cut;
  out.starts_document = first_piece_;
  if (first_piece_) ++documents_;
  first_piece_ = false;
  return true;
}

bool DocumentReader::next_line_document() {
  const std::string& path = file_->path;
  std::string line;
  while (std::getline(in_, line)) {
    ++jsonl_line_;
    bytes_read_ += line.size() + (in_.eof() ? 0 : 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // a blank line
    const std::string where = detail::concat("--input ", path, ":", jsonl_line_);
    const std::string fix = "; each line of a JSON lines file must be one object such as {\"" + field_ + "\": \"...\"}";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(detail::concat(where, " is not valid JSON (", json_reason(e), ")", fix));
    }
    if (!j.is_object()) throw DataError(detail::concat(where, " is a JSON ", j.type_name(), ", not an object", fix));
    const auto it = j.find(field_);
    if (it == j.end()) {
      std::string keys;
      for (const auto& [k, v] : j.items()) keys += (keys.empty() ? "" : ", ") + k;
      throw DataError(detail::concat(where, " has no \"", field_, "\" field (it has: ", keys.empty() ? "none" : keys,
                                     "); pass --text-field NAME to read another field, or fix the line"));
    }
    if (!it->is_string())
      throw DataError(detail::concat(where, ": field \"", field_, "\" holds a ", it->type_name(),
                                     ", not a string; pass --text-field NAME to read another field, or fix the line"));
    doc_ = it->get<std::string>();
    doc_pos_ = 0;
    doc_pending_ = true;
    doc_started_ = false;
    ++file_documents_;
    return true;
  }
  BRAID_CONFIG_CHECK(!in_.bad(), "cannot read --input ", path, " after line ", jsonl_line_);
  BRAID_DATA_CHECK(file_documents_ > 0, "--input ", path, " holds no JSON lines (it is empty or blank); pass a file ",
                   "with one JSON object per line");
  return false;
}

void DocumentReader::cut_from_doc(TextPiece& out) {
  const std::string_view rest = std::string_view(doc_).substr(doc_pos_);
  const size_t cut = piece_end(rest, false, piece_bytes_, 16 * piece_bytes_);
  out.text.assign(rest.substr(0, cut));
  doc_pos_ += cut;
  out.starts_document = !doc_started_;
  if (!doc_started_) ++documents_;
  doc_started_ = true;
  if (doc_pos_ == doc_.size()) {
    doc_pending_ = false;
    doc_.clear();
  }
}

}  // namespace braid::data
