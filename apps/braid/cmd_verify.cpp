// `braid verify CK`: checks a checkpoint (a file, or a sharded checkpoint's
// directory: header fields, sizes, every checksum) or every checkpoint of a
// --save directory, without training.
#include <cstdio>
#include <filesystem>
#include <string>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/sharded_checkpoint.h"
#include "braid/train/checkpoint_dir.h"

namespace braid::cli {

namespace {

// One line for a file that verifies; the DataError's message for one that does
// not. named_step: the step a directory entry's name gives (-1 for a file).
bool verify_one(const train::CheckpointEntry& e, bool named) {
  const std::string& path = e.path;
  try {
    const nlohmann::json h = named ? train::verify_entry(e) : formats::verify_any_checkpoint(path);
    std::string what = "checksums match";
    if (e.sharded) {
      const auto m = formats::read_sharded_metadata(path);
      what = detail::concat(m.pieces.size(), " pieces in ", m.files.size(), " files, checksums match");
    } else if (formats::read_checkpoint_header(path).version < 2) {
      what = "version 1: no checksums to check";
    }
    std::printf("%s: ok | step %lld | model %s (L=%lld H=%lld C=%lld V=%lld) | %.2fM parameters | %s\n",
                path.c_str(), (long long)h["step"].get<int64_t>(), h["model"].get<std::string>().c_str(),
                (long long)h["n_layer"].get<int64_t>(), (long long)h["n_head"].get<int64_t>(),
                (long long)h["n_embd"].get<int64_t>(), (long long)h["vocab_size"].get<int64_t>(),
                h["n_params"].get<double>() / 1e6, what.c_str());
    return true;
  } catch (const ConfigError& e) {
    std::printf("%s: FAILED | %s\n", path.c_str(), e.what());
    return false;
  }
}

}  // namespace

void add_verify(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("verify", "Check a checkpoint (a file or a sharded step_<N> directory), or every checkpoint of a --save directory, without training");
  c->add_option("checkpoint", *path, "A checkpoint file or a --save directory")->required()->type_name("FILE|DIR");
  c->callback([path] {
    std::error_code ec;
    BRAID_CONFIG_CHECK(std::filesystem::exists(*path, ec), "braid verify: ", *path, " not found");
    const bool dir = std::filesystem::is_directory(*path, ec);
    if (!dir || formats::has_sharded_metadata(*path)) {
      if (!verify_one({-1, *path, dir}, false)) throw DataError(detail::concat("checkpoint ", *path, " does not verify"));
      return;
    }
    const auto all = train::list_checkpoints(*path);
    BRAID_CONFIG_CHECK(!all.empty(), "braid verify: ", *path, " holds no checkpoint (step_<N> or step_<N>.ckpt)");
    size_t bad = 0;
    for (const auto& e : all) bad += verify_one(e, true) ? 0 : 1;
    std::printf("%zu of %zu checkpoints verify\n", all.size() - bad, all.size());
    if (bad == all.size()) throw DataError(detail::concat("no checkpoint of ", *path, " verifies"));
  });
}

}  // namespace braid::cli
