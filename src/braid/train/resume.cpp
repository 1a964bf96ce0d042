#include "braid/train/resume.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "braid/core/error.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/train/checkpoint_dir.h"

namespace braid::train {

namespace {
bool is_checkpoint_directory(const std::string& path) {
  static const std::regex step_dir("step_[0-9]+");
  return formats::has_sharded_metadata(path) ||
         std::regex_match(std::filesystem::path(path).lexically_normal().filename().string(), step_dir);
}
// The checkpoints of `dir`, newest first, as rank 0 lists them (every rank
// gets the same list). Throws Error when rank 0 cannot read the directory.
std::vector<CheckpointEntry> agreed_listing(const std::string& dir, comm::Communicator& world) {
  std::string msg;
  if (world.rank() == 0) {
    try {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& e : list_checkpoints(dir)) j.push_back({e.step, e.path, e.sharded});
      msg = j.dump();
    } catch (const std::exception& e) {
      msg = std::string("!") + e.what();
    }
  }
  if (world.size() > 1) comm::broadcast_string(world, msg, 0);
  BRAID_CHECK(msg.empty() || msg[0] != '!', "--resume ", dir, ": rank 0 could not read the directory: ", msg.substr(1));
  std::vector<CheckpointEntry> out;
  for (const auto& a : nlohmann::json::parse(msg))
    out.push_back({a[0].get<int64_t>(), a[1].get<std::string>(), a[2].get<bool>()});
  std::reverse(out.begin(), out.end());
  return out;
}

// "" when every rank's share of checkpoint e verifies (a sharded one's pieces
// split between the ranks, so a resume reads it once in all), else the lowest
// failing rank's reason, the same on every rank.
std::string verify_together(const CheckpointEntry& e, comm::Communicator& world) {
  std::string why;
  try {
    verify_entry(e, static_cast<size_t>(world.rank()), static_cast<size_t>(world.size()));
  } catch (const std::exception& x) {
    why = x.what();
  }
  if (world.size() == 1) return why;
  float first = why.empty() ? static_cast<float>(world.size()) : static_cast<float>(world.rank());
  world.all_reduce(&first, &first, 1, DType::f32, comm::ReduceOp::min);
  if (first >= static_cast<float>(world.size())) return "";
  comm::broadcast_string(world, why, static_cast<int>(first));
  return why;
}
}  // namespace

std::string find_resume_file(const TrainOptions& opt, comm::Communicator& world) {
  const std::string& spec = opt.resume;
  std::error_code ec;
  // A file, or a sharded checkpoint's own directory (committed, or a step_<N>
  // without metadata, which the loader names as an interrupted save).
  if (spec != "auto" && (!std::filesystem::is_directory(spec, ec) || is_checkpoint_directory(spec))) return spec;
  const std::string dir = spec == "auto" ? opt.save_dir : spec;
  const auto entries = agreed_listing(dir, world);
  for (const auto& e : entries) {
    const std::string why = verify_together(e, world);
    if (why.empty()) return e.path;
    if (world.rank() == 0) std::fprintf(stderr, "braid train: skipping a checkpoint that does not verify: %s\n", why.c_str());
  }
  if (!entries.empty())
    throw DataError(detail::concat("--resume ", dir, ": none of its ", entries.size(),
                                   " checkpoints verifies (each is named above with the reason); pass an older "
                                   "checkpoint, or start afresh in an empty --save directory"));
  BRAID_CONFIG_CHECK(spec == "auto", "--resume ", dir, " holds no checkpoint (step_<N> or step_<N>.ckpt); pass a directory "
                     "that `braid train --save` wrote, a checkpoint, or drop --resume to start afresh");
  return "";  // auto, nothing saved yet: a fresh start
}

int64_t finished_step(const TrainOptions& opt, const std::string& from) {
  if (opt.resume != "auto" || from.empty()) return -1;
  const nlohmann::json h = read_any_checkpoint_header(from);
  const int64_t step = h.at("step").get<int64_t>();
  return !h.contains("source") && step >= opt.steps ? step : -1;
}

void print_start_point(const std::string& from, int64_t step, const TrainingCheckpoint& ckpt,
                       const TrainOptions& opt) {
  if (from.empty()) {
    if (opt.resume == "auto")
      std::printf("--resume auto: no checkpoint in %s yet; starting at step 0\n", opt.save_dir.c_str());
    return;
  }
  std::printf("resumed from %s at step %lld\n", from.c_str(), static_cast<long long>(step));
  const int64_t planned = ckpt.saved_total_steps();
  if (!ckpt.source().empty())
    std::printf("fine-tuning weights imported from %s: step 0, fresh AdamW state\n", ckpt.source().c_str());
  else if (planned > 0 && planned != opt.steps)
    std::printf("the saved run planned %lld steps; this one trains to --steps %lld, so warm-up and cosine "
                "decay follow the new total from here on\n",
                static_cast<long long>(planned), static_cast<long long>(opt.steps));
}

}  // namespace braid::train
