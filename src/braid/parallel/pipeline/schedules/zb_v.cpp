// zb-v (Qi, Wan, Huang, Lin 2024, "Pipeline Parallelism with Controllable
// Memory", the V-shape zero-bubble schedule; also in the ZB-V section of Qi et
// al., "Zero Bubble Pipeline Parallelism", ICLR 2024): two chunks per rank in
// a V, rank r holding virtual stages r and 2P-1-r, so the forward runs down
// the ranks on chunk 0 and back up on chunk 1, and rank 0 holds both the
// embedding and the head. The backward is split into B and W as in zb-h1.
//
// The table is built here by a deterministic greedy list schedule (our own
// construction, not the paper's hand-drawn one), in steps of one chunk pass
// (T_F = T_B = T_W): at each step every rank runs the first ready action of
// (1) a B, oldest micro-batch first, then the lower virtual stage; (2) a
// forward, chunk 1 first, while fewer than 2P chunk micro-batches are alive
// on the rank (1F1B's peak on its first stage: P micro-batches of a whole
// stage); (3) the oldest pending W. An action is ready when what it needs
// finished in an earlier step. check_schedule verifies the result (no
// deadlock with 2 gradient send buffers) in tests/unit/test_pipeline_schedule.cpp.
//
// Bubble with T_F = T_B = T_W (a stage's F = 1, chunk passes 1/2): each rank
// has 3m of work and the last rank cannot start before its P-1 predecessors'
// first chunk forwards, so the makespan is at least 3m + (P-1)/2 and the
// bubble at least (P-1)/(6m + P-1), half of ZB-H1's (P-1)/(3m + P-1); the
// paper counts the steady state, where it is 0. This table reaches the bound
// for P <= 4 and m >= P (tests/unit/test_schedule_zb_v.cpp); for larger P the
// greedy order leaves up to a few chunk passes more.
#include <algorithm>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/schedule.h"

namespace braid::parallel {

namespace {

// The greedy list schedule of the header; state per virtual stage q.
class Greedy {
 public:
  Greedy(int P, int m) : P_(P), m_(m), Q_(2 * P), prog_(static_cast<size_t>(P)) {
    for (auto* v : {&f_, &b_, &w_}) v->assign(static_cast<size_t>(Q_), std::vector<int64_t>(static_cast<size_t>(m), -1));
    for (auto* v : {&nf_, &nb_, &nw_}) v->assign(static_cast<size_t>(Q_), 0);
    alive_.assign(static_cast<size_t>(P), 0);
  }

  std::vector<StageProgram> run() {
    const int64_t total = int64_t{3} * Q_ * m_;
    int64_t placed = 0;
    for (int64_t t = 0; placed < total; ++t) {
      std::vector<std::pair<int, PipeAction>> step;  // (virtual stage, action) chosen at t
      for (int r = 0; r < P_; ++r) {
        PipeAction a{PipeOp::forward, -1, 0};
        int q = -1;
        if (pick(r, t, &a, &q)) step.push_back({q, a}), prog_[static_cast<size_t>(r)].push_back(a);
      }
      BRAID_CHECK(!step.empty(), "zb-v: the greedy construction stalled at step ", t);
      for (const auto& [q, a] : step) commit(q, a, t + 1), ++placed;
    }
    return std::move(prog_);
  }

 private:
  int q_of(int r, int c) const { return c == 0 ? r : Q_ - 1 - r; }
  int64_t& at(std::vector<std::vector<int64_t>>& v, int q, int j) {
    return v[static_cast<size_t>(q)][static_cast<size_t>(j)];
  }
  // Done by the start of step t (-1: not yet).
  bool done(std::vector<std::vector<int64_t>>& v, int q, int j, int64_t t) {
    const int64_t d = at(v, q, j);
    return d >= 0 && d <= t;
  }
  int& next(std::vector<int>& v, int q) { return v[static_cast<size_t>(q)]; }

