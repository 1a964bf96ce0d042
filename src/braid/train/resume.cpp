#include "braid/train/resume.h"

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
}  // namespace

std::string find_resume_file(const TrainOptions& opt, comm::Communicator& world) {
  const std::string& spec = opt.resume;
  std::error_code ec;
  // A file, or a sharded checkpoint's own directory (committed, or a step_<N>
  // without metadata, which the loader names as an interrupted save).
  if (spec != "auto" && (!std::filesystem::is_directory(spec, ec) || is_checkpoint_directory(spec))) return spec;
  const std::string dir = spec == "auto" ? opt.save_dir : spec;
  // Rank 0's finding: a step, or why there is none.
  constexpr int64_t kEmpty = -1, kNoneVerifies = -2, kUnreadable = -3;
  int64_t found[2] = {kEmpty, 0};  // step, sharded
  std::string why;
  if (world.rank() == 0) {
    try {
      if (!list_checkpoints(dir).empty()) {
        auto e = newest_verified(dir, [](const std::string& w) {
          std::fprintf(stderr, "braid train: skipping a checkpoint that does not verify: %s\n", w.c_str());
        });
        found[0] = e ? e->step : kNoneVerifies;
        found[1] = e && e->sharded;
      }
    } catch (const std::exception& e) {
      found[0] = kUnreadable;
      why = e.what();
    }
  }
  // Raw 64-bit words travel as f32 pairs; broadcast copies bits.
  if (world.size() > 1) world.broadcast(found, 4, DType::f32, 0);
  if (found[0] >= 0) return checkpoint_path(dir, found[0], found[1] != 0);
  BRAID_CHECK(found[0] != kUnreadable, "--resume ", dir, ": rank 0 could not read the directory: ", why);
  if (found[0] == kNoneVerifies)
    throw DataError(detail::concat("--resume ", dir, ": none of its ", list_checkpoints(dir).size(),
                                   " checkpoints verifies (each is named above with the reason); pass an older "
                                   "checkpoint file, or start afresh in an empty --save directory"));
  BRAID_CONFIG_CHECK(spec == "auto", "--resume ", dir, " holds no checkpoint (step_<N> or step_<N>.ckpt); pass a directory "
                     "that `braid train --save` wrote, a checkpoint file, or drop --resume to start afresh");
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
