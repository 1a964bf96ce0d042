// Sharded checkpoints against the single file: in every data-, tensor-,
// context- and pipeline-parallel layout the pieces every rank writes hold,
// bit for bit, the state rank 0's gathered file holds; each rank writes a
// balanced share; and a checkpoint saved in one layout and resumed in another
// continues exactly as the single file does.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "braid/formats/checkpoint.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/model/param_layout.h"
#include "braid/parallel/plan_memory.h"
#include "braid/train/checkpoint_dir.h"
#include "braid/train/checkpoint_pieces.h"
#include "harness.h"

namespace braid::train {
namespace {

using testing_harness::run;

struct FullState {
  std::vector<float> p, m, v;
};

FullState read_file(const std::string& path, size_t n) {
  FullState s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  formats::load_checkpoint(path, n, s.p.data(), s.m.data(), s.v.data());
  return s;
}

// The three states of a sharded checkpoint in the whole model's flat layout.
FullState read_sharded(const std::string& dir, const std::vector<model::ParamInfo>& full, size_t n) {
  FullState s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  formats::ShardedCheckpointReader r(dir);
  std::vector<float>* out[3] = {&s.p, &s.m, &s.v};
  for (int st = 0; st < 3; ++st) sharded_flat_reader(r, full, 0, 1, st)(0, n, out[st]->data());
  return s;
}

TrainOptions base() {
  auto o = testing_harness::small_vocab(testing_harness::tiny_options(71));
  o.global_batch = 8;
  o.seq_len = 16;
  o.steps = 3;
  o.n_layer = 4;  // room for 2 x 2 interleaved stages
  o.check_replicas = false;
  return o;
}

// Trains o.steps steps on `ranks` ranks saving at the end into `dir` in `format`.
testing_harness::RankRuns save_run(TrainOptions o, int ranks, const std::vector<uint16_t>& data,
                                    const std::string& dir, const std::string& format) {
  std::filesystem::remove_all(dir);
  o.save_dir = dir;
  o.checkpoint_format = format;
  return run(o, ranks, data);
}

// Resumes `r` on `ranks` from the file and from the sharded directory of the
// same save: both continue alike, losses and final parameters bit for bit.
void expect_resumes_alike(TrainOptions r, int ranks, const std::vector<uint16_t>& data, const std::string& file,
                          const std::string& sdir, const std::string& what) {
  r.resume = file;
  const auto via_file = run(r, ranks, data);
  r.resume = sdir;
  const auto via_dir = run(r, ranks, data);
  testing_harness::expect_close(via_dir.steps[0], via_file.steps[0], what, 0.0);
  EXPECT_EQ(via_dir.hash, via_file.hash) << what;
}

struct Layout {
  const char* name;
  int ranks;
  void (*set)(TrainOptions&);
  bool even = true;  // every rank holds as much as every other (no pipeline stages, no server)
};

const Layout kLayouts[] = {
    {"ddp2", 2, [](TrainOptions&) {}},
    {"zero1-tp2", 4, [](TrainOptions& o) { o.tp = 2, o.zero = 1; }},
    {"zero3-tp2-sp", 4, [](TrainOptions& o) { o.tp = 2, o.zero = 3, o.sequence_parallel = true; }},
    {"hsdp-4x2", 4, [](TrainOptions& o) { o.fsdp = true, o.fsdp_shard_size = 2; }},
    {"pp2-interleaved-tp2", 4,
     [](TrainOptions& o) { o.pp = 2, o.tp = 2, o.schedule = "interleaved", o.virtual_stages = 2, o.micro_batch = 1; },
     false},
    {"cp2-zero2-bf16", 4, [](TrainOptions& o) { o.cp = 2, o.zero = 2, o.precision = "bf16"; }},
    {"ps3", 3, [](TrainOptions& o) { o.dp_mode = "ps"; }, false},
};

TEST(CheckpointLayouts, ShardedPiecesHoldTheFilesStateBitForBitAndBalanced) {
  const auto data = testing_harness::synthetic_tokens(20000, 5, testing_harness::kSmallVocab);
  const auto cfg = parallel::model_config(base());
  const auto full = model::param_table(cfg, 1);
  const size_t n = model::unit_bounds(cfg, 1).back();
  const std::string dir = testing_harness::tmp_path("braid_cl_");
  for (const Layout& l : kLayouts) {
    auto o = base();
    l.set(o);
    save_run(o, l.ranks, data, dir + "f", "file");
    save_run(o, l.ranks, data, dir + "s", "sharded");
    const FullState want = read_file(checkpoint_path(dir + "f", o.steps), n);
    const std::string sdir = checkpoint_path(dir + "s", o.steps, true);
    const FullState got = read_sharded(sdir, full, n);
    EXPECT_TRUE(got.p == want.p && got.m == want.m && got.v == want.v) << l.name;
    // Balanced where the ranks hold equal shares: the writers' bytes differ by
    // at most one split piece's three states.
    const auto m = formats::read_sharded_metadata(sdir);
    EXPECT_EQ(m.layout["world"], l.ranks) << l.name;
    if (!l.even) continue;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const auto& f : m.files) lo = std::min(lo, f.bytes), hi = std::max(hi, f.bytes);
    EXPECT_EQ(m.files.size(), size_t(l.ranks)) << l.name;
    EXPECT_LE(hi - lo, uint64_t(3 * 4 * kSplitElems)) << l.name << " writers' bytes " << lo << ".." << hi;
  }
  std::filesystem::remove_all(dir + "f");
  std::filesystem::remove_all(dir + "s");
}

TEST(CheckpointLayouts, ResumingInAnotherLayoutContinuesAsTheFileDoes) {
  // Saved in layout A after 3 steps; resumed in layout B for 2 more: the same
  // losses and final parameters, bit for bit, as resuming the single file.
  const auto data = testing_harness::synthetic_tokens(20000, 6, testing_harness::kSmallVocab);
  const std::string dir = testing_harness::tmp_path("braid_cl_resume_");
  const std::pair<int, int> pairs[] = {{2, 0}, {0, 3}, {4, 1}, {6, 5}, {1, 4}};
  for (const auto& [a, b] : pairs) {
    const Layout& from = kLayouts[a];
    const Layout& to = kLayouts[b];
    auto o = base();
    from.set(o);
    save_run(o, from.ranks, data, dir + "f", "file");
    save_run(o, from.ranks, data, dir + "s", "sharded");
    auto r = base();
    to.set(r);
    r.steps = 5;
    expect_resumes_alike(r, to.ranks, data, checkpoint_path(dir + "f", 3), checkpoint_path(dir + "s", 3, true),
                         std::string(from.name) + " -> " + to.name);
  }
  std::filesystem::remove_all(dir + "f");
  std::filesystem::remove_all(dir + "s");
}

TEST(CheckpointLayouts, LlamaPiecesHoldTheFilesStateAndResumeInAnotherLayout) {
  // The Llama block's tensors split unevenly (c_attn's q, k, v blocks of
  // unequal heights over TP; SwiGLU's gate and up): the sharded pieces still
  // hold the file's state bit for bit, both verify, and a resume in another
  // layout (the untied head moving onto a pipeline's last stage) continues
  // as the single file does.
  const auto data = testing_harness::synthetic_tokens(20000, 7, testing_harness::kSmallVocab);
  auto llama = [] {
    auto o = base();
    o.model = "llama-tiny";
    return o;
  };
  const auto cfg = parallel::model_config(llama());
  const auto full = model::param_table(cfg, 1);
  const size_t n = model::unit_bounds(cfg, 1).back();
  const std::string dir = testing_harness::tmp_path("braid_cl_llama_");
  const std::pair<int, int> pairs[] = {{2, 4}, {4, 5}};
  for (const auto& [a, b] : pairs) {
    const Layout& from = kLayouts[a];
    const Layout& to = kLayouts[b];
    auto o = llama();
    from.set(o);
    save_run(o, from.ranks, data, dir + "f", "file");
    save_run(o, from.ranks, data, dir + "s", "sharded");
    const std::string file = checkpoint_path(dir + "f", o.steps), sdir = checkpoint_path(dir + "s", o.steps, true);
    EXPECT_EQ(formats::verify_checkpoint(file).header["block"]["mlp"], "swiglu");
    const FullState want = read_file(file, n), got = read_sharded(sdir, full, n);
    EXPECT_TRUE(got.p == want.p && got.m == want.m && got.v == want.v) << from.name;
    auto r = llama();
    to.set(r);
    r.steps = 5;
    expect_resumes_alike(r, to.ranks, data, file, sdir, std::string("llama ") + from.name + " -> " + to.name);
  }
  std::filesystem::remove_all(dir + "f");
  std::filesystem::remove_all(dir + "s");
}

TEST(CheckpointLayouts, AsyncSavesHoldWhatSyncSavesHoldWithinThePlannedStaging) {
  // Saved every step, sync and --async-save: the same losses, the same pieces
  // bit for bit at every step, and each rank's staging buffer within what
  // `braid plan --async-save` counts for it (and nothing without the flag).
  const auto data = testing_harness::synthetic_tokens(20000, 8, testing_harness::kSmallVocab);
  const auto cfg = parallel::model_config(base());
  const auto full = model::param_table(cfg, 1);
  const size_t n = model::unit_bounds(cfg, 1).back();
  const std::string dir = testing_harness::tmp_path("braid_cl_async_");
  for (const int li : {0, 2, 3, 4}) {
    const Layout& l = kLayouts[li];
    auto o = base();
    l.set(o);
    o.save_every = 1;
    const auto sync = save_run(o, l.ranks, data, dir + "s", "sharded");
    std::filesystem::remove_all(dir + "a");
    auto a = o;
    a.save_dir = dir + "a";
    a.async_save = true;
    std::vector<size_t> staged(size_t(l.ranks));
    const auto runs = run(a, l.ranks, data, [&](Trainer& t, int r) { staged[size_t(r)] = t.ledger().peak(MemCategory::staging); });
    for (int64_t step = 1; step <= o.steps; ++step) {
      const FullState want = read_sharded(checkpoint_path(dir + "s", step, true), full, n);
      const FullState got = read_sharded(checkpoint_path(dir + "a", step, true), full, n);
      EXPECT_TRUE(got.p == want.p && got.m == want.m && got.v == want.v) << l.name << " step " << step;
    }
    for (int r = 0; r < l.ranks; ++r) {
      const size_t planned = parallel::plan_memory(a, l.ranks, r).at(MemCategory::staging);
      EXPECT_LE(staged[size_t(r)], planned) << l.name << " rank " << r;
      EXPECT_EQ(parallel::plan_memory(o, l.ranks, r).at(MemCategory::staging), 0u) << l.name;
    }
    EXPECT_GT(*std::max_element(staged.begin(), staged.end()), 0u) << l.name;
    testing_harness::expect_close(runs.steps[0], sync.steps[0], l.name, 0.0);
  }
  std::filesystem::remove_all(dir + "s");
  std::filesystem::remove_all(dir + "a");
}

}  // namespace
}  // namespace braid::train
