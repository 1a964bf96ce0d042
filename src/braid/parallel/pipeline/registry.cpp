#include <algorithm>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

// The schedules, in the order they are listed: each is one file under
// schedules/ defining `ScheduleDef NAME_schedule()`. Adding one = its file and
// its NAME in this list. (An explicit list, not static registration objects:
// the linker keeps only the objects of the static library that are referenced.)
#define BRAID_PIPELINE_SCHEDULES(X) X(naive) X(gpipe) X(one_f_one_b) X(interleaved) X(zb_h1) X(zb_v)

#define BRAID_DECLARE_SCHEDULE(n) ScheduleDef n##_schedule();
BRAID_PIPELINE_SCHEDULES(BRAID_DECLARE_SCHEDULE)
#undef BRAID_DECLARE_SCHEDULE

const std::vector<ScheduleDef>& schedules() {
#define BRAID_SCHEDULE_ENTRY(n) n##_schedule(),
  static const std::vector<ScheduleDef> list = {BRAID_PIPELINE_SCHEDULES(BRAID_SCHEDULE_ENTRY)};
#undef BRAID_SCHEDULE_ENTRY
  return list;
}

std::string schedule_names() {
  std::string s;
  const auto& all = schedules();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i) s += i + 1 == all.size() ? " or " : ", ";
    s += all[i].name;
  }
  return s;
}

const ScheduleDef& find_schedule(const std::string& name) {
  for (const auto& d : schedules())
    if (name == d.name) return d;
  throw ConfigError("--schedule '" + name + "' is not available; use " + schedule_names());
}

int schedule_chunks(const ScheduleDef& def, int requested) {
  return def.chunks > 1 && requested == 1 ? def.chunks : requested;
}

std::string refuse_recompute_for_split_backward(const char* name, const ScheduleModes& modes) {
  if (modes.recompute == "none") return "";
  return std::string("--schedule ") + name +
         " keeps the matmul inputs for its deferred weight-gradient pass, so it runs with --recompute none (now " +
         modes.recompute + ")";
}

void require_one_chunk(const char* name, int v) {
  BRAID_CONFIG_CHECK(v == 1, "--schedule ", name, " runs one model chunk per stage; --virtual-stages ", v,
                     " needs --schedule interleaved (or use --virtual-stages 1)");
}

int push_warmup_forwards(StageProgram& p, int P, int s, int m) {
  const int warm = std::min(P - 1 - s, m);
  for (int j = 0; j < warm; ++j) p.push_back({PipeOp::forward, j});
  return warm;
}

StageMap::StageMap(int P, int v) : P_(P), v_(v) {
  const size_t n = static_cast<size_t>(P) * static_cast<size_t>(v);
  q_.resize(n), rank_.resize(n), chunk_.resize(n);
  for (int r = 0; r < P; ++r)
    for (int c = 0; c < v; ++c) {
      const int q = c * P + r;
      q_[static_cast<size_t>(r * v + c)] = q;
      rank_[static_cast<size_t>(q)] = r, chunk_[static_cast<size_t>(q)] = c;
    }
}

StageMap::StageMap(const ScheduleDef& def, int P, int v) : StageMap(P, v) {
  if (!def.placement) return;
  std::fill(rank_.begin(), rank_.end(), -1);
  for (int r = 0; r < P; ++r)
    for (int c = 0; c < v; ++c) {
      const int q = def.placement(r, c, P, v);
      BRAID_CHECK(q >= 0 && q < Q() && rank_[static_cast<size_t>(q)] < 0, "schedule ", def.name, ": rank ", r,
                  " chunk ", c, " placed on virtual stage ", q, ", outside [0, ", Q(), ") or taken");
      BRAID_CHECK(c == 0 || q > stage(r, c - 1), "schedule ", def.name, ": rank ", r,
                  "'s chunks must hold increasing virtual stages");
      q_[static_cast<size_t>(r * v + c)] = q;
      rank_[static_cast<size_t>(q)] = r, chunk_[static_cast<size_t>(q)] = c;
    }
}

std::vector<StageProgram> build_schedule(const ScheduleDef& def, int P, int m, int v) {
  BRAID_CONFIG_CHECK(P >= 1 && m >= 1, "pipeline: ", P, " stages and ", m,
                     " micro-batches; both must be >= 1");
  BRAID_CONFIG_CHECK(v >= 1, "--virtual-stages ", v, " must be >= 1");
  // The tables hold every action: keep them to a size a step can run.
  BRAID_CONFIG_CHECK(int64_t{P} * m * v <= 10'000'000, "pipeline: ", P, " stages x ", m, " micro-batches x ", v,
                     " chunks is more than 10^7 actions per step; use fewer");
  if (def.chunks == 1) require_one_chunk(def.name, v);
  BRAID_CONFIG_CHECK(def.chunks <= 1 || v == def.chunks, "--schedule ", def.name, " runs ", def.chunks,
                     " model chunks per stage; --virtual-stages ", v, " does not fit: use --virtual-stages ",
                     def.chunks, " (or leave it out)");
  if (def.validate) def.validate(P, m, v);
  return def.build(P, m, v);
}

std::vector<StageProgram> build_schedule(const std::string& name, int P, int m, int v) {
  return build_schedule(find_schedule(name), P, m, v);
}

double theoretical_bubble(const ScheduleDef& def, int P, int m, int v) { return def.bubble(P, m, v); }

std::string theory_assumption(const ScheduleDef& def, int P, int m, int v) {
  return def.assumption ? def.assumption(P, m, v) : "";
}

}  // namespace braid::parallel
