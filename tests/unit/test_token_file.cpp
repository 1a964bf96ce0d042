// Token file format: round trip, atomic write, and clear errors on bad files.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "braid/core/error.h"
#include "braid/data/token_file.h"

namespace braid::data {
namespace {

namespace fs = std::filesystem;

std::vector<uint16_t> as_vector(const MappedTokens& t) {
  std::vector<uint16_t> v(t.size());
  for (size_t i = 0; i < t.size(); ++i) v[i] = static_cast<uint16_t>(t[i]);
  return v;
}

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_token_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  static void spit(const std::string& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << bytes;
  }
  static std::string error_of(const std::string& p) {
    try {
      read_token_file(p);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TokenFileTest, RoundTripCreatesParentDirs) {
  const std::vector<int32_t> ids = {50256, 0, 1, 15496, 995, 65535 % 50257, 50255};
  const std::string p = path("a/b/c/train.bin");
  write_token_file(p, ids, 50257);
  const TokenFile tf = read_token_file(p);
  EXPECT_EQ(tf.vocab_size, 50257u);
  ASSERT_EQ(tf.tokens.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tf.tokens[i], ids[i]);
  // No temp file is left behind.
  size_t files = 0;
  for (auto it = fs::directory_iterator(fs::path(p).parent_path()); it != fs::directory_iterator(); ++it) ++files;
  EXPECT_EQ(files, 1u);
}

TEST_F(TokenFileTest, ExactLayout) {
  const std::string p = path("layout.bin");
  write_token_file(p, std::vector<uint16_t>{0x1234, 0xC350}, 50257);
  const std::string b = slurp(p);
  ASSERT_EQ(b.size(), 32u + 4u + 4u);
  EXPECT_EQ(b.substr(0, 8), "BRAIDTOK");
  EXPECT_EQ(b.substr(8, 4), std::string("\x02\x00\x00\x00", 4));        // version 2
  EXPECT_EQ(b.substr(12, 4), std::string("\x51\xC4\x00\x00", 4));       // 50257
  EXPECT_EQ(b.substr(16, 8), std::string("\x02\0\0\0\0\0\0\0", 8));     // count 2
  EXPECT_EQ(b.substr(24, 4), std::string("\x00\x00\x08\x00", 4));       // 524288 tokens per block
  auto crc = [](const std::string& s) {
    return static_cast<uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(s.data()), s.size()));
  };
  uint32_t h = 0, c = 0;
  std::memcpy(&h, b.data() + 28, 4);
  std::memcpy(&c, b.data() + 32, 4);
  EXPECT_EQ(h, crc(b.substr(0, 28)));                                     // header checksum
  EXPECT_EQ(c, crc(b.substr(36)));                                        // the one block's
  EXPECT_EQ(b.substr(36), std::string("\x34\x12\x50\xC3", 4));          // little-endian ids
}

TEST_F(TokenFileTest, EveryFlippedBitIsCaughtAndVersionOneStillReads) {
  std::vector<int32_t> ids(kTokenBlock + 1000);  // two blocks
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919) % 50257);
  const std::string p = path("two_blocks.bin");
  write_token_file(p, ids, 50257);
  const std::string good = slurp(p);
  for (size_t at : {size_t{3}, size_t{13}, size_t{25}, size_t{30}, size_t{34}, size_t{40}, size_t{41},
                    good.size() / 2, good.size() - 1}) {
    std::string b = good;
    b[at] = static_cast<char>(b[at] ^ 0x01);
    spit(p, b);
    EXPECT_NE(error_of(p), "") << "a flipped bit at byte " << at << " was read";
  }
  // A version 1 file: the 24-byte header, then the ids, no checksums.
  std::string v1 = good.substr(0, 24);
  v1[8] = 1;
  v1 += good.substr(32 + 8);
  spit(p, v1);
  const TokenFile tf = read_token_file(p);
  EXPECT_EQ(tf.version, 1u);
  ASSERT_EQ(tf.tokens.size(), ids.size());
  EXPECT_EQ(tf.tokens[tf.tokens.size() - 1], ids.back());
  // Without checksums an id past the vocabulary is still caught.
  v1[24] = '\xff', v1[25] = '\xff';
  spit(p, v1);
  EXPECT_NE(error_of(p).find("vocab_size"), std::string::npos) << error_of(p);
}

