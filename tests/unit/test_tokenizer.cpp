// GPT-2 BPE tokenizer: ids must equal the gpt-3-encoder JS package's encode()
// (run through tools/encode_oracle.js under node), and decode(encode(s)) == s.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "braid/core/error.h"
#include "braid/data/corpus.h"
#include "braid/data/tokenizer.h"

namespace braid::data {
namespace {

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

#define REQUIRE_TOKENIZER()                                                                 \
  const Gpt2Tokenizer* tok_ptr = tokenizer_or_null();                                       \
  if (!tok_ptr) GTEST_SKIP() << "gpt-3-encoder package not found at "                       \
                             << Gpt2Tokenizer::default_dir() << "; run scripts/setup.sh";   \
  const Gpt2Tokenizer& tok = *tok_ptr

std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    *status = -1;
    return out;
  }
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = ::pclose(p);
  return out;
}

// Empty string when node and the package are usable, else why not.
std::string oracle_unavailable() {
  static const std::string why = [] {
    int st = 0;
    run_capture("node --version > /dev/null 2>&1", &st);
    if (st != 0) return std::string("node is not on PATH");
    if (!std::filesystem::exists(Gpt2Tokenizer::default_dir() + "/Encoder.js"))
      return "gpt-3-encoder package not found at " + Gpt2Tokenizer::default_dir();
    return std::string();
  }();
  return why;
}

#define REQUIRE_ORACLE()                                                                     \
  if (!oracle_unavailable().empty())                                                         \
  GTEST_SKIP() << "JS oracle unavailable (" << oracle_unavailable()                          \
               << "); install node and run scripts/setup.sh to compare against it"

// Ids the JS encode() gives for each text (one node process for all of them).
std::vector<std::vector<int32_t>> oracle_encode(const std::vector<std::string>& texts) {
  const auto tmp = std::filesystem::temp_directory_path() /
                   ("braid_oracle_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(tmp, std::ios::binary);
    f << nlohmann::json(texts).dump();
  }
  const std::string cmd = "node '" + std::string(BRAID_SOURCE_DIR) + "/tools/encode_oracle.js' --multi '" +
                          tmp.string() + "' '" + Gpt2Tokenizer::data_packages_dir() + "'";
  int st = 0;
  const std::string out = run_capture(cmd, &st);
  std::filesystem::remove(tmp);
  EXPECT_EQ(st, 0) << cmd;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& arr : nlohmann::json::parse(out)) {
    std::vector<int32_t> v;
    for (const auto& x : arr) v.push_back(x.is_null() ? -1 : x.get<int32_t>());
    ids.push_back(std::move(v));
  }
  return ids;
}

std::string escaped(const std::string& s) {
  std::string r;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F) {
      r += static_cast<char>(c);
    } else {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      r += b;
    }
  }
  return r.size() > 200 ? r.substr(0, 200) + "..." : r;
}

void expect_matches_oracle(const Gpt2Tokenizer& tok, const std::vector<std::string>& texts) {
  const auto want = oracle_encode(texts);
  ASSERT_EQ(want.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto got = tok.encode(texts[i]);
    EXPECT_EQ(got, want[i]) << "case " << i << ": \"" << escaped(texts[i]) << "\"";
    EXPECT_EQ(tok.decode(got), texts[i]) << "case " << i;
  }
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Random valid UTF-8 biased towards the characters the pre-tokenizer cares about.
std::string random_utf8(std::mt19937_64& rng, size_t max_cps) {
  static const std::vector<uint32_t> tricky = {
      ' ', ' ', ' ', '\t', '\n', '\r', 0x0B, 0x0C, '\'', '\'', 's', 't', 'r', 'e', 'v', 'm', 'l',
      'd', 'S', 'T', 'a', 'Z', '0', '7', '.', ',', '!', '-', '"', 0xA0, 0x85, 0x1680, 0x2003,
      0x2028, 0x202F, 0x3000, 0xFEFF, 0x200B, 0x200D, 0xE9, 0xFC, 0xDF, 0x301, 0xB2, 0xBD, 0x2167,
      0x663, 0x4E2D, 0x6587, 0x416, 0x627, 0x1F600, 0x1F44D, 0x1F3FD, 0xFE0F, 0x1D400, 0xFFFD};
  std::string s;
  const size_t n = rng() % (max_cps + 1);
  for (size_t i = 0; i < n; ++i) {
    uint32_t cp;
    switch (rng() % 4) {
      case 0: cp = 0x20 + rng() % 0x5F; break;  // printable ASCII
      case 1: {  // any scalar value
        do cp = static_cast<uint32_t>(rng() % 0x110000); while (cp >= 0xD800 && cp <= 0xDFFF);
        break;
      }
      default: cp = tricky[rng() % tricky.size()];
    }
    append_utf8(s, cp);
  }
  return s;
}

TEST(Gpt2Tokenizer, LoadsVocab) {
  REQUIRE_TOKENIZER();
  EXPECT_EQ(tok.eot(), 50256);
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{tok.eot()}), "<|endoftext|>");
  // Plain text never produces the special token (same as the JS).
  const auto ids = tok.encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
}

