#include "braid/train/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include <signal.h>
#include <unistd.h>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/formats/checkpoint.h"

namespace braid::train {

namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step_" + std::to_string(step) + ".ckpt")).string();
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  // Canonical names only (no zero padding), so a step names exactly one file.
  static const std::regex name("step_(0|[1-9][0-9]{0,17})\\.ckpt");
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (e.is_regular_file(ec) && std::regex_match(f, m, name)) out.push_back({std::stoll(m[1].str()), e.path().string()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::vector<std::string> remove_interrupted_saves(const std::string& dir) {
  static const std::regex name("step_[0-9]+\\.ckpt\\.tmp\\.([0-9]{1,9})");
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (!std::regex_match(f, m, name)) continue;
    // A writer still running on this host is another job's save in progress: not ours to remove.
    const pid_t pid = static_cast<pid_t>(std::stol(m[1].str()));
    if (pid != ::getpid() && ::kill(pid, 0) == 0) continue;
    if (fs::remove(e.path(), ec)) out.push_back(e.path().string());
  }
  if (!out.empty()) sync_directory(dir);
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last, int64_t saved_step) {
  std::vector<std::string> out;
  if (keep_last <= 0) return out;
  // Only this run's past: files of later steps (another run's, or damaged ones
  // a resume skipped) are never counted or touched.
  auto all = list_checkpoints(dir);
  all.erase(std::remove_if(all.begin(), all.end(), [&](const auto& e) { return e.step > saved_step; }), all.end());
  std::error_code ec;
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i)
    if (fs::remove(all[i].path, ec)) out.push_back(all[i].path);
  if (!out.empty()) sync_directory(dir);
  return out;
}

std::optional<CheckpointEntry> newest_verified(const std::string& dir,
                                               const std::function<void(const std::string&)>& skipped) {
  auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      const int64_t step = formats::verify_checkpoint(it->path).header["step"].get<int64_t>();
      if (step == it->step) return *it;
      skipped(detail::concat("checkpoint ", it->path, " holds step ", step, ", not the step its name says"));
    } catch (const std::exception& e) {
      skipped(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace braid::train
