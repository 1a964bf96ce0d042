#include "braid/comm/flight_recorder.h"

#include <nlohmann/json.hpp>

#include "braid/core/error.h"

namespace braid::comm {

const char* op_state_name(OpState s) {
  switch (s) {
    case OpState::queued: return "queued";
    case OpState::started: return "started";
    case OpState::completed: return "completed";
    case OpState::failed: return "failed";
  }
  return "?";
}

std::string OpRecord::describe() const {
  if (collective()) {
    std::string s = detail::concat(op, " #", seq);
    if (!dtype.empty()) {
      s += detail::concat(" (", count, " x ", dtype);
      if (!reduce.empty()) s += ", " + reduce;
      if (peer >= 0) s += detail::concat(", root ", peer);
      s += ")";
    }
    return label.empty() ? s : s + " [" + label + "]";
  }
  const bool to = op == "send" || op == "isend";
  return detail::concat(op, " #", p2p_seq, " (", count, " bytes ", to ? "to" : "from", " rank ",
                        peer, ", tag ", tag, ")");
}

FlightRecorder::FlightRecorder(size_t capacity) : ring_(capacity == 0 ? 1 : capacity) {}

uint64_t FlightRecorder::add(OpRecord r) {
  std::lock_guard<std::mutex> lk(mu_);
  r.id = next_id_++;
  ring_[r.id % ring_.size()] = r;
  open_[r.id] = std::move(r);
  return next_id_ - 1;
}

void FlightRecorder::set_state(uint64_t id, OpState s, double t, const std::string& error) {
  std::lock_guard<std::mutex> lk(mu_);
  auto apply = [&](OpRecord& r) {
    r.state = s;
    if (s == OpState::started)
      r.t_started = t;
    else if (s != OpState::queued)
      r.t_completed = t;
    if (!error.empty()) r.error = error;
  };
  OpRecord& slot = ring_[id % ring_.size()];
  if (slot.id == id && id < next_id_) apply(slot);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  apply(it->second);
  if (s == OpState::completed || s == OpState::failed) open_.erase(it);
}

std::vector<OpRecord> FlightRecorder::recent() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<OpRecord> out;
  const uint64_t n = ring_.size();
  const uint64_t first = next_id_ > n ? next_id_ - n : 0;
  for (uint64_t id = first; id < next_id_; ++id) out.push_back(ring_[id % n]);
  return out;
}

std::vector<OpRecord> FlightRecorder::unfinished() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<OpRecord> out;
  for (const auto& [id, r] : open_) out.push_back(r);
  return out;
}

bool FlightRecorder::find(uint64_t id, OpRecord& out) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = open_.find(id); it != open_.end()) {
    out = it->second;
    return true;
  }
  const OpRecord& slot = ring_[id % ring_.size()];
  if (slot.id != id || id >= next_id_) return false;
  out = slot;
  return true;
}

nlohmann::json to_json(const std::vector<OpRecord>& ops) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : ops) {
    nlohmann::json j = {{"id", r.id}, {"op", r.op}, {"state", op_state_name(r.state)},
                        {"count", r.count}, {"t_queued", r.t_queued}};
    if (r.collective()) {
      j["seq"] = r.seq;
      j["dtype"] = r.dtype;
      if (!r.reduce.empty()) j["reduce"] = r.reduce;
      if (r.peer >= 0) j["root"] = r.peer;
    } else {
      j["p2p_seq"] = r.p2p_seq;
      j["peer"] = r.peer;
      j["tag"] = r.tag;
    }
    if (r.async) j["async"] = true;
    if (!r.label.empty()) j["label"] = r.label;
    if (r.t_started >= 0) j["t_started"] = r.t_started;
    if (r.t_completed >= 0) j["t_completed"] = r.t_completed;
    if (!r.error.empty()) j["error"] = r.error;
    a.push_back(std::move(j));
  }
  return a;
}

}  // namespace braid::comm
