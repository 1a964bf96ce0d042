#include "braid/train/trace.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "braid/core/error.h"

namespace braid::train {

namespace {
std::string span_name(const char* what, int64_t index) {
  std::string s(what);
  s += std::to_string(index);
  return s;
}
}  // namespace

void TraceRecorder::start(comm::Communicator& world, bool log) {
  if (!enabled()) return;
  if (world.size() > 1) {
    // Ranks may run on different hosts, whose steady clocks share no epoch:
    // each rank's spans go onto rank 0's clock by an offset measured here.
    clock_ = measure_clock_offset(world);
    float err = static_cast<float>(clock_.error_us);
    world.all_reduce(&err, &err, 1, DType::f32, comm::ReduceOp::max);
    if (log) std::printf("trace: clocks aligned to rank 0, max error %.0f us over %d ranks\n", err, world.size());
  }
  origin_ = now_us();
}

void TraceRecorder::span(std::string name, const char* cat, const std::string& lane, double t0_us, double t1_us,
                         std::string detail) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = std::find(lanes_.begin(), lanes_.end(), lane);
  const int l = static_cast<int>(it - lanes_.begin());
  if (it == lanes_.end()) lanes_.push_back(lane);
  events_.push_back({std::move(name), cat, std::move(detail), t0_us - origin_, t1_us - t0_us, l});
}

void TraceRecorder::write(comm::Communicator& world) const {
  if (path_.empty()) return;
  // Every rank serialises its spans (pid = world rank, tid = 0) with its start
  // on rank 0's clock; rank 0 receives them in rank order, shifts each rank's
  // spans by its start and writes one file (rename: atomic).
  nlohmann::json events = nlohmann::json::array();
  std::unique_lock<std::mutex> lk(mu_);
  for (const auto& e : events_) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"ts", e.ts}, {"dur", e.dur},
                        {"pid", world.rank()}, {"tid", e.lane}};
    if (!e.detail.empty()) j["args"] = {{"detail", e.detail}};
    events.push_back(std::move(j));
  }
  // Lane names: thread-name metadata, main first (sort index = lane).
  for (size_t l = 0; l < lanes_.size(); ++l) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", world.rank()}, {"tid", l},
                      {"args", {{"name", lanes_[l]}}}});
    events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", world.rank()}, {"tid", l},
                      {"args", {{"sort_index", l}}}});
  }
  lk.unlock();
  nlohmann::json mine = {{"start_us", origin_ + clock_.offset_us},
                         {"offset_us", clock_.offset_us},
                         {"error_us", clock_.error_us},
                         {"events", std::move(events)}};
  if (world.rank() != 0) {
    const std::string text = mine.dump();
    const uint64_t len = text.size();
    world.send(&len, sizeof len, 0, 7001);
    world.send(text.data(), len, 0, 7002);
    return;
  }
  std::vector<nlohmann::json> ranks{std::move(mine)};
  for (int q = 1; q < world.size(); ++q) {
    uint64_t len = 0;
    world.recv(&len, sizeof len, q, 7001);
    std::string buf(len, '\0');
    world.recv(buf.data(), len, q, 7002);
    ranks.push_back(nlohmann::json::parse(buf));
  }
  // Time zero is the earliest start over the ranks, on rank 0's clock.
  double base = ranks[0]["start_us"].get<double>();
  for (const auto& r : ranks) base = std::min(base, r["start_us"].get<double>());
  nlohmann::json all = nlohmann::json::array(), offsets = nlohmann::json::array(), errors = nlohmann::json::array();
  double max_error = 0;
  for (auto& r : ranks) {
    const double shift = r["start_us"].get<double>() - base;
    for (auto& e : r["events"]) {
      if (e.contains("ts")) e["ts"] = e["ts"].get<double>() + shift;  // metadata has no time
      all.push_back(std::move(e));
    }
    offsets.push_back(r["offset_us"]);
    errors.push_back(r["error_us"]);
    max_error = std::max(max_error, r["error_us"].get<double>());
  }
  for (int q = 0; q < world.size(); ++q) {
    all.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", q},
                   {"args", {{"name", span_name("rank ", q)}}}});
  }
  // otherData: the trace format's free-form metadata.
  const nlohmann::json meta = {{"clock", "steady clock of rank 0"},
                               {"clock_max_error_us", max_error},
                               {"clock_offset_us", offsets},
                               {"clock_error_us", errors}};
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream f(tmp);
    f << nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}, {"otherData", meta}}.dump();
    BRAID_CONFIG_CHECK(f.good(), "cannot write --trace-out ", path_);
  }
  std::filesystem::rename(tmp, path_);
}

}  // namespace braid::train
