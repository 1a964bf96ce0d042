// Sharded checkpoints' parts on their own: the geometry of boxes and
// flattened ranges against brute force, the writer assignment (every element
// once, by one of its holders, balanced), the metadata's round trip and its
// checks, and the reader (only the chunks it needs, each checked; a damaged
// one named by file and rank).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/model/param_layout.h"
#include "braid/train/checkpoint_pieces.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;
using formats::TensorBox;

// Global (row, col) -> index in the tensor, for element k of box b's flattening.
int64_t global_of(const TensorBox& b, int64_t k, int64_t tensor_cols) {
  return (b.row0 + k / b.cols) * tensor_cols + b.col0 + k % b.cols;
}

TEST(ShardedCheckpoint, OverlapRunsMatchBruteForce) {
  Rng rng(11);
  const int64_t R = 7, C = 9;
  auto random_box = [&] {
    const int64_t r0 = int64_t(rng.next() % R), c0 = int64_t(rng.next() % C);
    return TensorBox{r0, c0, 1 + int64_t(rng.next() % uint64_t(R - r0)), 1 + int64_t(rng.next() % uint64_t(C - c0))};
  };
  for (int t = 0; t < 3000; ++t) {
    // Half the cases share columns (the fast path), as TP row splits do.
    TensorBox a = random_box(), b = random_box();
    if (t % 2) b.col0 = a.col0, b.cols = a.cols;
    const int64_t ab = int64_t(rng.next() % uint64_t(a.numel())), ae = ab + 1 + int64_t(rng.next() % uint64_t(a.numel() - ab));
    const int64_t bb = int64_t(rng.next() % uint64_t(b.numel())), be = bb + 1 + int64_t(rng.next() % uint64_t(b.numel() - bb));
    std::map<int64_t, int64_t> want;  // global -> (src index in a's range)
    std::map<int64_t, int64_t> in_b;
    for (int64_t k = bb; k < be; ++k) in_b[global_of(b, k, C)] = k - bb;
    std::set<std::pair<int64_t, int64_t>> expected, got;
    for (int64_t k = ab; k < ae; ++k) {
      const auto it = in_b.find(global_of(a, k, C));
      if (it != in_b.end()) expected.insert({k - ab, it->second});
    }
    int64_t last_src = -1, last_dst = -1;
    for (const auto& r : formats::overlap_runs(a, ab, ae, b, bb, be)) {
      ASSERT_GT(r.len, 0);
      EXPECT_GT(r.src, last_src);
      EXPECT_GT(r.dst, last_dst);
      for (int64_t i = 0; i < r.len; ++i) got.insert({r.src + i, r.dst + i});
      last_src = r.src + r.len - 1, last_dst = r.dst + r.len - 1;
    }
    ASSERT_EQ(got, expected) << "case " << t;
  }
}

// Every element of every box is written exactly once, by a rank that holds it.
void expect_written_once(const std::vector<std::vector<HeldPiece>>& held,
                         const std::vector<std::vector<WriteSpan>>& spans) {
  using Box = std::tuple<int64_t, int64_t, int64_t>;  // (tensor, row0, col0)
  std::map<Box, std::vector<int>> held_count, written;
  auto grow = [](std::vector<int>& v, int64_t n) { v.resize(std::max(v.size(), size_t(n))); };
  for (const auto& rank : held)
    for (const auto& h : rank) {
      auto& c = held_count[{h.tensor, h.box.row0, h.box.col0}];
      grow(c, h.end);
      for (int64_t k = h.begin; k < h.end; ++k) c[size_t(k)] = 1;
    }
  for (size_t r = 0; r < spans.size(); ++r)
    for (const auto& s : spans[r]) {
      const HeldPiece& h = held[r].at(s.piece);
      ASSERT_LE(h.begin, s.begin);
      ASSERT_LE(s.end, h.end);
      auto& c = written[{h.tensor, h.box.row0, h.box.col0}];
      grow(c, s.end);
      for (int64_t k = s.begin; k < s.end; ++k) ++c[size_t(k)];
    }
  for (auto& [box, want] : held_count) {
    auto& got = written[box];
    grow(got, int64_t(want.size()));
    ASSERT_EQ(got, want) << "tensor " << std::get<0>(box);
  }
}

