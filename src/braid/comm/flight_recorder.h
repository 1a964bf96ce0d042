// The flight recorder: every communicator keeps its last operations (PyTorch's
// ProcessGroupNCCL flight recorder is the model), so that when a wait times out the
// rank can say what it was doing and what it had finished. Operations still queued
// or running are kept even after they fall out of the ring.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace braid::comm {

enum class OpState : uint8_t { queued, started, completed, failed };
const char* op_state_name(OpState s);

/// One operation. Collectives carry `seq`, their position among the collectives of
/// this communicator (0, 1, ...): the same call has the same seq on every rank of the
/// group. Point-to-point operations carry `p2p_seq` instead (their order on this
/// rank). Times are seconds on this rank's steady clock since its monitor started.
struct OpRecord {
  uint64_t id = 0;         // order of calls on this communicator (assigned by add)
  int64_t seq = -1;        // collective sequence number, -1 for point-to-point
  int64_t p2p_seq = -1;    // point-to-point sequence number, -1 for collectives
  std::string op;          // "all_reduce", "send", "recv", "barrier", ...
  uint64_t count = 0;      // elements (collectives) or bytes (point-to-point)
  std::string dtype;       // "f32", "bf16", ... ("" for point-to-point)
  std::string reduce;      // "sum", ... ("" when the op does not reduce)
  int peer = -1;           // group rank of the peer (p2p) or root (broadcast); -1 none
  int tag = -1;            // p2p tag
  bool async = false;      // queued on the progress thread
  OpState state = OpState::queued;
  double t_queued = 0, t_started = -1, t_completed = -1;
  std::string error;
  std::string label;       // what the caller does with it ("DDP bucket 3"), may be empty

  bool collective() const { return seq >= 0; }
  /// "all_reduce #12 (1024 x f32, sum) [DDP bucket 3]" / "recv #3 (4096 bytes from rank 2, tag 7)".
  std::string describe() const;
};

/// Thread-safe ring of the last `capacity` operations plus the ones not yet finished.
class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 64);

  /// Records a new operation; returns its id.
  uint64_t add(OpRecord r);
  /// Moves operation `id` to state s at time t (error text for failed).
  void set_state(uint64_t id, OpState s, double t, const std::string& error = {});
  /// The ring, oldest first.
  std::vector<OpRecord> recent() const;
  /// Operations queued or started, oldest first.
  std::vector<OpRecord> unfinished() const;
  /// Operation `id` if it is unfinished or still in the ring.
  bool find(uint64_t id, OpRecord& out) const;

 private:
  mutable std::mutex mu_;
  std::vector<OpRecord> ring_;
  uint64_t next_id_ = 0;
  std::map<uint64_t, OpRecord> open_;  // queued or started
};

/// The record as JSON: an array of operations (fields as in OpRecord).
nlohmann::json to_json(const std::vector<OpRecord>& ops);

}  // namespace braid::comm
