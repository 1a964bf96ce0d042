// Checkpoint directories: `--save DIR` keeps one checkpoint per save,
// DIR/step_<N> (sharded: a directory, formats/sharded_checkpoint.h) or
// DIR/step_<N>.ckpt (a single file), pruned to the newest `--keep-last` only
// once a new one is durable; `--resume DIR|auto|PATH` picks the newest that
// verifies.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace braid::train {

/// DIR/step_<step> (sharded) or DIR/step_<step>.ckpt.
std::string checkpoint_path(const std::string& dir, int64_t step, bool sharded = false);

struct CheckpointEntry {
  int64_t step = 0;
  std::string path;
  bool sharded = false;
};

/// The checkpoints of `dir`, oldest first (none when dir is missing): the
/// step_<N>.ckpt files and the step_<N> directories that hold a metadata
/// file (committed); for one step the directory comes after the file.
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

/// Removes what interrupted saves left in `dir`: temporary files
/// (`step_<N>.ckpt.tmp.<pid>`, not those of a writer still running on this
/// host), step_<N> directories without a metadata file, and the files of a
/// committed step_<N> that its metadata does not name. Returns their paths
/// so the caller can say so. Call it before this run saves anything.
std::vector<std::string> remove_interrupted_saves(const std::string& dir);

/// Deletes all but the newest `keep_last` checkpoints of `dir` among those of
/// steps <= saved_step (0 keeps all; later steps are never touched). Returns
/// the paths removed.
std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t keep_last, int64_t saved_step);

/// Checks checkpoint `e` (a file or a sharded directory): every checksum, and
/// its header's step is its name's. Returns the header; throws DataError.
/// parts > 1: this caller's share `part` of a sharded directory's pieces
/// (verify_sharded_checkpoint); a file is checked whole by part 0 alone.
nlohmann::json verify_entry(const CheckpointEntry& e, size_t part = 0, size_t parts = 1);

/// The newest checkpoint of `dir` that verifies (verify_entry), or none.
/// Each newer one that fails is reported through `skipped` with the reason.
std::optional<CheckpointEntry> newest_verified(const std::string& dir,
                                               const std::function<void(const std::string&)>& skipped);

}  // namespace braid::train