TEST(ShardedCheckpoint, AssignWritersWritesEveryElementOnceBalanced) {
  // DDP over 4 replicas of a model of many small tensors and a big one: each
  // element once, and the bytes each rank writes within one split piece.
  const int64_t big = 3 * kSplitElems + 17;
  std::vector<HeldPiece> model;
  for (int64_t t = 0; t < 40; ++t) model.push_back({t, TensorBox{0, 0, 1, 1000 + t}, 0, 1000 + t, 0});
  model.push_back({40, TensorBox{0, 0, 1, big}, 0, big, 0});
  const std::vector<std::vector<HeldPiece>> ddp(4, model);
  const auto spans = assign_writers(ddp);
  expect_written_once(ddp, spans);
  std::vector<int64_t> load;
  for (const auto& r : spans) {
    int64_t n = 0;
    for (const auto& s : r) n += s.end - s.begin;
    load.push_back(n);
  }
  EXPECT_LE(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()), kSplitElems);
  // Shards cut at different places (a TP-replicated tensor under ZeRO on two
  // TP ranks) and a rank with nothing: still each element once.
  std::vector<std::vector<HeldPiece>> cut(5);
  const TensorBox box{0, 0, 1, 1000};
  cut[0] = {{0, box, 0, 300, 0}};
  cut[1] = {{0, box, 300, 1000, 0}};
  cut[2] = {{0, box, 0, 550, 0}};
  cut[3] = {{0, box, 550, 1000, 0}, {1, TensorBox{4, 0, 4, 8}, 0, 32, 0}};
  expect_written_once(cut, assign_writers(cut));
}

TEST(ShardedCheckpoint, HeldPiecesMapElementsAsFullIndexDoes) {
  // Every local element of every tensor (c_attn's three row blocks, row and
  // column splits, replicated tensors) lands where model::full_index says.
  model::GPTConfig cfg = formats::header_config(
      {{"model", "tiny"}, {"n_layer", 2}, {"n_head", 4}, {"n_embd", 32}, {"vocab_size", 128}, {"block_size", 16}});
  const auto full = model::param_table(cfg, 1);
  for (const int tp : {1, 2, 4}) {
    const auto table = model::param_table(cfg, tp);
    for (int q = 0; q < tp; ++q) {
      const size_t n = table.back().offset + table.back().numel;
      const auto held = held_pieces(table, {{0, n, 0}}, q, tp, false);
      size_t covered = 0;
      for (const auto& h : held) {
        const auto& lp = *std::find_if(table.begin(), table.end(), [&](const auto& p) { return p.global_index == size_t(h.tensor); });
        const int64_t cols = full[size_t(h.tensor)].full_shape.size() == 2 ? full[size_t(h.tensor)].full_shape[1] : full[size_t(h.tensor)].full_shape[0];
        for (int64_t k = h.begin; k < h.end; ++k) {
          const size_t local = h.flat + size_t(k - h.begin) - lp.offset;
          ASSERT_EQ(size_t(global_of(h.box, k, cols)), model::full_index(lp, local, q, tp)) << lp.name << " tp " << tp;
        }
        covered += size_t(h.end - h.begin);
      }
      size_t want = 0;
      for (const auto& p : table) want += p.numel;
      EXPECT_EQ(covered, want);
    }
  }
}

class ShardedFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("braid_sharded_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name())).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    cfg_ = {{"format", "braid-checkpoint"}, {"model", "tiny"}, {"step", 5}, {"seed", 1u}, {"global_batch", 4},
            {"seq_len", 8}, {"n_layer", 1}, {"n_head", 2}, {"n_embd", 32}, {"vocab_size", 64}, {"block_size", 8}};
    const auto c = formats::header_config(cfg_);
    cfg_["n_params"] = model::unit_bounds(c).back();
    table_ = model::param_table(c);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the model's tensors, each state's value = f(tensor, state, element),
  // split over `ranks` piece files by halves of each tensor's flattening.
  formats::ShardedMetadata write(int ranks) {
    formats::ShardedMetadata m;
    m.header = cfg_;
    m.layout = {{"world", ranks}};
    for (const auto& p : table_) m.tensors.push_back({p.name, p.full_shape});
    std::vector<std::unique_ptr<formats::PieceFileWriter>> w;
    for (int r = 0; r < ranks; ++r) w.push_back(std::make_unique<formats::PieceFileWriter>(dir_, name(r), formats::SaveFault{}, false));
    for (size_t t = 0; t < table_.size(); ++t)
      for (int s = 0; s < 3; ++s) {
        const TensorBox whole = m.tensors[t].whole();
        for (int r = 0; r < ranks; ++r) {
          const int64_t b = whole.numel() * r / ranks, e = whole.numel() * (r + 1) / ranks;
          if (b == e) continue;
          std::vector<float> v;
          for (int64_t k = b; k < e; ++k) v.push_back(value(t, s, k));
          formats::PieceMeta p{int64_t(t), s, whole, b, e, r, 0, {}};
          p.offset = w[size_t(r)]->append(v.data(), v.size(), p.crc32);
          m.pieces.push_back(p);
        }
      }
    for (int r = 0; r < ranks; ++r) {
      w[size_t(r)]->finish();
      m.files.push_back({name(r), r, w[size_t(r)]->bytes()});
    }
    formats::write_sharded_metadata(dir_, m);
    return m;
  }
  static float value(size_t t, int s, int64_t k) { return float(t) * 1000.f + float(s) * 0.25f + float(k) * 1e-3f; }
  static std::string name(int r) { return "r" + std::to_string(r) + ".x.bin"; }
  std::string dir_;
  nlohmann::json cfg_;
  std::vector<model::ParamInfo> table_;
};