  bool b_ready(int q, int64_t t) {
    const int j = next(nb_, q);
    if (j >= m_ || !done(f_, q, j, t)) return false;
    return q == Q_ - 1 || done(b_, q + 1, j, t);
  }
  bool f_ready(int q, int64_t t) {
    const int j = next(nf_, q);
    return j < m_ && (q == 0 || done(f_, q - 1, j, t));
  }
  bool w_ready(int q, int64_t t) {
    const int j = next(nw_, q);
    return j < m_ && done(b_, q, j, t);
  }

  // The action rank r runs at step t, by the priorities of the header.
  bool pick(int r, int64_t t, PipeAction* a, int* q) {
    const int q0 = q_of(r, 0), q1 = q_of(r, 1);
    auto older = [&](std::vector<int>& n, bool r0, bool r1) {  // chunk with the older micro-batch (ties: chunk 0)
      if (r0 && r1) return next(n, q0) <= next(n, q1) ? 0 : 1;
      return r0 ? 0 : r1 ? 1 : -1;
    };
    int c = older(nb_, b_ready(q0, t), b_ready(q1, t));
    if (c >= 0) return *q = q_of(r, c), *a = {PipeOp::backward_input, next(nb_, *q), c}, true;
    if (alive_[static_cast<size_t>(r)] < 2 * P_) {
      c = f_ready(q1, t) ? 1 : f_ready(q0, t) ? 0 : -1;
      if (c >= 0) return *q = q_of(r, c), *a = {PipeOp::forward, next(nf_, *q), c}, true;
    }
    c = older(nw_, w_ready(q0, t), w_ready(q1, t));
    if (c >= 0) return *q = q_of(r, c), *a = {PipeOp::backward_weight, next(nw_, *q), c}, true;
    return false;
  }

  void commit(int q, const PipeAction& a, int64_t end) {
    const int r = q < P_ ? q : Q_ - 1 - q;
    switch (a.op) {
      case PipeOp::forward: at(f_, q, a.micro) = end, ++next(nf_, q), ++alive_[static_cast<size_t>(r)]; break;
      case PipeOp::backward_input: at(b_, q, a.micro) = end, ++next(nb_, q); break;
      default: at(w_, q, a.micro) = end, ++next(nw_, q), --alive_[static_cast<size_t>(r)]; break;
    }
  }

  const int P_, m_, Q_;
  std::vector<std::vector<int64_t>> f_, b_, w_;  // [q][micro]: step at whose start the pass is done
  std::vector<int> nf_, nb_, nw_;                // [q]: next micro-batch of each pass (passes in micro order)
  std::vector<int> alive_;                       // [rank]: chunk micro-batches between F and W
  std::vector<StageProgram> prog_;
};

void validate(int P, int, int) {
  BRAID_CONFIG_CHECK(P >= 2, "--schedule zb-v folds the layers over the ranks and needs --pp >= 2 (got --pp ", P,
                     "); with one stage use --schedule 1f1b");
}

std::vector<StageProgram> build(int P, int m, int) { return Greedy(P, m).run(); }

int placement(int rank, int chunk, int P, int) { return chunk == 0 ? rank : 2 * P - 1 - rank; }

double bubble(int P, int m, int) { return (P - 1.0) / (6.0 * m + P - 1.0); }

std::string assumption(int P, int m, int) {
  return P <= 4 && m >= P ? "" : "the formula is the ideal; the greedy table reaches it for P <= 4 and m >= P";
}

std::string refuse(const ScheduleModes& modes) { return refuse_recompute_for_split_backward("zb-v", modes); }

// Two chunks per rank: where the layers split evenly over 2P virtual stages.
std::vector<int> planner_chunks(int P, int64_t, int64_t L) {
  return P > 1 && L % (2 * int64_t{P}) == 0 ? std::vector<int>{2} : std::vector<int>{};
}

}  // namespace

ScheduleDef zb_v_schedule() {
  return {.name = "zb-v",
          .description = "two chunks per rank in a V, B/W split, 1F1B's memory (ZB-V, Qi et al. 2024)",
          .chunks = 2, .validate = validate, .refuse = refuse, .build = build, .bubble = bubble,
          .bubble_text = "(P-1)/(6m+P-1)", .assumption = assumption, .placement = placement,
          .planner_chunks = planner_chunks};
}

}  // namespace braid::parallel
