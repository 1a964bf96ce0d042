// Checkpoint files and directories: round trip, every damaged byte caught,
// every header field checked by name, and a writer killed at any point of a
// save (each phase, 20 seeded payload offsets) leaving the previous checkpoint
// as the newest that verifies, bit for bit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "braid/core/error.h"
#include "braid/core/rng.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/gpt2_weights.h"
#include "braid/model/param_layout.h"
#include "braid/train/checkpoint_dir.h"

namespace braid::train {
namespace {

namespace fs = std::filesystem;

// The three arrays of a checkpoint of n elements, filled from a seed.
struct State {
  std::vector<float> p, m, v;
  State(size_t n, uint64_t seed) : p(n), m(n), v(n) {
    Rng rng(seed);
    for (size_t i = 0; i < n; ++i) p[i] = rng.uniform() - 0.5f, m[i] = rng.uniform() - 0.5f, v[i] = rng.uniform();
  }
};

nlohmann::json header(int64_t step, size_t n) {
  return {{"format", "braid-checkpoint"}, {"model", "tiny"}, {"step", step}, {"n_params", n},
          {"seed", 1337u}, {"global_batch", 8}, {"seq_len", 16}, {"n_layer", 2},
          {"n_head", 2}, {"n_embd", 32}, {"vocab_size", 64}};
}

// Elements of the model header() describes: a header's sizes must match its n_params.
const size_t kN = model::unit_bounds(formats::header_config(header(0, 0))).back();

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("braid_ckpt_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void save(const std::string& path, const nlohmann::json& h, const State& s, const formats::SaveFault& f = {}) {
    formats::save_checkpoint(path, {h, s.p.data(), s.m.data(), s.v.data()}, f);
  }
  // The DataError message of loading `path`, or "" when it loads.
  static std::string load_error(const std::string& path, size_t n) {
    State out(n, 0);
    try {
      formats::load_checkpoint(path, n, out.p.data(), out.m.data(), out.v.data());
    } catch (const DataError& e) {
      return e.what();
    }
    return "";
  }
  static std::string read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  static void write_bytes(const std::string& p, const std::string& b) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << b;
  }
  // Replaces the header of the checkpoint at `path` by `h` (keeping the
  // writer's payload checksums) with a matching header checksum: a file whose
  // only fault is a field, as a foreign or buggy writer would make it.
  static void rewrite_header(const std::string& path, nlohmann::json h) {
    const std::string b = read_bytes(path);
    uint64_t hlen = 0;
    std::memcpy(&hlen, b.data() + 12, 8);
    const auto old = nlohmann::json::parse(b.substr(24, hlen));
    if (!h.contains("crc32")) h["crc32"] = old["crc32"];
    const std::string hdr = h.dump();
    const uint64_t nlen = hdr.size();
    const uint32_t crc = static_cast<uint32_t>(::crc32_z(0, reinterpret_cast<const Bytef*>(hdr.data()), hdr.size()));
    std::string out = b.substr(0, 12);
    out.append(reinterpret_cast<const char*>(&nlen), 8).append(reinterpret_cast<const char*>(&crc), 4);
    write_bytes(path, out + hdr + b.substr(24 + hlen));
  }
  std::string dir_;
};