TEST_F(ShardedFiles, MetadataRoundTripsAndEveryFieldIsChecked) {
  const auto m = write(3);
  const std::string bytes = formats::encode_sharded_metadata(m);
  const auto back = formats::decode_sharded_metadata(bytes, dir_);
  EXPECT_EQ(formats::encode_sharded_metadata(back), bytes);
  auto expect_damage = [&](const std::string& b, const std::string& what) {
    try {
      formats::decode_sharded_metadata(b, dir_);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x20;
  expect_damage(flipped, "checksum does not match");
  expect_damage(bytes.substr(0, bytes.size() - 3), "does not match its");
  expect_damage("NOTMETA!" + bytes.substr(8), "BRAIDSHD");
  auto edited = [&](auto&& edit) {
    formats::ShardedMetadata e = m;
    edit(e);
    return formats::encode_sharded_metadata(e);
  };
  expect_damage(edited([](auto& e) { e.pieces[0].end += 1; }), "its pieces hold");
  expect_damage(edited([](auto& e) { e.pieces[0].end = e.pieces[0].box.numel() + 1; }), "piece 0's field 'range'");
  expect_damage(edited([](auto& e) { e.pieces[2].offset = e.files[0].bytes; }), "pass the end of");
  expect_damage(edited([](auto& e) { e.pieces.pop_back(); }), "its pieces hold");
  expect_damage(edited([](auto& e) { e.pieces[1].crc32.push_back(1); }), "crc32");
  expect_damage(edited([](auto& e) { e.files[0].name = "../x"; }), "plain file name");
  expect_damage(edited([](auto& e) { e.tensors[0].shape[0] += 1; }), "tensors are not the");
  expect_damage(edited([](auto& e) { e.header["n_layer"] = 2; }), "need ");
}

TEST_F(ShardedFiles, ReaderReadsOnlyTheChunksItNeedsAndChecksThem) {
  write(2);
  formats::ShardedCheckpointReader r(dir_);
  // A TP-like column slice of wte: rows 3..40, columns 8..16 of exp_avg.
  const int64_t t = r.tensor_index("wte.weight");
  const TensorBox box{3, 8, 38, 8};
  std::vector<float> got(size_t(box.numel()) - 5);
  r.read(t, 1, box, 5, box.numel(), got.data());
  const int64_t cols = r.metadata().tensors[size_t(t)].shape[1];
  for (int64_t k = 5; k < box.numel(); ++k) ASSERT_EQ(got[size_t(k - 5)], value(size_t(t), 1, global_of(box, k, cols)));
  // wte's exp_avg is two pieces of under a chunk each: at most those two chunks read.
  EXPECT_LE(r.bytes_read(), 2 * formats::kPieceChunkBytes);
  EXPECT_LE(r.bytes_read(), uint64_t(r.metadata().tensors[size_t(t)].whole().numel()) * 4);
  // Every state of every tensor reads back whole.
  for (size_t i = 0; i < table_.size(); ++i)
    for (int s = 0; s < 3; ++s) {
      const TensorBox whole = r.metadata().tensors[i].whole();
      std::vector<float> all(size_t(whole.numel()));
      r.read(int64_t(i), s, whole, 0, whole.numel(), all.data());
      for (int64_t k = 0; k < whole.numel(); ++k) ASSERT_EQ(all[size_t(k)], value(i, s, k));
    }
  EXPECT_EQ(formats::verify_sharded_checkpoint(dir_)["step"], 5);
}

TEST_F(ShardedFiles, ADamagedOrMissingPieceIsNamedByFileAndRank) {
  write(2);
  {
    std::fstream f(fs::path(dir_) / name(1), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  try {
    formats::verify_sharded_checkpoint(dir_);
    FAIL() << "a flipped byte verified";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(name(1) + ", written by rank 1, does not match"), std::string::npos) << e.what();
  }
  fs::resize_file(fs::path(dir_) / name(0), 10);
  try {
    formats::verify_sharded_checkpoint(dir_);
    FAIL() << "a truncated file verified";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(name(0) + ", written by rank 0, has 10 bytes"), std::string::npos) << e.what();
  }
  fs::remove(fs::path(dir_) / formats::kMetadataFile);
  EXPECT_THROW(formats::read_sharded_metadata(dir_), ConfigError);
  EXPECT_EQ(formats::unreferenced_files(dir_).size(), 2u);  // an interrupted save: everything goes
}

}  // namespace
}  // namespace braid::train
