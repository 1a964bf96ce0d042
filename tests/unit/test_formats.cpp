// Model formats: safetensors round trip and every malformed header refused by
// name; Hugging Face and llm.c conversions keep every weight bitwise (the
// PyTorch oracle of the exported model is tests/e2e/formats.sh).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "braid/core/dtype.h"
#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/data/tokenizer.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/formats/safetensors.h"
#include "braid/model/param_layout.h"

namespace braid::formats {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("braid_formats_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

// A safetensors file from a header text and a data section.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream f(path, std::ios::binary);
  uint64_t n = header.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::string read_error(const std::string& path) {
  try {
    SafetensorsFile::read(path);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripKeepsNamesShapesBytesAndAlignment) {
  TempDir d;
  const std::vector<float> a = {1.5f, -2.f, 3.25f, 0.f, 7.f, -0.5f};
  const std::vector<uint16_t> b = {f32_to_bf16(1.f), f32_to_bf16(-3.f)};
  write_safetensors(d / "t.safetensors", {{"a.weight", "F32", {2, 3}, a.data()}, {"b", "BF16", {2}, b.data()}},
                    {{"format", "pt"}});
  std::ifstream in(d / "t.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u) << "the data section starts 8-byte aligned";
  const SafetensorsFile f = SafetensorsFile::read(d / "t.safetensors");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.entry("a.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.entry("b").dtype, "BF16");
  EXPECT_EQ(std::memcmp(f.data("a.weight"), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(f.data("b"), b.data(), 4), 0);
  EXPECT_THROW(f.entry("c"), DataError);
  EXPECT_THROW(write_safetensors(d / "x", {{"a", "F31", {1}, a.data()}}), ConfigError);
  EXPECT_THROW(write_safetensors(d / "x", {{"a", "F32", {1}, a.data()}, {"a", "F32", {1}, a.data()}}), ConfigError);
}

TEST(Safetensors, MalformedFilesAreRefusedNamingTheFault) {
  TempDir d;
  const std::string p = d / "bad.safetensors";
  const std::string eight(8, '\0');
  struct Case {
    std::string header, data, needle;
  };
  const std::vector<Case> cases = {
      {"[1,2]", "", "not a JSON object"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", eight, "not a JSON object"},
      {R"({"a":{"dtype":"Q8","shape":[2],"data_offsets":[0,8]}})", eight, "unknown dtype"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight, "need 12"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", eight, "outside"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", eight, "data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight, "bad shape"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       eight, "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight, "gap"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight, "no tensor covers"},
      {R"({"__metadata__":{"k":1}})", "", "not a string"},
  };
  for (const Case& c : cases) {
    write_raw(p, c.header, c.data);
    const std::string msg = read_error(p);
    EXPECT_NE(msg.find(c.needle), std::string::npos) << c.header << " -> '" << msg << "'";
    EXPECT_NE(msg.find(p), std::string::npos) << "the message names the file: " << msg;
  }
  std::ofstream(p, std::ios::binary).write("\x10\x00\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_NE(read_error(p).find("exceeds the file"), std::string::npos);
  std::ofstream(p, std::ios::binary).write("\x01\x02", 2);
  EXPECT_NE(read_error(p).find("shorter"), std::string::npos);
}

// Random weights in braid's layout with zero padding rows and gaps, as training keeps them.
ModelWeights random_weights(const std::string& preset, uint64_t seed) {
  ModelWeights w = weights_for_shape(model::GPTConfig::preset(preset).block_size, 50257, 2, 4, 64, "test");
  Rng rng(seed);
  for (const auto& p : model::param_table(w.config)) {
    const size_t valid = p.name == "wte.weight" ? static_cast<size_t>(w.config.vocab_size * w.config.n_embd) : p.numel;
    for (size_t i = 0; i < valid; ++i) w.params[p.offset + i] = rng.uniform() - 0.5f;
  }
  return w;
}

TEST(Gpt2Weights, HuggingFaceRoundTripIsBitwiseAndUsesConv1DLayouts) {
  TempDir d;
  const ModelWeights w = random_weights("tiny", 3);
  export_hf(w, d / "hf", data::Gpt2Tokenizer::default_dir());
  const SafetensorsFile st = SafetensorsFile::read(d / "hf/model.safetensors");
  EXPECT_FALSE(st.contains("lm_head.weight")) << "the head is tied to wte, as save_pretrained writes it";
  EXPECT_EQ(st.entry("transformer.wte.weight").shape, (std::vector<int64_t>{50257, 64}));
  EXPECT_EQ(st.entry("transformer.h.1.mlp.c_fc.weight").shape, (std::vector<int64_t>{64, 256})) << "Conv1D (in, out)";
  // Element (in i, out o) of HF's c_fc is braid's (o, i).
  const auto table = model::param_table(w.config);
  for (const auto& p : table) {
    if (p.name != "h.1.mlp.c_fc.weight") continue;
    float hf;
    std::memcpy(&hf, st.data("transformer.h.1.mlp.c_fc.weight") + 4 * (5 * 256 + 17), 4);
    EXPECT_EQ(hf, w.params[p.offset + 17 * 64 + 5]);
  }
  const nlohmann::json cfg = nlohmann::json::parse(std::ifstream(d / "hf/config.json"));
  EXPECT_EQ(cfg["n_positions"], 64);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_TRUE(fs::file_size(d / "hf/vocab.json") > 100000 && fs::file_size(d / "hf/merges.txt") > 100000);
  const ModelWeights back = import_hf(d / "hf");
  EXPECT_EQ(back.model, "tiny");
  ASSERT_EQ(back.params.size(), w.params.size());
  EXPECT_EQ(std::memcmp(back.params.data(), w.params.data(), w.params.size() * 4), 0);
}

TEST(Gpt2Weights, HuggingFaceHalfTensorsAndHubNamesAreRead) {
  // The hub's GPT-2 files name tensors without "transformer." and may be bf16.
  TempDir d;
  const ModelWeights w = random_weights("tiny", 4);
  export_hf(w, d / "hf", data::Gpt2Tokenizer::default_dir());
  const SafetensorsFile st = SafetensorsFile::read(d / "hf/model.safetensors");
  std::vector<std::vector<uint16_t>> half;
  std::vector<TensorView> views;
  for (const auto& [name, e] : st.entries()) {
    const size_t n = (e.end - e.begin) / 4;
    half.emplace_back(n);
    const float* f = reinterpret_cast<const float*>(st.data(name));
    for (size_t i = 0; i < n; ++i) half.back()[i] = f32_to_bf16(f[i]);
    views.push_back({name.substr(std::strlen("transformer.")), "BF16", e.shape, half.back().data()});
  }
  write_safetensors(d / "hf/model.safetensors", views);
  const ModelWeights back = import_hf(d / "hf");
  for (size_t i = 0; i < w.params.size(); ++i)
    ASSERT_EQ(back.params[i], bf16_to_f32(f32_to_bf16(w.params[i]))) << "element " << i;
}

TEST(Gpt2Weights, LlmcRoundTripIsBitwiseAndItsHeaderIsChecked) {
  TempDir d;
  const ModelWeights w = random_weights("small", 5);
  export_llmc(w, d / "m.bin");
  EXPECT_EQ(fs::file_size(d / "m.bin"), 1024 + 4 * (w.params.size() - /* alignment gaps */ [&] {
                                          size_t gaps = w.params.size();
                                          for (const auto& p : model::param_table(w.config)) gaps -= p.numel;
                                          return gaps;
                                        }()));
  const ModelWeights back = import_llmc(d / "m.bin");
  EXPECT_EQ(back.model, "small");
  EXPECT_EQ(std::memcmp(back.params.data(), w.params.data(), w.params.size() * 4), 0);
  // A wrong magic, version and a cut file are refused by name.
  auto patch = [&](size_t at, int32_t v) {
    std::fstream f(d / "m.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&v), 4);
  };
  patch(4, 7);
  EXPECT_THROW(import_llmc(d / "m.bin"), DataError);
  patch(4, 3);
  patch(8, 100);  // max_seq_len: no preset
  EXPECT_THROW(import_llmc(d / "m.bin"), ConfigError);
  patch(8, 256);
  fs::resize_file(d / "m.bin", fs::file_size(d / "m.bin") - 4);
  EXPECT_THROW(import_llmc(d / "m.bin"), DataError);
  patch(0, 1);
  EXPECT_THROW(import_llmc(d / "m.bin"), DataError);
}

}  // namespace
}  // namespace braid::formats
