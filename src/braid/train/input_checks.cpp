#include "braid/train/input_checks.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "braid/core/error.h"

namespace braid::train {

namespace {
void check_ids(const std::vector<uint16_t>& d, const char* what, const model::GPTConfig& cfg,
               bool vocab_given) {
  const uint16_t mx = d.empty() ? uint16_t{0} : *std::max_element(d.begin(), d.end());
  BRAID_CONFIG_CHECK(mx < cfg.vocab_size, what, " data holds token id ", mx, " outside the model's vocabulary of ",
                     cfg.vocab_size,
                     vocab_given ? "; use --vocab-size " + std::to_string(int64_t(mx) + 1) + " or more (or drop it)"
                                 : std::string("; re-create it with `braid prepare-data`"));
}
}  // namespace

void check_token_data(const TrainOptions& opt, const model::GPTConfig& cfg, const std::vector<uint16_t>& train,
                      const std::vector<uint16_t>* val) {
  check_ids(train, "training", cfg, opt.vocab_size > 0);
  if (!val || opt.val_every <= 0) return;
  check_ids(*val, "validation", cfg, opt.vocab_size > 0);
  BRAID_CONFIG_CHECK(val->size() > static_cast<size_t>(opt.seq_len) + 1, "validation data holds ", val->size(),
                     " tokens, fewer than one sequence of --seq-len ", opt.seq_len,
                     " + 1; use more validation data, a shorter --seq-len, or --val-every 0");
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  BRAID_CONFIG_CHECK(!fs::is_directory(path, ec), "--save ", path, " is a directory; give a file name inside it");
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  const fs::path probe = parent / (".braid_write_probe_" + std::to_string(::getpid()));
  std::ofstream f(probe);
  const bool ok = f.good();
  f.close();
  fs::remove(probe, ec);
  BRAID_CONFIG_CHECK(ok, "--save ", path, ": cannot write in ", parent.string(), "; choose a writable location");
}

}  // namespace braid::train