TEST(Gpt2Tokenizer, KnownIds) {
  REQUIRE_TOKENIZER();
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Gpt2Tokenizer, MissingDirIsConfigErrorWithFix) {
  try {
    Gpt2Tokenizer::load("/nonexistent/braid/tokenizer");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent/braid/tokenizer/encoder.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("scripts/setup.sh"), std::string::npos) << msg;
  }
}

TEST(Gpt2Tokenizer, DecodeRejectsBadIds) {
  REQUIRE_TOKENIZER();
  EXPECT_THROW(tok.decode(std::vector<int32_t>{50257}), Error);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

TEST(Gpt2Tokenizer, EdgeCasesMatchOracle) {
  REQUIRE_TOKENIZER();
  REQUIRE_ORACLE();
  const std::vector<std::string> cases = {
      "",
      " ",
      "  ",
      "   ",
      "a",
      "Hello world",
      "Hello  world",
      "Hello   world",
      "trailing space ",
      "trailing spaces   ",
      "trailing newline\n",
      "\n",
      "\n\n",
      "\n\n\nx",
      " \n x",
      "\t",
      "\t\tx",
      "a\tb",
      "a \t b",
      "a\t b",
      " \t\n\r\x0b\x0c",
      "line1\r\nline2\r\n",
      "   leading",
      "a\n\n  b",
      "mixed \t \n \t words",
      // contractions, and case variants that do not match the regex
      "it's isn't we're they've I'm you'll he'd",
      "IT'S ISN'T WE'RE THEY'VE I'M YOU'LL HE'D",
      "'s't're've'm'll'd",
      "'S 'T 'Re 'VE",
      "rock'n'roll o'clock y'all",
      "''s ''t !'s",
      "' s 'x '",
      "don't\n'll",
      // digits and punctuation
      "1234567890",
      " 2024 12 3.14159 -42 +7 1,000,000",
      "phone: 555-1234; email: a@b.co!?",
      "...!!!???" "---***",
      "(a) [b] {c} <d> \"e\" `f`",
      "$100 50% #tag @user ~home ^caret &amp |pipe \\back /slash",
      "x² ½ Ⅷ ٣ ①",
      // non-ASCII
      "café naïve Zürich straße Øresund",
      "e\xcc\x81 (combining acute)",
      "中文字符测试，还有标点。",
      "日本語のテキスト",
      "Привет, мир! Ёлка",
      "مرحبا بالعالم",
      "שלום עולם",
      "नमस्ते दुनिया",
      "Ελληνικά κείμενα",
      "\xc2\xa0" "nbsp\xc2\xa0 \xe3\x80\x80" "ideographic\xe2\x80\x83" "em \xef\xbb\xbf bom",
      "zero\xe2\x80\x8bwidth joiner\xe2\x80\x8d here",
      // emoji, ZWJ sequences, skin tones, flags, keycaps
      "😀 😃😄 👍🏽 👩‍💻 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸 1️⃣",
      "emoji😀inside words👍🏿end",
      "𝐀𝐁𝐂 math bold",
      "\xef\xbf\xbd replacement char",
      "<|endoftext|>",
      // Tokens with commas: the JS ranks pairs by the string key a + "," + b,
      // so e.g. ('",', '"') borrows the rank of ('"', ',"').
      "[\"a\",\"b\"],[\"c\"] {\"k\":\"v\"},\"x\" ',\"' ','a','b' \",\",\",\" ],[ '','",
      "f(\"x\",\"y\") .\",\" .,\" ],\" }\",\" x,\"",
  };
  expect_matches_oracle(tok, cases);
}

TEST(Gpt2Tokenizer, RandomUtf8MatchesOracleAndRoundTrips) {
  REQUIRE_TOKENIZER();
  REQUIRE_ORACLE();
  std::mt19937_64 rng(20240601);
  std::vector<std::string> cases;
  for (int i = 0; i < 300; ++i) cases.push_back(random_utf8(rng, 40));
  expect_matches_oracle(tok, cases);
}

TEST(Gpt2Tokenizer, BrownSampleMatchesOracle) {
  REQUIRE_TOKENIZER();
  REQUIRE_ORACLE();
  std::vector<Document> docs;
  try {
    docs = read_brown_corpus(default_brown_dir());
  } catch (const ConfigError& e) {
    GTEST_SKIP() << e.what();
  }
  // ~100 KB spread over the categories (every 25th document).
  // Separate texts: the JS encode() is quadratic in its output length.
  std::vector<std::string> samples;
  size_t bytes = 0;
  for (size_t i = 0; i < docs.size() && bytes < 100000; i += 25) {
    samples.push_back(docs[i].text.substr(0, 6000) + "\n\n");
    bytes += samples.back().size();
  }
  ASSERT_GT(bytes, 90000u);
  expect_matches_oracle(tok, samples);
}

TEST(Gpt2Tokenizer, RoundTripRandomUtf8) {
  REQUIRE_TOKENIZER();
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string s = random_utf8(rng, 64);
    const auto ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    ASSERT_EQ(tok.decode(ids), s) << escaped(s);
  }
}