TEST_F(TokenFileTest, EmptyAndOverwrite) {
  const std::string p = path("empty.bin");
  write_token_file(p, std::vector<int32_t>{}, 50257);
  EXPECT_TRUE(read_token_file(p).tokens.empty());
  EXPECT_EQ(read_token_file(p).tokens.raw(), nullptr);  // nothing mapped
  write_token_file(p, std::vector<int32_t>{7}, 50257);
  EXPECT_EQ(as_vector(read_token_file(p).tokens), std::vector<uint16_t>{7});
}

TEST_F(TokenFileTest, RejectsOutOfRangeIds) {
  EXPECT_THROW(write_token_file(path("x.bin"), std::vector<int32_t>{50257}, 50257), Error);
  EXPECT_THROW(write_token_file(path("x.bin"), std::vector<int32_t>{-1}, 50257), Error);
  EXPECT_THROW(write_token_file(path("x.bin"), std::vector<int32_t>{1}, (int64_t{1} << 31) + 1), Error);
  EXPECT_FALSE(fs::exists(path("x.bin")));
}

TEST_F(TokenFileTest, MissingFileNamesPathAndFix) {
  const std::string msg = error_of(path("nope.bin"));
  EXPECT_NE(msg.find("nope.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("braid prepare-data"), std::string::npos) << msg;
}

TEST_F(TokenFileTest, CorruptFilesAreConfigErrors) {
  const std::string good = path("good.bin");
  write_token_file(good, std::vector<int32_t>{1, 2, 3, 4}, 50257);
  const std::string bytes = slurp(good);

  const std::string magic = path("magic.bin");
  std::string m = bytes;
  m[0] = 'X';
  spit(magic, m);
  EXPECT_NE(error_of(magic).find("magic"), std::string::npos) << error_of(magic);

  const std::string version = path("version.bin");
  std::string v = bytes;
  v[8] = 3;
  spit(version, v);
  EXPECT_NE(error_of(version).find("version"), std::string::npos);

  const std::string truncated = path("truncated.bin");
  spit(truncated, bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(error_of(truncated).find("truncated"), std::string::npos) << error_of(truncated);

  const std::string header_only = path("short.bin");
  spit(header_only, bytes.substr(0, 10));
  EXPECT_NE(error_of(header_only).find("header"), std::string::npos);

  const std::string longer = path("long.bin");
  spit(longer, bytes + "xx");
  EXPECT_FALSE(error_of(longer).empty());

  const std::string bad_id = path("bad_id.bin");
  std::string b = bytes;
  b[36] = '\xff', b[37] = '\xff';
  spit(bad_id, b);
  EXPECT_NE(error_of(bad_id).find("checksum"), std::string::npos) << error_of(bad_id);

  for (const auto& p : {magic, version, truncated, header_only, longer, bad_id})
    EXPECT_NE(error_of(p).find(p), std::string::npos) << "error must name the path " << p;
}

// The version-2 layout built here on its own (header, its CRC, a CRC per
// block, the ids), to hold the streaming writer to the format.
std::string reference_bytes(const std::vector<uint16_t>& ids, uint32_t vocab) {
  auto le = [](std::string& b, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  };
  auto crc = [](const char* p, size_t n) {
    return static_cast<uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(p), n));
  };
  std::string head("BRAIDTOK"), body;
  le(head, 2, 4), le(head, vocab, 4), le(head, ids.size(), 8), le(head, kTokenBlock, 4);
  le(head, crc(head.data(), head.size()), 4);
  for (uint16_t id : ids) le(body, id, 2);
  for (size_t a = 0; a < body.size(); a += 2 * size_t{kTokenBlock})
    le(head, crc(body.data() + a, std::min(body.size() - a, 2 * size_t{kTokenBlock})), 4);
  return head + body;
}

std::vector<uint16_t> pattern_ids(size_t n, size_t seed = 1) {
  std::vector<uint16_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<uint16_t>((i * 7919 + seed * 104729) % 50257);
  return ids;
}

TEST_F(TokenFileTest, StreamingWriterMatchesTheFormatInAnyPieces) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{kTokenBlock} - 1, size_t{kTokenBlock}, size_t{kTokenBlock} + 1,
                   2 * size_t{kTokenBlock} + 17}) {
    const std::vector<uint16_t> ids = pattern_ids(n);
    const std::string want = reference_bytes(ids, 50257);
    // Appended in uneven pieces (int32 and uint16 alike) ...
    {
      TokenFileWriter w(path("streamed.bin"), 50257);
      std::vector<int32_t> wide(ids.begin(), ids.end());
      for (size_t a = 0, k = 1; a < n; a += k, k = k * 3 + 1) {
        k = std::min(k, n - a);
        if (k % 2) w.append(wide.data() + a, k);
        else w.append(ids.data() + a, k);
      }
      EXPECT_EQ(w.size(), n);
      w.finish();
    }
    EXPECT_EQ(slurp(path("streamed.bin")), want) << n << " ids";
    // ... or whole by write_token_file.
    write_token_file(path("whole.bin"), ids, 50257);
    EXPECT_EQ(slurp(path("whole.bin")), want) << n << " ids";
  }
  size_t files = 0;
  for (auto it = fs::directory_iterator(dir_); it != fs::directory_iterator(); ++it) ++files;
  EXPECT_EQ(files, 2u) << "a temporary file was left behind";
}