TEST_F(CheckpointTest, RoundTripsBitForBitAndVerifies) {
  const size_t n = kN;
  const State s(n, 1);
  const std::string path = checkpoint_path(dir_, 7);
  save(path, header(7, n), s);
  State out(n, 0);
  const formats::CheckpointInfo info = formats::load_checkpoint(path, n, out.p.data(), out.m.data(), out.v.data());
  EXPECT_EQ(info.version, 2u);
  EXPECT_EQ(info.header["step"], 7);
  EXPECT_EQ(std::memcmp(out.p.data(), s.p.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(out.m.data(), s.m.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(out.v.data(), s.v.data(), n * 4), 0);
  EXPECT_EQ(formats::verify_checkpoint(path).header["n_params"], n);
  EXPECT_EQ(fs::path(path).filename(), "step_7.ckpt");
}

TEST_F(CheckpointTest, EveryFlippedBitAndEveryTruncationIsCaught) {
  const size_t n = kN;
  const std::string path = checkpoint_path(dir_, 1);
  save(path, header(1, n), State(n, 2));
  const std::string good = read_bytes(path);
  Rng rng(99);
  // 200 single-bit flips over the whole file (prelude, header, each array).
  for (int t = 0; t < 200; ++t) {
    std::string b = good;
    const size_t at = t < 24 ? static_cast<size_t>(t) : rng.next() % b.size();
    b[at] = static_cast<char>(b[at] ^ (1 << (rng.next() % 8)));
    write_bytes(path, b);
    EXPECT_NE(load_error(path, n), "") << "a flipped bit at byte " << at << " loaded";
    EXPECT_THROW(formats::verify_checkpoint(path), DataError) << "byte " << at;
  }
  // 30 truncations and one trailing byte.
  for (int t = 0; t <= 30; ++t) {
    const size_t len = t < 30 ? rng.next() % good.size() : good.size() + 1;
    write_bytes(path, t < 30 ? good.substr(0, len) : good + "x");
    const std::string e = load_error(path, n);
    EXPECT_NE(e, "") << "a file of " << len << " of " << good.size() << " bytes loaded";
    EXPECT_NE(e.find(path), std::string::npos) << e;
  }
}

TEST_F(CheckpointTest, EveryHeaderFieldIsCheckedByName) {
  const size_t n = kN;
  const State s(n, 3);
  const std::string path = checkpoint_path(dir_, 1);
  for (const char* k : {"format", "model", "step", "n_params", "seed", "global_batch", "seq_len", "n_layer",
                        "n_head", "n_embd", "vocab_size"}) {
    for (int bad = 0; bad < 2; ++bad) {
      auto h = header(1, n);
      if (bad == 0) h.erase(k);
      else h[k] = std::string(k) == "model" ? nlohmann::json(-1) : nlohmann::json(-5);
      save(path, header(1, n), s);
      rewrite_header(path, h);
      const std::string e = load_error(path, n);
      EXPECT_NE(e.find(std::string("header field '") + k + "'"), std::string::npos) << k << ": " << e;
      EXPECT_NE(e.find(path), std::string::npos) << e;
    }
  }
  auto h = header(1, n);
  h["loss_scale"] = {{"scale", -1.0}, {"growth_tracker", 0}, {"hysteresis_left", 2}};
  save(path, header(1, n), s);
  rewrite_header(path, h);
  EXPECT_NE(load_error(path, n).find("'loss_scale'"), std::string::npos);
  // An edited size under a matching checksum is damage, not another model.
  h = header(1, n);
  h["n_layer"] = 3;
  save(path, header(1, n), s);
  rewrite_header(path, h);
  EXPECT_NE(load_error(path, n).find("need "), std::string::npos) << load_error(path, n);
  // Another model's checkpoint: a configuration error naming its flags.
  save(path, header(1, n), s);
  State out(n + 1, 0);
  try {
    formats::load_checkpoint(path, n + 1, out.p.data(), out.m.data(), out.v.data());
    FAIL() << "a checkpoint of another size loaded";
  } catch (const DataError&) {
    FAIL() << "a size mismatch is a configuration error, not damage";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--model tiny --n-layer 2 --n-head 2 --n-embd 32"), std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, VersionOneFilesStillLoadUnverified) {
  const size_t n = kN;
  const State s(n, 4);
  const std::string hdr = header(3, n).dump();
  std::string b = "BRAIDCKP";
  const uint32_t version = 1;
  const uint64_t hlen = hdr.size();
  b.append(reinterpret_cast<const char*>(&version), 4).append(reinterpret_cast<const char*>(&hlen), 8).append(hdr);
  for (const auto* a : {&s.p, &s.m, &s.v}) b.append(reinterpret_cast<const char*>(a->data()), n * 4);
  const std::string path = (fs::path(dir_) / "old.ckpt").string();
  write_bytes(path, b);
  State out(n, 0);
  const formats::CheckpointInfo info = formats::load_checkpoint(path, n, out.p.data(), out.m.data(), out.v.data());
  EXPECT_EQ(info.version, 1u);
  EXPECT_EQ(std::memcmp(out.v.data(), s.v.data(), n * 4), 0);
}

// Forks a writer that saves `path` with the fault and must die of SIGKILL.
void save_killed(const std::string& path, const nlohmann::json& h, const State& s, const formats::SaveFault& f) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      formats::save_checkpoint(path, {h, s.p.data(), s.m.data(), s.v.data()}, f);
    } catch (...) {
    }
    ::_exit(3);  // the fault did not fire
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
}

TEST_F(CheckpointTest, AWriterKilledAnywhereLeavesTheNewestDurableCheckpoint) {
  const size_t n = kN;
  const State first(n, 5), second(n, 6);
  save(checkpoint_path(dir_, 1), header(1, n), first);
  const uint64_t file_bytes = fs::file_size(checkpoint_path(dir_, 1));
  std::vector<formats::SaveFault> faults = {{formats::SavePhase::payload, file_bytes / 2},
                                   {formats::SavePhase::before_file_fsync, 0},
                                   {formats::SavePhase::before_rename, 0},
                                   {formats::SavePhase::before_dir_fsync, 0}};
  Rng rng(2024);
  for (int i = 0; i < 20; ++i) faults.push_back({formats::SavePhase::payload, rng.next() % file_bytes});
  for (const auto& f : faults) {
    SCOPED_TRACE("phase " + std::to_string(static_cast<int>(f.phase)) + " at byte " + std::to_string(f.at_byte));
    save_killed(checkpoint_path(dir_, 2), header(2, n), second, f);
    const bool renamed = f.phase == formats::SavePhase::before_dir_fsync;
    // The next start cleans up the interrupted save and resumes from the newest file that verifies.
    EXPECT_EQ(remove_interrupted_saves(dir_).size(), renamed ? 0u : 1u);
    std::vector<std::string> skipped;
    const auto e = newest_verified(dir_, [&](const std::string& w) { skipped.push_back(w); });
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->step, renamed ? 2 : 1);
    EXPECT_TRUE(skipped.empty()) << skipped.front();
    const State& want = renamed ? second : first;
    State got(n, 0);
    formats::load_checkpoint(e->path, n, got.p.data(), got.m.data(), got.v.data());
    EXPECT_EQ(std::memcmp(got.p.data(), want.p.data(), n * 4), 0);
    EXPECT_EQ(std::memcmp(got.v.data(), want.v.data(), n * 4), 0);
    fs::remove(checkpoint_path(dir_, 2));
    EXPECT_EQ(list_checkpoints(dir_).size(), 1u);
  }
}

