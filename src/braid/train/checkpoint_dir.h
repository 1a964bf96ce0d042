// Checkpoint directories: `--save DIR` keeps DIR/step_<N>.ckpt, one file per
// save, pruned to the newest `--keep-last` only once a new one is durable;
// `--resume DIR|auto|FILE` picks the newest file that verifies.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace braid::train {

/// DIR/step_<step>.ckpt
std::string checkpoint_path(const std::string& dir, int64_t step);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
};

/// The step_<N>.ckpt files of `dir`, oldest first (none when dir is missing).
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

/// Removes the temporary files (`step_<N>.ckpt.tmp.<pid>`) that interrupted
/// saves left in `dir` (not those of a writer still running on this host);
/// returns their paths so the caller can say so.
std::vector<std::string> remove_interrupted_saves(const std::string& dir);

/// Deletes all but the newest `keep_last` checkpoints of `dir` among those of
/// steps <= saved_step (0 keeps all; later steps are never touched). Returns
/// the paths removed.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last, int64_t saved_step);

/// The newest checkpoint of `dir` that verifies (every checksum read, and its
/// header's step is its name's), or none. Each newer file that fails is
/// reported through `skipped` with the reason.
std::optional<CheckpointEntry> newest_verified(const std::string& dir,
                                               const std::function<void(const std::string&)>& skipped);

}  // namespace braid::train
