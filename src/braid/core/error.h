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

/// Throws braid::ConfigError with the concatenated message (no file:line: the
/// message is for the user and must name the values and the fix).
#define BRAID_CONFIG_CHECK(cond, ...)                                      \
  do {                                                                     \
    if (!(cond)) throw ::braid::ConfigError(::braid::detail::concat(__VA_ARGS__)); \
  } while (0)