TEST_F(TokenFileTest, WriterAbandonedBeforeFinishLeavesNoFile) {
  write_token_file(path("kept.bin"), std::vector<uint16_t>{1, 2, 3}, 50257);
  const std::string before = slurp(path("kept.bin"));
  {
    TokenFileWriter w(path("kept.bin"), 50257);
    w.append(pattern_ids(kTokenBlock + 5));  // a block on disk, some ids buffered
    TokenFileWriter fresh(path("never.bin"), 50257);
    fresh.append(pattern_ids(10));
  }
  EXPECT_EQ(slurp(path("kept.bin")), before);
  EXPECT_FALSE(fs::exists(path("never.bin")));
  size_t files = 0;
  for (auto it = fs::directory_iterator(dir_); it != fs::directory_iterator(); ++it) ++files;
  EXPECT_EQ(files, 1u) << "a temporary file was left behind";
}

TEST_F(TokenFileTest, BadIdInAnAppendKeepsWhatCameBefore) {
  TokenFileWriter w(path("w.bin"), 50257);
  w.append(std::vector<int32_t>{5, 6});
  try {
    w.append(std::vector<int32_t>{7, 50257});
    FAIL() << "id 50257 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at position 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w.size(), 2u);
  w.finish();
  EXPECT_EQ(as_vector(read_token_file(path("w.bin")).tokens), (std::vector<uint16_t>{5, 6}));
}

TEST_F(TokenFileTest, MoveTailSplitsAcrossBlocks) {
  const size_t n = 2 * size_t{kTokenBlock} + 1000;
  const std::vector<uint16_t> ids = pattern_ids(n);
  for (size_t tail : {size_t{0}, size_t{10}, size_t{1000}, size_t{1001}, size_t{kTokenBlock} + 3, n}) {
    {
      TokenFileWriter a(path("a.bin"), 50257), b(path("b.bin"), 50257);
      b.append(std::vector<uint16_t>{42});
      a.append(ids);
      a.move_tail(tail, b);
      EXPECT_EQ(a.size(), n - tail);
      EXPECT_EQ(b.size(), tail + 1);
      a.append(std::vector<uint16_t>{7, 8});  // still appendable after the move
      a.finish();
      b.finish();
    }
    std::vector<uint16_t> head(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(tail)), rest{42};
    head.push_back(7), head.push_back(8);
    rest.insert(rest.end(), ids.end() - static_cast<std::ptrdiff_t>(tail), ids.end());
    EXPECT_EQ(slurp(path("a.bin")), reference_bytes(head, 50257)) << "tail " << tail;
    EXPECT_EQ(slurp(path("b.bin")), reference_bytes(rest, 50257)) << "tail " << tail;
  }
}

// The ids as the reader used to return them: the file's bytes decoded.
std::vector<uint16_t> decoded(const std::string& bytes, size_t offset) {
  std::vector<uint16_t> ids((bytes.size() - offset) / 2);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<uint16_t>(static_cast<unsigned char>(bytes[offset + 2 * i]) |
                                   static_cast<unsigned char>(bytes[offset + 2 * i + 1]) << 8);
  return ids;
}

TEST_F(TokenFileTest, MappedIdsEqualTheFileAndOutliveAReplacement) {
  const std::vector<uint16_t> ids = pattern_ids(kTokenBlock + 77);
  const std::string p = path("m.bin");
  write_token_file(p, ids, 50257);
  TokenFile tf = read_token_file(p);
  ASSERT_EQ(tf.tokens.size(), ids.size());
  EXPECT_EQ(as_vector(tf.tokens), decoded(slurp(p), 32 + 4 * 2));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tf.tokens.raw()) % alignof(uint16_t), 0u);
  // Moving keeps the map; a writer renames a new file over the path, leaving it intact.
  MappedTokens moved = std::move(tf.tokens);
  EXPECT_TRUE(tf.tokens.empty());
  write_token_file(p, std::vector<uint16_t>{1, 2, 3}, 50257);
  EXPECT_EQ(as_vector(moved), ids);
  EXPECT_EQ(read_token_file(p).tokens.size(), 3u);
  // llm.c's ids map past its 1024-byte header (not page-aligned in the general case).
  fs::create_directories(dir_);
  std::vector<uint16_t> gpt2(ids.begin(), ids.begin() + 5000);
  int32_t h[256] = {kLlmcTokenMagic, 1, 5000};
  std::string l(reinterpret_cast<const char*>(h), sizeof h);
  l.append(reinterpret_cast<const char*>(gpt2.data()), 2 * gpt2.size());
  spit(path("l.bin"), l);
  EXPECT_EQ(as_vector(read_token_file(path("l.bin")).tokens), decoded(l, 1024));
}

