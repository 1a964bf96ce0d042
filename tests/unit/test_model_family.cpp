// The model family (model/config.h): GPT-2 and Llama-family blocks as two
// settings of one configuration. Meta's shapes give their published parameter
// counts; a Llama block's tensors split over TP ranks so that each rank's
// elements are exactly its checkpoint boxes; checkpoint headers record the
// block parts and read older headers as GPT-2.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/formats/model_header.h"
#include "braid/model/config.h"
#include "braid/model/gpt.h"
#include "braid/model/param_layout.h"
#include "braid/train/checkpoint_pieces.h"

using namespace braid;
using model::GPTConfig;

namespace {

std::string config_error_of(const GPTConfig& c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ModelFamily, MetaShapesHaveTheirPublishedParameterCounts) {
  // The counts of the models' cards (config.json shapes; every tensor a
  // multiple of 16 floats, so the flat layout has no gaps).
  const std::pair<const char*, size_t> cards[] = {{"llama3.2-1b", 1235814400ull},
                                                  {"llama3.1-8b", 8030261248ull},
                                                  {"llama3.1-70b", 70553706496ull},
                                                  {"llama3.1-405b", 405853388800ull}};
  for (const auto& [name, count] : cards) EXPECT_EQ(model::unit_bounds(GPTConfig::preset(name)).back(), count) << name;
  // GPT-2 124M: 124,439,808 with the vocabulary padded to 50,304 (+ 36,864).
  EXPECT_EQ(model::unit_bounds(GPTConfig::preset("gpt2")).back(), 124475904u);
}

TEST(ModelFamily, PresetsNameTheirPartsAndStayOverridable) {
  for (const auto& n : GPTConfig::preset_names()) EXPECT_NO_THROW(GPTConfig::preset(n).validate()) << n;
  const GPTConfig g = GPTConfig::preset("small"), l = GPTConfig::preset("llama-small");
  EXPECT_TRUE(g.is_gpt2_block());
  EXPECT_FALSE(l.is_gpt2_block());
  EXPECT_EQ(l.kv_heads(), 2);
  EXPECT_EQ(l.qkv_width(), 256 + 2 * 2 * 64);
  EXPECT_EQ(l.fc_width(), 2 * 688);
  EXPECT_EQ(GPTConfig::preset("llama3.1-8b").rope_scaling.factor, 8.0);
  EXPECT_EQ(GPTConfig::preset("llama3.2-1b").rope_scaling.factor, 32.0);
  EXPECT_TRUE(GPTConfig::preset("llama3.2-1b").tied_head);
  GPTConfig c = l;
  c.n_kv_head = 4;
  EXPECT_EQ(c.name_from("llama-small"), "llama-small with n_kv_head=4");
  EXPECT_THROW(GPTConfig::preset("llama-huge"), ConfigError);
}

TEST(ModelFamily, InvalidPartsAreRefusedNamingTheFix) {
  GPTConfig c = GPTConfig::preset("llama-tiny");
  c.n_kv_head = 3;
  EXPECT_NE(config_error_of(c).find("n_head=4 is not a multiple of n_kv_head=3"), std::string::npos);
  c = GPTConfig::preset("llama-tiny");
  c.n_embd = 60, c.n_head = 4, c.n_kv_head = 2;  // head size 15: odd
  EXPECT_NE(config_error_of(c).find("rotary positions pair"), std::string::npos);
  c = GPTConfig::preset("llama-tiny");
  EXPECT_THROW(model::validate_tp(c, 4), ConfigError);  // 2 kv heads over 4 ranks
  EXPECT_NO_THROW(model::validate_tp(c, 2));
}

TEST(ModelFamily, EachTensorParallelRanksElementsAreItsCheckpointBoxes) {
  // full_index (initialisation, slicing) and tensor_boxes (checkpoints) agree
  // on every tensor of a Llama block, whose c_attn splits q, k, v blocks of
  // unequal heights and whose c_fc splits gate and up.
  const GPTConfig c = GPTConfig::preset("llama-tiny");
  const int tp = 2;
  for (int r = 0; r < tp; ++r) {
    for (const auto& p : model::param_table(c, tp)) {
      std::vector<size_t> from_boxes;
      const size_t cols = p.full_shape.size() == 2 ? size_t(p.full_shape[1]) : size_t(p.full_shape[0]);
      for (const auto& b : train::tensor_boxes(p, r, tp))
        for (int64_t i = 0; i < b.rows; ++i)
          for (int64_t j = 0; j < b.cols; ++j) from_boxes.push_back(size_t(b.row0 + i) * cols + size_t(b.col0 + j));
      ASSERT_EQ(from_boxes.size(), p.numel) << p.name;
      for (size_t e = 0; e < p.numel; ++e)
        ASSERT_EQ(model::full_index(p, e, r, tp), from_boxes[e]) << p.name << " rank " << r << " element " << e;
    }
  }
}

TEST(ModelFamily, CheckpointHeadersRecordTheBlockAndReadOlderOnesAsGpt2) {
  GPTConfig l = GPTConfig::preset("llama-tiny");
  l.rope_theta = 123456.0, l.n_kv_head = 1;
  nlohmann::json h = {{"block", formats::block_header(l)}};
  GPTConfig read = GPTConfig::preset("tiny");
  formats::read_block_header(h, read);
  EXPECT_EQ(formats::block_header(read), formats::block_header(l));
  // Before the field: GPT-2's parts, whatever the preset says.
  GPTConfig old = GPTConfig::preset("llama-tiny");
  formats::read_block_header(nlohmann::json::object(), old);
  EXPECT_TRUE(old.is_gpt2_block());
  // A damaged or newer field is named.
  for (auto [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"norm", "batchnorm"}, {"n_kv_head", "two"}, {"version", 99}, {"tied_head", 1}}) {
    nlohmann::json bad = h;
    bad["block"][key] = value;
    GPTConfig x = GPTConfig::preset("tiny");
    try {
      formats::read_block_header(bad, x);
      ADD_FAILURE() << key << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(std::string(e.what()).find(key) != std::string::npos ||
                  std::string(e.what()).find("batchnorm") != std::string::npos)
          << e.what();
    }
  }
}

TEST(ModelFamily, FlopsCountEveryMatmulOfTheBlock) {
  // GPT-2: 12 C^2 per block; Llama: q, k, v, o and the three SwiGLU matrices.
  const GPTConfig g = GPTConfig::preset("small"), l = GPTConfig::preset("llama3.1-8b");
  const int64_t T = 128;
  EXPECT_EQ(model::model_flops_per_token(g, T),
            6 * (4 * 12 * 256 * 256 + 50304 * 256) + 12 * 4 * 256 * T);
  const int64_t per_block = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336;
  EXPECT_EQ(model::model_flops_per_token(l, T), 6 * (32 * per_block + 128256 * 4096) + 12 * 32 * 4096 * T);
}
