#include "braid/train/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include <signal.h>
#include <unistd.h>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/sharded_checkpoint.h"

namespace braid::train {

namespace fs = std::filesystem;

std::string checkpoint_path(const std::string& dir, int64_t step, bool sharded) {
  return (fs::path(dir) / ("step_" + std::to_string(step) + (sharded ? "" : ".ckpt"))).string();
}

std::vector<CheckpointEntry> list_checkpoints(const std::string& dir) {
  // Canonical names only (no zero padding), so a step names exactly one file.
  static const std::regex name("step_(0|[1-9][0-9]{0,17})(\\.ckpt)?");
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string f = e.path().filename().string();
    if (!std::regex_match(f, m, name)) continue;
    const bool sharded = !m[2].matched;
    const bool ok = sharded ? e.is_directory(ec) && formats::has_sharded_metadata(e.path().string()) : e.is_regular_file(ec);
    if (ok) out.push_back({std::stoll(m[1].str()), e.path().string(), sharded});
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return std::make_pair(a.step, a.sharded) < std::make_pair(b.step, b.sharded); });
  return out;
}

namespace {
// Removes a sharded checkpoint directory: its metadata first, so that a crash
// part-way leaves an uncommitted directory (cleaned at the next start), never
// a committed one with missing pieces.
bool remove_sharded(const fs::path& d) {
  std::error_code ec;
  fs::remove(d / formats::kMetadataFile, ec);
  if (ec) return false;
  sync_directory(d.string());
  return fs::remove_all(d, ec) != static_cast<std::uintmax_t>(-1) && !ec;
}

std::vector<std::string> remove_interrupted_sharded(const std::string& dir) {
  static const std::regex name("step_(0|[1-9][0-9]{0,17})");
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec) || !std::regex_match(e.path().filename().string(), name)) continue;
    if (!formats::has_sharded_metadata(e.path().string())) {
      if (fs::remove_all(e.path(), ec) != static_cast<std::uintmax_t>(-1) && !ec) out.push_back(e.path().string());
      continue;
    }
    bool removed = false;
    for (const auto& f : formats::unreferenced_files(e.path().string()))
      if (fs::remove(f, ec)) out.push_back(f), removed = true;
    if (removed) sync_directory(e.path().string());
  }
  return out;
}
}  // namespace

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
  for (auto& p : remove_interrupted_sharded(dir)) out.push_back(std::move(p));
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
    if (all[i].sharded ? remove_sharded(all[i].path) : fs::remove(all[i].path, ec)) out.push_back(all[i].path);
  if (!out.empty()) sync_directory(dir);
  return out;
}

nlohmann::json verify_entry(const CheckpointEntry& e, size_t part, size_t parts) {
  if (!e.sharded && part != 0) return {};
  nlohmann::json h = e.sharded ? formats::verify_sharded_checkpoint(e.path, part, parts)
                               : formats::verify_checkpoint(e.path).header;
  const int64_t step = h["step"].get<int64_t>();
  if (step != e.step)
    throw DataError(detail::concat("checkpoint ", e.path, " holds step ", step, ", not the step its name says"));
  return h;
}

std::optional<CheckpointEntry> newest_verified(const std::string& dir,
                                               const std::function<void(const std::string&)>& skipped) {
  auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      verify_entry(*it);
      return *it;
    } catch (const std::exception& e) {
      skipped(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace braid::train