TEST_F(TokenFileTest, SeedFilesOfTheEarlierWriterReadAndRewriteByteForByte) {
  const std::string seeds = std::string(BRAID_SOURCE_DIR) + "/tests/fuzz/corpus/token_file/";
  for (const char* name : {"v2_small.bin", "v2_empty.bin"}) {
    const std::string bytes = slurp(seeds + name);
    ASSERT_FALSE(bytes.empty()) << seeds << name;
    const TokenFile tf = read_token_file(seeds + name);
    write_token_file(path("again.bin"), as_vector(tf.tokens), tf.vocab_size);
    EXPECT_EQ(slurp(path("again.bin")), bytes) << name;
  }
}

// Version 3: uint32 ids for a vocabulary over 65,536 (Llama 3's 128,256).
TEST_F(TokenFileTest, WideVocabulariesWriteVersion3AndReadBackAcrossBlocks) {
  // The independent Python writer's seed reads, and this writer rewrites it byte for byte.
  const std::string seed = std::string(BRAID_SOURCE_DIR) + "/tests/fuzz/corpus/token_file/v3_llama3.bin";
  const TokenFile s = read_token_file(seed);
  EXPECT_EQ(s.version, kTokenFileVersionWide);
  EXPECT_EQ(s.vocab_size, 128256u);
  ASSERT_TRUE(s.tokens.wide());
  const std::vector<int32_t> seed_ids = {128000, 791, 65535, 65536, 128255};
  ASSERT_EQ(s.tokens.size(), seed_ids.size());
  for (size_t i = 0; i < seed_ids.size(); ++i) EXPECT_EQ(s.tokens[i], uint32_t(seed_ids[i]));
  write_token_file(path("again.bin"), seed_ids, 128256);
  EXPECT_EQ(slurp(path("again.bin")), slurp(seed));
  // More than one checksum block, written in pieces with a tail moved to another file.
  std::vector<int32_t> ids(2 * size_t(kTokenBlock) + 1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 2654435761u) % 128256u);
  TokenFileWriter w(path("a.bin"), 128256), tail(path("b.bin"), 128256);
  w.append(std::span<const int32_t>(ids.data(), 700000));
  w.append(std::span<const int32_t>(ids.data() + 700000, ids.size() - 700000));
  w.move_tail(600000, tail);
  w.finish();
  tail.finish();
  const TokenFile a = read_token_file(path("a.bin")), t = read_token_file(path("b.bin"));
  ASSERT_EQ(a.tokens.size() + t.tokens.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t got = i < a.tokens.size() ? a.tokens[i] : t.tokens[i - a.tokens.size()];
    ASSERT_EQ(got, uint32_t(ids[i])) << i;
  }
  // A changed id is caught by its block's checksum; an id past the vocabulary by the range check.
  std::string bytes = slurp(path("again.bin"));
  bytes[bytes.size() - 2] ^= 1;
  spit(path("bad.bin"), bytes);
  EXPECT_THROW(read_token_file(path("bad.bin")), DataError);
  EXPECT_THROW(write_token_file(path("x.bin"), std::vector<int32_t>{128256}, 128256), Error);
  // Ids stay int32 in the model: no vocabulary past 2^31.
  EXPECT_THROW(TokenFileWriter(path("y.bin"), int64_t{1} << 32), Error);
}

