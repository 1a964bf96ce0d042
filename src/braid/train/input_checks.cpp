#include "braid/train/input_checks.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/train/checkpoint_dir.h"

namespace braid::train {

namespace {
void check_ids(data::TokenView d, const char* what, const model::GPTConfig& cfg,
               bool vocab_given) {
  const uint32_t mx = d.max();
  BRAID_CONFIG_CHECK(mx < cfg.vocab_size, what, " data holds token id ", mx, " outside the model's vocabulary of ",
                     cfg.vocab_size,
                     vocab_given ? "; use --vocab-size " + std::to_string(int64_t(mx) + 1) + " or more (or drop it)"
                                 : std::string("; re-create it with `braid prepare-data`"));
}
}  // namespace

void check_token_data(const TrainOptions& opt, const model::GPTConfig& cfg, data::TokenView train,
                      data::TokenView val) {
  check_ids(train, "training", cfg, opt.vocab_size > 0);
  if (val.empty() || opt.val_every <= 0) return;
  check_ids(val, "validation", cfg, opt.vocab_size > 0);
  BRAID_CONFIG_CHECK(val.size() > static_cast<size_t>(opt.seq_len) + 1, "validation data holds ", val.size(),
                     " tokens, fewer than one sequence of --seq-len ", opt.seq_len,
                     " + 1; use more validation data, a shorter --seq-len, or --val-every 0");
}

void check_checkpoint_flags(const TrainOptions& opt, int world_size) {
  const bool save = !opt.save_dir.empty();
  BRAID_CONFIG_CHECK(save || opt.save_every == 0, "--save-every ", opt.save_every,
                     " has no effect without --save DIR; pass both or neither");
  BRAID_CONFIG_CHECK(save || opt.keep_last == 0, "--keep-last ", opt.keep_last,
                     " has no effect without --save DIR; pass both or neither");
  BRAID_CONFIG_CHECK(opt.save_every >= 0 && opt.keep_last >= 0, "--save-every ", opt.save_every, " and --keep-last ",
                     opt.keep_last, " must be >= 0 (0: at the end only / keep every checkpoint)");
  BRAID_CONFIG_CHECK(opt.resume != "auto" || save,
                     "--resume auto takes the newest checkpoint of --save DIR; pass --save DIR too");
  BRAID_CONFIG_CHECK(!opt.async_save || opt.checkpoint_format == "sharded",
                     "--async-save writes sharded checkpoints; drop --checkpoint-format file or --async-save");
  BRAID_CONFIG_CHECK(!opt.async_save || save, "--async-save has no effect without --save DIR; pass both or neither");
  BRAID_CONFIG_CHECK(!opt.ps_async || opt.save_every == 0, "--save-every ", opt.save_every,
                     " with --ps-async: the asynchronous server saves at the end and on a stop signal only; "
                     "drop --save-every");
  if (opt.save_fault_step < 0) return;
  BRAID_CONFIG_CHECK(opt.save_fault.rank < world_size, "--inject-save-fault @", opt.save_fault.rank,
                     " names a rank of a world of ", world_size, " ranks; name a rank below ", world_size);
  const bool sharded_only = opt.save_fault.rank != 0 || opt.save_fault.phase == formats::SavePhase::before_metadata ||
                           opt.save_fault.phase == formats::SavePhase::write_error;
  BRAID_CONFIG_CHECK(opt.checkpoint_format == "sharded" || !sharded_only,
                     "--inject-save-fault: before-metadata, write-error and @RANK are faults of sharded saves; drop "
                     "--checkpoint-format file");
  const int64_t s = opt.save_fault_step + 1;  // the step of the checkpoint whose save fails
  BRAID_CONFIG_CHECK(save && s <= opt.steps && (s == opt.steps || (opt.save_every > 0 && s % opt.save_every == 0)),
                     "--inject-save-fault ", s, ": no checkpoint is saved at step ", s, " (--save DIR, --steps ",
                     opt.steps, ", --save-every ", opt.save_every, "), so the fault would never fire");
}

void prepare_save_dir(const std::string& dir, bool resuming, bool verbose) {
  make_writable_directory(dir, "--save");
  for (const auto& f : remove_interrupted_saves(dir))
    if (verbose) std::printf("braid train: removed %s, left by an interrupted save\n", f.c_str());
  const auto held = list_checkpoints(dir);
  BRAID_CONFIG_CHECK(resuming || held.empty(), "--save ", dir, " already holds ", held.size(),
                     " checkpoints (the newest ", held.empty() ? "" : held.back().path,
                     "); a fresh run would overwrite them: pass --resume ", dir,
                     " (or --resume auto) to continue that run, or choose an empty directory");
}

}  // namespace braid::train
