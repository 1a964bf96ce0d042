// The test hook of checkpoint saves: where a writer kills its own process
// with SIGKILL, to show that a crash at any point of a save leaves the newest
// durable checkpoint loadable.
#pragma once
#include <cstdint>
#include <string>

#include "braid/core/file_io.h"

namespace braid::formats {

/// payload: inside the data (a single file's bytes, or one rank's piece file);
/// before_file_fsync: after the data is written; before_metadata: a sharded
/// save's rank 0 once every piece file is durable, before its metadata file;
/// before_rename, before_dir_fsync: around the rename of the single file or
/// of the metadata file; write_error: a sharded save's piece file fails to
/// write (an I/O error, not a crash: the run must fail with the reason).
enum class SavePhase { none, payload, before_file_fsync, before_metadata, before_rename, before_dir_fsync, write_error };
struct SaveFault {
  SavePhase phase = SavePhase::none;
  uint64_t at_byte = 0;  // SavePhase::payload: die once this many bytes of the file are written
  int rank = 0;          // sharded saves, payload, before_file_fsync, write_error: the rank it hits
  bool stop = false;     // payload: stop (SIGSTOP) there instead of dying, as a stalled host does;
                         // continued (SIGCONT), the write goes on
};

/// Parses "PHASE[:BYTE][@RANK]" (payload:N, payload-stop:N, before-file-fsync, before-metadata,
/// before-rename, before-dir-fsync, write-error). Throws ConfigError naming the accepted forms.
SaveFault parse_save_fault(const std::string& spec);

/// Kills this process (SIGKILL, no clean-up), as a crash would.
[[noreturn]] void die_here();

/// A FileWriter that kills its process once the fault's byte is reached.
class FaultyWriter {
 public:
  /// `armed`: whether the fault applies to this writer (its rank and file).
  FaultyWriter(FileWriter& w, const SaveFault& f, bool armed = true) : w_(w), f_(f), armed_(armed) {}
  void write(const void* p, size_t n);
  uint64_t written() const { return written_; }

 private:
  FileWriter& w_;
  const SaveFault& f_;
  bool armed_;
  uint64_t written_ = 0;
};

}  // namespace braid::formats