TEST(Gpt2Tokenizer, RoundTripRandomBytes) {
  REQUIRE_TOKENIZER();
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 64, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
    const auto ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    ASSERT_EQ(tok.decode(ids), s) << escaped(s);
  }
  // Truncated, overlong, surrogate and out-of-range sequences, stray continuations.
  for (const std::string s : {"\xff", "a\xc3", "\xc3(", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80",
                              "\xf4\x90\x80\x80", "\x80\x80 x", " \xfe\xfe", "it\x92s"}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << escaped(s);
  }
}

TEST(Gpt2Tokenizer, InvalidByteActsLikeSymbol) {
  REQUIRE_TOKENIZER();
  // A lone invalid byte is a piece of class "other" (like U+FFFD): " \xff" is
  // one piece, so the space is not split from it, and letters around stay apart.
  const auto ids = tok.encode("a \xff" "b");
  EXPECT_EQ(tok.decode(ids), "a \xff" "b");
  const auto a = tok.encode("a");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(ids.front(), a[0]);
}

TEST(Gpt2Tokenizer, SafeSplitGivesSameIds) {
  REQUIRE_TOKENIZER();
  const std::string text =
      "First line.\nSecond line's here  \n  indented\n\nThird\nx\n'tis\n\n\n  end \n";
  const auto whole = tok.encode(text);
  for (size_t from = 0; from <= text.size(); ++from) {
    const size_t k = find_safe_split(text, from);
    ASSERT_GE(k, std::min(from, text.size()));
    auto left = tok.encode(std::string_view(text).substr(0, k));
    const auto right = tok.encode(std::string_view(text).substr(k));
    left.insert(left.end(), right.begin(), right.end());
    EXPECT_EQ(left, whole) << "split at " << k;
  }
}

TEST(Gpt2Tokenizer, ConcurrentEncodeIsConsistent) {
  REQUIRE_TOKENIZER();
  std::mt19937_64 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(random_utf8(rng, 80));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        for (size_t i = 0; i < texts.size(); ++i) bad[t] += tok.encode(texts[(i * 7 + t) % texts.size()]) != want[(i * 7 + t) % texts.size()];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace braid::data
