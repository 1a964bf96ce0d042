// The inputs of `braid prepare-data`: text files, directories, glob patterns
// and JSON lines, read as a stream of documents in pieces of bounded size, so
// a corpus of any size is tokenized in bounded memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace braid::data {

enum class InputKind : uint8_t {
  text,   // the whole file is one document (UTF-8)
  jsonl,  // JSON lines: each line an object whose text field is one document
  brown,  // a tagged Brown corpus file (brown_to_text), one document
};

struct InputFile {
  std::string path;
  InputKind kind = InputKind::text;
  uint64_t bytes = 0;  // size on disk (0 when it has none: a pipe)
};

/// Expands --input values, in the order given, into the files to read: a file
/// as it is; a directory, its regular files, recursively, sorted by path (byte
/// order), skipping names that start with '.' (hidden files and directories);
/// a pattern with * ? or [ that names no file, its glob(3) matches, sorted
/// (a matching directory expands as above). Files ending in .jsonl or .ndjson
/// are JSON lines, others text. Throws ConfigError naming the value and the
/// fix when it names nothing or a directory holds no file.
std::vector<InputFile> expand_inputs(const std::vector<std::string>& values);

/// The Brown corpus files of `dir` (list_brown_files), as InputKind::brown.
std::vector<InputFile> brown_inputs(const std::string& dir);

/// A piece of a document's text. Pieces are cut where encoding them apart
/// gives the ids of encoding the document whole (find_safe_split), so they can
/// be encoded in parallel.
struct TextPiece {
  std::string text;
  bool starts_document = false;  // the first piece of a document (it is preceded by end-of-text)
};

/// Reads the documents of `files` in order as pieces of about `piece_bytes`
/// bytes: a text file in pieces as it is read, a JSON line or a Brown file
/// whole and then cut. A piece is cut at the first safe split after
/// `piece_bytes`; text with no safe split (a line break between printable
/// ASCII characters) for 16 x piece_bytes is cut there anyway, after a line
/// break if it holds one, so memory stays bounded (ids at such a cut may differ
/// from encoding the text whole). Each document is one text file, one JSON
/// line (blank lines are skipped) or one Brown file.
class DocumentReader {
 public:
  /// piece_bytes: 256 KiB keeps each encoding thread's scratch (~6 bytes per
  /// byte of text) small while a piece still amortizes its hand-over.
  DocumentReader(std::vector<InputFile> files, std::string text_field = "text", size_t piece_bytes = size_t{1} << 18);

  /// The next piece in order; false after the last. Throws DataError naming the
  /// file, position and fix: an empty or binary text file, invalid UTF-8, a
  /// JSON line that does not parse, is no object or lacks the text field (or
  /// holds no string there); ConfigError when a file cannot be read.
  bool next(TextPiece& out);

  uint64_t documents() const { return documents_; }  ///< documents started so far
  uint64_t bytes_read() const { return bytes_read_; }  ///< input bytes consumed so far
  uint64_t total_bytes() const;                        ///< sum of the files' sizes

 private:
  bool open_next();
  bool next_text(TextPiece& out);
  bool next_line_document();
  void cut_from_doc(TextPiece& out);

  std::vector<InputFile> files_;
  std::string field_;
  size_t piece_bytes_;
  size_t next_file_ = 0;
  const InputFile* file_ = nullptr;  // the file being read
  std::ifstream in_;
  // A text file: bytes read and not yet returned, their position in the file.
  std::string buf_;
  bool eof_ = false;
  bool first_piece_ = false;
  uint64_t offset_ = 0, line_ = 1;
  // A document held whole (a JSON line, a Brown file), returned from doc_pos_ on.
  std::string doc_;
  size_t doc_pos_ = 0;
  bool doc_pending_ = false;  // doc_ has pieces left (or is an empty document not yet returned)
  bool doc_started_ = false;
  uint64_t jsonl_line_ = 0;
  uint64_t file_documents_ = 0;  // documents of the current JSON lines file
  uint64_t documents_ = 0, bytes_read_ = 0;
};

/// Where to cut the next piece of `text` (which goes on when `more` is true):
/// the first safe split at or after `target`; with none, all of it at the
/// document's end, or a forced cut once it reaches `cap` bytes (after the last
/// '\n' before cap past target, else at a character boundary); else npos:
/// read more first. Exposed for tests.
size_t piece_end(std::string_view text, bool more, size_t target, size_t cap);

}  // namespace braid::data
