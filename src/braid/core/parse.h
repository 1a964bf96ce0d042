// Strict parsing of counts in flags: digits only, no sign, no spaces, no
// trailing characters, no overflow (sscanf and stoll accept all of those).
#pragma once
#include <charconv>
#include <cstdint>
#include <string>

namespace braid {

/// Parses `s` as a decimal count into `out`; false when it is not exactly one.
inline bool parse_count(const std::string& s, uint64_t& out) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace braid
