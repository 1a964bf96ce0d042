// Errors and check macros. Every failure throws braid::Error carrying file:line,
// so a failing rank can report where and why before the job is taken down.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace braid {

/// The one exception type braid throws for invalid input, failed invariants and
/// backend errors. what() holds "<file>:<line>: <message>".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// Thrown for a configuration the user can fix (bad flag, missing file). The
/// message names the values and the fix; no file:line prefix is added.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& msg) : Error(msg) {}
};

/// Thrown for damaged or foreign input data (a checkpoint or token file whose
/// checksum, size or header does not hold). The message names the file, the
/// damaged part and what to use instead.
class DataError : public ConfigError {
 public:
  explicit DataError(const std::string& msg) : ConfigError(msg) {}
};

/// A rank of a multi-rank job failed or stalled (its error, a communication
/// deadline passed, a peer that is gone): what the other ranks, and the job, end with.
class RankFailure : public Error {
 public:
  explicit RankFailure(const std::string& msg) : Error(msg) {}
};

/// The process exit codes of the braid CLI (documented in docs/USAGE.md, "Exit codes").
enum class ExitCode : int {
  ok = 0,
  error = 1,         // an internal error (a failed invariant: a bug to report)
  config = 2,        // a configuration the user can fix: a flag, a missing file, a layout that does not fit
  data = 3,          // damaged or foreign input data: a checkpoint or token file
  rank_failure = 4,  // a rank of a multi-rank job failed or stalled
};

/// The exit code for an exception reaching the CLI's top level.
inline ExitCode exit_code_of(const std::exception& e) {
  if (dynamic_cast<const DataError*>(&e)) return ExitCode::data;
  if (dynamic_cast<const ConfigError*>(&e)) return ExitCode::config;
  if (dynamic_cast<const RankFailure*>(&e)) return ExitCode::rank_failure;
  return ExitCode::error;
}

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace braid

/// Throws braid::Error("file:line: check `cond` failed: <message>") when cond is false.
#define BRAID_CHECK(cond, ...)                                                            \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      throw ::braid::Error(::braid::detail::concat(__FILE__, ":", __LINE__, ": check `", \
                                                   #cond, "` failed: ", __VA_ARGS__));    \
    }                                                                                     \
  } while (0)

/// Throws braid::Error when a == b does not hold, printing both values.
#define BRAID_CHECK_EQ(a, b, ...)                                                          \
  do {                                                                                     \
    if (!((a) == (b))) {                                                                   \
      throw ::braid::Error(::braid::detail::concat(__FILE__, ":", __LINE__, ": ", #a, "=", \
                                                   (a), " != ", #b, "=", (b), ": ",        \
                                                   ##__VA_ARGS__));                        \
    }                                                                                      \
  } while (0)

/// Throws braid::DataError with the concatenated message (naming the file).
#define BRAID_DATA_CHECK(cond, ...)                                        \
  do {                                                                     \
    if (!(cond)) throw ::braid::DataError(::braid::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws braid::ConfigError with the concatenated message (no file:line: the
/// message is for the user and must name the values and the fix).
#define BRAID_CONFIG_CHECK(cond, ...)                                      \
  do {                                                                     \
    if (!(cond)) throw ::braid::ConfigError(::braid::detail::concat(__VA_ARGS__)); \
  } while (0)
