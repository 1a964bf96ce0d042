// `--config FILE`: a sub-command's options from a TOML file, under a section
// named after the sub-command ([train], [plan], [eval], ...), read with CLI11's
// TOML reader. Flags on the command line override the file.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace braid::cli {

/// Adds `--config FILE` to every sub-command of `app` (its help text names the
/// section) and makes a repeated option take its last value, so the command
/// line, placed after the file's values, wins.
void add_config_option(CLI::App& app);

/// The command line with the `--config FILE` of the sub-command being run
/// expanded: argv[0], the sub-command, the file's options (as --key=value;
/// a flag set to true as --key), then the rest of the command line. Values of
/// other sections are ignored. Throws ConfigError naming the file, section and
/// key for a key outside any section, a section that names no sub-command, an
/// option the sub-command does not have, or a file that cannot be read.
/// `*path` (when given) receives the file's name, "" without --config.
std::vector<std::string> expand_config(const CLI::App& app, int argc, char** argv, std::string* path = nullptr);

}  // namespace braid::cli
