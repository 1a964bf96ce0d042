#include "braid/formats/save_fault.h"

#include <csignal>
#include <cstdlib>

#include "braid/core/error.h"
#include "braid/core/parse.h"

namespace braid::formats {

void die_here() {
  std::raise(SIGKILL);
  std::abort();  // not reached
}

void FaultyWriter::write(const void* p, size_t n) {
  if (armed_ && f_.phase == SavePhase::payload && written_ <= f_.at_byte && written_ + n > f_.at_byte) {
    const size_t head = static_cast<size_t>(f_.at_byte - written_);
    w_.write(p, head);
    if (!f_.stop) die_here();
    std::raise(SIGSTOP);  // a stalled writer; whoever sends SIGCONT lets it finish
    w_.write(static_cast<const char*>(p) + head, n - head);
    written_ += n;
    return;
  }
  w_.write(p, n);
  written_ += n;
}

SaveFault parse_save_fault(const std::string& spec) {
  SaveFault f;
  std::string s = spec;
  const size_t at = s.find('@');
  uint64_t number = 0;
  if (at != std::string::npos) {
    BRAID_CONFIG_CHECK(parse_count(s.substr(at + 1), number) && number < (1u << 30), "--inject-save-fault '", spec,
                       "': the rank after '@' is not a rank number");
    f.rank = static_cast<int>(number);
    s = s.substr(0, at);
  }
  const std::string pre = "payload:", pre_stop = "payload-stop:";
  if (s.rfind(pre, 0) == 0 && parse_count(s.substr(pre.size()), number)) {
    f.phase = SavePhase::payload;
    f.at_byte = number;
  } else if (s.rfind(pre_stop, 0) == 0 && parse_count(s.substr(pre_stop.size()), number)) {
    f.phase = SavePhase::payload;
    f.at_byte = number;
    f.stop = true;
  } else if (s == "before-file-fsync") {
    f.phase = SavePhase::before_file_fsync;
  } else if (s == "before-metadata") {
    f.phase = SavePhase::before_metadata;
  } else if (s == "before-rename") {
    f.phase = SavePhase::before_rename;
  } else if (s == "before-dir-fsync") {
    f.phase = SavePhase::before_dir_fsync;
  } else if (s == "write-error") {
    f.phase = SavePhase::write_error;
  } else {
    throw ConfigError("--inject-save-fault '" + spec +
                      "' is not known; use payload:BYTE, payload-stop:BYTE, before-file-fsync, before-metadata, before-rename, "
                      "before-dir-fsync or write-error, each optionally followed by @RANK");
  }
  return f;
}

}  // namespace braid::formats
