// `braid verify CK`: checks a checkpoint file (header fields, size, every
// checksum) or every checkpoint of a directory, without training.
#include <cstdio>
#include <filesystem>
#include <string>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/formats/checkpoint.h"
#include "braid/train/checkpoint_dir.h"

namespace braid::cli {

namespace {

// One line for a file that verifies; the DataError's message for one that does
// not. named_step: the step a directory entry's name gives (-1 for a file).
bool verify_one(const std::string& path, int64_t named_step = -1) {
  try {
    const auto info = formats::verify_checkpoint(path);
    const auto& h = info.header;
    if (named_step >= 0 && h["step"].get<int64_t>() != named_step)
      throw DataError(detail::concat("checkpoint ", path, " holds step ", h["step"].get<int64_t>(),
                                     ", not the step its name says"));
    std::printf("%s: ok | step %lld | model %s (L=%lld H=%lld C=%lld V=%lld) | %.2fM parameters | %s\n",
                path.c_str(), (long long)h["step"].get<int64_t>(), h["model"].get<std::string>().c_str(),
                (long long)h["n_layer"].get<int64_t>(), (long long)h["n_head"].get<int64_t>(),
                (long long)h["n_embd"].get<int64_t>(), (long long)h["vocab_size"].get<int64_t>(),
                h["n_params"].get<double>() / 1e6,
                info.version >= 2 ? "checksums match" : "version 1: no checksums to check");
    return true;
  } catch (const ConfigError& e) {
    std::printf("%s: FAILED | %s\n", path.c_str(), e.what());
    return false;
  }
}

}  // namespace

void add_verify(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("verify", "Check a checkpoint file, or every checkpoint of a directory, without training");
  c->add_option("checkpoint", *path, "A checkpoint file or a --save directory")->required()->type_name("FILE|DIR");
  c->callback([path] {
    std::error_code ec;
    BRAID_CONFIG_CHECK(std::filesystem::exists(*path, ec), "braid verify: ", *path, " not found");
    if (!std::filesystem::is_directory(*path, ec)) {
      if (!verify_one(*path)) throw DataError(detail::concat("checkpoint ", *path, " does not verify"));
      return;
    }
    const auto all = train::list_checkpoints(*path);
    BRAID_CONFIG_CHECK(!all.empty(), "braid verify: ", *path, " holds no step_<N>.ckpt file");
    size_t bad = 0;
    for (const auto& e : all) bad += verify_one(e.path, e.step) ? 0 : 1;
    std::printf("%zu of %zu checkpoints verify\n", all.size() - bad, all.size());
    if (bad == all.size()) throw DataError(detail::concat("no checkpoint of ", *path, " verifies"));
  });
}

}  // namespace braid::cli