// llm.c's token file: 256 int32 (magic, version, count), then uint16 ids.
std::string llmc_bytes(const std::vector<uint16_t>& ids, int32_t version = 1, int32_t count = -1) {
  int32_t h[256] = {};
  h[0] = kLlmcTokenMagic;
  h[1] = version;
  h[2] = count >= 0 ? count : static_cast<int32_t>(ids.size());
  std::string b(reinterpret_cast<const char*>(h), sizeof h);
  b.append(reinterpret_cast<const char*>(ids.data()), 2 * ids.size());
  return b;
}

TEST_F(TokenFileTest, LlmcFilesAreReadByTheirMagicAndNanoGptOnlyWhenAsked) {
  fs::create_directories(dir_);
  const std::vector<uint16_t> ids = {50256, 464, 13, 0, 50255};
  spit(path("llmc.bin"), llmc_bytes(ids));
  const TokenFile l = read_token_file(path("llmc.bin"));
  EXPECT_EQ(l.format, "llmc");
  EXPECT_EQ(as_vector(l.tokens), ids);
  // nanoGPT: the ids alone; without --data-format nanogpt they are refused (no magic).
  spit(path("nano.bin"), std::string(reinterpret_cast<const char*>(ids.data()), 2 * ids.size()));
  EXPECT_NE(error_of(path("nano.bin")).find("--data-format nanogpt"), std::string::npos);
  const TokenFile n = read_token_file(path("nano.bin"), TokenFormat::nanogpt);
  EXPECT_EQ(n.format, "nanogpt");
  EXPECT_EQ(as_vector(n.tokens), ids);
  EXPECT_EQ(parse_token_format("NanoGPT"), TokenFormat::nanogpt);
  EXPECT_EQ(parse_token_format("auto"), TokenFormat::detect);
  EXPECT_THROW(parse_token_format("llmc"), ConfigError);
  // Damaged or foreign: wrong version, a count that disagrees with the size, a
  // non-GPT-2 id, an odd nanoGPT size; each names the file.
  for (const auto& [bytes, needle] : std::vector<std::pair<std::string, std::string>>{
           {llmc_bytes(ids, 2), "version 2"},
           {llmc_bytes(ids, 1, 9), "header says 9 tokens"},
           {llmc_bytes({1, 60000}), "not a GPT-2 id"},
           {llmc_bytes(ids).substr(0, 100), "shorter than its 1024-byte header"}}) {
    spit(path("bad.bin"), bytes);
    const std::string msg = error_of(path("bad.bin"));
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    EXPECT_NE(msg.find(path("bad.bin")), std::string::npos) << msg;
  }
  spit(path("odd.bin"), "abc");
  EXPECT_THROW(read_token_file(path("odd.bin"), TokenFormat::nanogpt), DataError);
}

}  // namespace
}  // namespace braid::data