TEST_F(CheckpointTest, DirectoriesListPruneAndSkipDamagedFiles) {
  const size_t n = kN;
  for (int64_t s : {10, 2, 30, 4}) save(checkpoint_path(dir_, s), header(s, n), State(n, static_cast<uint64_t>(s)));
  write_bytes((fs::path(dir_) / "notes.txt").string(), "not a checkpoint");
  write_bytes((fs::path(dir_) / "step_x.ckpt").string(), "not one either");
  auto all = list_checkpoints(dir_);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all.front().step, 2);
  EXPECT_EQ(all.back().step, 30);  // numeric order, not the names'
  // The newest is damaged: skipped, with the reason.
  std::string b = read_bytes(checkpoint_path(dir_, 30));
  b.back() = static_cast<char>(b.back() ^ 1);
  write_bytes(checkpoint_path(dir_, 30), b);
  std::vector<std::string> skipped;
  const auto e = newest_verified(dir_, [&](const std::string& w) { skipped.push_back(w); });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step, 10);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("step_30.ckpt is damaged"), std::string::npos) << skipped[0];
  // A file whose name and header disagree is skipped too.
  fs::copy_file(checkpoint_path(dir_, 4), checkpoint_path(dir_, 20));
  skipped.clear();
  EXPECT_EQ(newest_verified(dir_, [&](const std::string& w) { skipped.push_back(w); })->step, 10);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[1].find("step_20.ckpt holds step 4, not the step its name says"), std::string::npos) << skipped[1];
  fs::remove(checkpoint_path(dir_, 20));
  // Pruning after a save of step 10 keeps the newest 2 of steps <= 10 and
  // never touches a later file (here the damaged step 30).
  EXPECT_EQ(prune_checkpoints(dir_, 2, 10).size(), 1u);
  all = list_checkpoints(dir_);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].step, 4);
  EXPECT_EQ(all[2].step, 30);
  EXPECT_EQ(prune_checkpoints(dir_, 0, 30).size(), 0u);  // 0 keeps all
  // Only canonical names are checkpoints: step_007.ckpt names no step.
  fs::copy_file(checkpoint_path(dir_, 4), (fs::path(dir_) / "step_007.ckpt"));
  EXPECT_EQ(list_checkpoints(dir_).size(), 3u);
  EXPECT_FALSE(newest_verified((fs::path(dir_) / "missing").string(), [](const std::string&) {}).has_value());
}

TEST(SaveFault, ParsesItsFormsAndRefusesOthers) {
  EXPECT_EQ(formats::parse_save_fault("payload:123").at_byte, 123u);
  EXPECT_EQ(formats::parse_save_fault("before-rename").phase, formats::SavePhase::before_rename);
  const formats::SaveFault stop = formats::parse_save_fault("payload-stop:7@3");
  EXPECT_TRUE(stop.stop && stop.phase == formats::SavePhase::payload && stop.at_byte == 7u && stop.rank == 3);
  EXPECT_FALSE(formats::parse_save_fault("payload:7").stop);
  for (const char* bad : {"payload", "payload:x", "payload-stop", "payload-stop:", "payload:1x", "payload:-5", "payload: 5", "payload:+5",
                          "payload:99999999999999999999", "rename", ""}) {
    try {
      formats::parse_save_fault(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("before-dir-fsync"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace braid::train
