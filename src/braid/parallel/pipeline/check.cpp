#include "braid/parallel/pipeline/check.h"

#include <algorithm>
#include <sstream>

namespace braid::parallel {

namespace {

const char* op_name(PipeOp op) {
  switch (op) {
    case PipeOp::forward: return "forward";
    case PipeOp::backward: return "backward";
    case PipeOp::backward_input: return "backward_input";
    case PipeOp::backward_weight: return "backward_weight";
  }
  return "?";
}

// What a rank blocked in the simulation waits for.
struct Wait {
  enum Kind { none, recv_activation, recv_gradient, send_buffer, activation_send } kind = none;
  int peer = -1, chunk = 0, micro = 0, buffer = 0;  // for send_buffer: the (chunk, micro) sent earlier
};

// Table checks: every (chunk, micro) of every rank runs forward once and either
// backward once or backward_input then backward_weight once each.
void check_tables(const std::vector<StageProgram>& programs, int P, int m, int v) {
  const auto at = [m](int c, int j) { return static_cast<size_t>(c) * static_cast<size_t>(m) + static_cast<size_t>(j); };
  const size_t n = static_cast<size_t>(v) * static_cast<size_t>(m);
  for (int s = 0; s < P; ++s) {
    std::vector<int> cnt[4];
    for (auto& c : cnt) c.assign(n, 0);
    auto& f = cnt[0];
    auto& b = cnt[1];
    auto& bi = cnt[2];
    auto& w = cnt[3];
    for (const auto& a : programs[static_cast<size_t>(s)]) {
      BRAID_CHECK(a.micro >= 0 && a.micro < m, "rank ", s, ": ", op_name(a.op), " of micro-batch ", a.micro,
                  " outside [0, ", m, ")");
      BRAID_CHECK(a.chunk >= 0 && a.chunk < v, "rank ", s, ": ", op_name(a.op), " of micro-batch ", a.micro,
                  " on chunk ", a.chunk, " outside [0, ", v, ")");
      const size_t i = at(a.chunk, a.micro);
      BRAID_CHECK(++cnt[static_cast<int>(a.op)][i] == 1, "rank ", s, " runs ", op_name(a.op), " of chunk ", a.chunk,
                  " micro-batch ", a.micro, " twice");
      BRAID_CHECK(a.op == PipeOp::forward || f[i] == 1, "rank ", s, ": ", op_name(a.op), " of chunk ", a.chunk,
                  " micro-batch ", a.micro, " before its forward");
      BRAID_CHECK(a.op != PipeOp::backward_weight || bi[i] == 1, "rank ", s, ": backward_weight of chunk ", a.chunk,
                  " micro-batch ", a.micro, " before its backward_input");
      BRAID_CHECK(b[i] + bi[i] <= 1, "rank ", s, " runs both the full backward and backward_input of chunk ", a.chunk,
                  " micro-batch ", a.micro);
    }
    for (int c = 0; c < v; ++c) {
      for (int j = 0; j < m; ++j) {
        const size_t i = at(c, j);
        // (backward and backward_weight together cannot reach here: W needs a
        // backward_input, which excludes the full backward.)
        const char* missing = !f[i] ? "forward" : !b[i] && !bi[i] ? "backward" : bi[i] && !w[i] ? "backward_weight" : "";
        BRAID_CHECK(!*missing, "rank ", s, " never runs ", missing, " of chunk ", c, " micro-batch ", j);
      }
    }
  }
}

// The executor of check_schedule's docstring, event by event. Every time is a
// max over known times, so the result does not depend on the order in which
// ranks are advanced; a rank that needs a time not known yet is blocked.
class Simulation {
 public:
  Simulation(const std::vector<StageProgram>& programs, const StageMap& map, int m, double f_cost, double b_cost,
             int K)
      : programs_(programs), map_(map), P_(map.P()), m_(m), v_(map.v()), Q_(map.Q()), K_(K), f_cost_(f_cost),
        b_cost_(b_cost) {
    const size_t n = static_cast<size_t>(Q_) * static_cast<size_t>(m);
    for (auto* t : {&f_end_, &act_post_, &grad_issue_, &grad_post_}) t->assign(n, -1);
    R_.resize(static_cast<size_t>(P_));
    for (auto& r : R_) r.ring.assign(static_cast<size_t>(K), {-1, 0});
    st_.virtual_stages = v_;
    st_.spans.resize(static_cast<size_t>(P_));
  }

  // Advances every rank as far as it goes until all are done; throws ScheduleDeadlock
  // when none can move.
  ScheduleStats run() {
    for (;;) {
      bool progressed = false, all_done = true;
      for (int s = 0; s < P_; ++s) {
        while (advance(s)) progressed = true;
        all_done = all_done && R_[static_cast<size_t>(s)].done;
      }
      if (all_done) break;
      if (!progressed) throw deadlock();
    }
    finish_stats();
    return st_;
  }

 private:
  struct Rank {
    size_t pc = 0;
    int phase = 0;  // within a backward: 0 receive + compute, 1 gradient send, 2 activation-send wait
    double t = 0;
    int64_t sends = 0;
    std::vector<std::pair<int, int>> ring;  // (q, micro) last sent out of each gradient buffer; q < 0: free
    bool done = false;
    Wait wait;
  };

  size_t at(int q, int j) const { return static_cast<size_t>(q) * static_cast<size_t>(m_) + static_cast<size_t>(j); }
  double cost(PipeOp op) const {
    switch (op) {
      case PipeOp::forward: return f_cost_ / v_;
      case PipeOp::backward: return b_cost_ / v_;
      default: return b_cost_ / (2.0 * v_);
    }
  }
  void wait_until(Rank& r, double t) {
    if (t > r.t) st_.send_wait += t - r.t, r.t = t;
  }
  void compute(Rank& r, int s, const PipeAction& a) {
    const double end = r.t + cost(a.op);
    st_.spans[static_cast<size_t>(s)].push_back({a, r.t, end});
    r.t = end;
  }
  // Gradient buffer e is free once the receive of what it last sent is posted;
  // false (with the wait recorded) when it is not yet.
  bool buffer_free(Rank& r, std::pair<int, int>& e, int k) {
    if (e.first < 0) return true;
    const double post = grad_post_[at(e.first - 1, e.second)];
    if (post < 0) {
      r.wait = {Wait::send_buffer, map_.rank_of(e.first - 1), map_.chunk_of(e.first), e.second, k};
      return false;
    }
    wait_until(r, post);
    return true;
  }

  // Advances rank s by one step; false (with r.wait set) when it is blocked.
  bool advance(int s) {
    Rank& r = R_[static_cast<size_t>(s)];
    const auto& prog = programs_[static_cast<size_t>(s)];
    if (r.done) return false;
    r.wait = {};
    if (r.pc == prog.size()) return end_of_step(r);
    const PipeAction a = prog[r.pc];
    if (r.phase == 0) return a.op == PipeOp::forward ? forward(r, s, a) : backward_compute(r, s, a);
    if (r.phase == 1) return gradient_send(r, map_.stage(s, a.chunk), a.micro);
    return release_activation(r, map_.stage(s, a.chunk), a.micro);
  }
  // End of step: wait for the gradient sends still open.
  bool end_of_step(Rank& r) {
    for (int k = 0; k < K_; ++k) {
      auto& e = r.ring[static_cast<size_t>(k)];
      if (!buffer_free(r, e, k)) return false;
      e.first = -1;
    }
    r.done = true;
    return true;
  }
  bool forward(Rank& r, int s, const PipeAction& a) {
    const int q = map_.stage(s, a.chunk), j = a.micro;
    if (q > 0) {
      if (act_post_[at(q, j)] < 0) act_post_[at(q, j)] = r.t;
      const double sent = f_end_[at(q - 1, j)];
      if (sent < 0) {
        r.wait = {Wait::recv_activation, map_.rank_of(q - 1), a.chunk, j, 0};
        return false;
      }
      r.t = std::max(r.t, sent);
    }
    compute(r, s, a);
    f_end_[at(q, j)] = r.t;
    ++r.pc;
    return true;
  }
  // A backward (or backward_input) receives its gradient and computes; W only computes.
  bool backward_compute(Rank& r, int s, const PipeAction& a) {
    if (a.op == PipeOp::backward_weight) {
      compute(r, s, a);
      ++r.pc;
      return true;
    }
    const int q = map_.stage(s, a.chunk), j = a.micro;
    if (q < Q_ - 1) {
      if (grad_post_[at(q, j)] < 0) grad_post_[at(q, j)] = r.t;
      const double sent = grad_issue_[at(q + 1, j)];
      if (sent < 0) {
        r.wait = {Wait::recv_gradient, map_.rank_of(q + 1), a.chunk, j, 0};
        return false;
      }
      r.t = std::max(r.t, sent);
    }
    compute(r, s, a);
    r.phase = 1;
    return true;
  }
  // The gradient goes out of buffer k once its previous send completed.
  bool gradient_send(Rank& r, int q, int j) {
    if (q > 0) {
      const int k = static_cast<int>(r.sends % K_);
      auto& e = r.ring[static_cast<size_t>(k)];
      if (!buffer_free(r, e, k)) return false;
      e = {q, j};
      grad_issue_[at(q, j)] = r.t;
      ++r.sends;
    }
    r.phase = 2;
    return true;
  }
  // The activations are free once their send to q+1 completed.
  bool release_activation(Rank& r, int q, int j) {
    if (q < Q_ - 1) {
      const double post = act_post_[at(q + 1, j)];
      if (post < 0) {
        r.wait = {Wait::activation_send, map_.rank_of(q + 1), map_.chunk_of(q), j, 0};
        return false;
      }
      wait_until(r, std::max(f_end_[at(q, j)], post));
    }
    r.phase = 0;
    ++r.pc;
    return true;
  }

  ScheduleDeadlock deadlock() const {
    std::vector<int> blocked;
    std::ostringstream os;
    os << "schedule deadlocks:";
    for (int s = 0; s < P_; ++s) {
      const Rank& r = R_[static_cast<size_t>(s)];
      if (r.done) continue;
      const auto& prog = programs_[static_cast<size_t>(s)];
      os << " rank " << s << " waits";
      if (r.pc < prog.size()) {
        const auto a = prog[r.pc];
        if (a.op != PipeOp::forward) blocked.push_back(s);
        os << " in " << op_name(a.op) << " (chunk " << a.chunk << ", micro " << a.micro << ")";
      } else {
        os << " at the end of the step";
      }
      describe(os, r.wait);
      os << ";";
    }
    return ScheduleDeadlock(os.str(), std::move(blocked));
  }
  static void describe(std::ostringstream& os, const Wait& w) {
    switch (w.kind) {
      case Wait::recv_activation: os << " to receive the activation from rank " << w.peer; break;
      case Wait::recv_gradient: os << " to receive the gradient from rank " << w.peer; break;
      case Wait::send_buffer:
        os << " for gradient send buffer " << w.buffer << " (its gradient of chunk " << w.chunk << ", micro "
           << w.micro << " to rank " << w.peer << " has no receive posted)";
        break;
      case Wait::activation_send: os << " for its activation send to rank " << w.peer << " to be received"; break;
      case Wait::none: break;
    }
  }

  // Makespan, bubble and the peak number of micro-batches alive per rank and chunk.
  void finish_stats() {
    double busy = 0;
    for (int s = 0; s < P_; ++s) {
      st_.makespan = std::max(st_.makespan, R_[static_cast<size_t>(s)].t);
      for (const auto& sp : st_.spans[static_cast<size_t>(s)]) busy += sp.end - sp.start;
    }
    st_.bubble = st_.makespan > 0 ? 1.0 - busy / (static_cast<double>(P_) * st_.makespan) : 0.0;
    // Alive micro-batches follow program order alone: from the forward to the
    // backward that frees the activations (backward, or backward_weight if split).
    st_.peak_in_flight.assign(static_cast<size_t>(P_), 0);
    st_.peak_in_flight_chunk.assign(static_cast<size_t>(P_), std::vector<int>(static_cast<size_t>(v_), 0));
    for (int s = 0; s < P_; ++s) {
      std::vector<int> alive(static_cast<size_t>(v_), 0);
      int total = 0;
      for (const auto& a : programs_[static_cast<size_t>(s)]) {
        const int d = a.op == PipeOp::forward ? 1 : a.op == PipeOp::backward || a.op == PipeOp::backward_weight ? -1 : 0;
        int& c = alive[static_cast<size_t>(a.chunk)];
        c += d;
        total += d;
        auto& pc = st_.peak_in_flight_chunk[static_cast<size_t>(s)][static_cast<size_t>(a.chunk)];
        pc = std::max(pc, c);
        st_.peak_in_flight[static_cast<size_t>(s)] = std::max(st_.peak_in_flight[static_cast<size_t>(s)], total);
      }
    }
  }

  const std::vector<StageProgram>& programs_;
  const StageMap& map_;
  const int P_, m_, v_, Q_, K_;
  const double f_cost_, b_cost_;
  // Per (stage q, micro), -1 until it happens. f_end: forward done (= activation
  // send posted); act_post / grad_post: receive posted; grad_issue: gradient send posted.
  std::vector<double> f_end_, act_post_, grad_issue_, grad_post_;
  std::vector<Rank> R_;
  ScheduleStats st_;
};

}  // namespace

ScheduleStats check_schedule(const std::vector<StageProgram>& programs, const StageMap& map, int m, double f_cost,
                             double b_cost, int grad_send_buffers) {
  const int P = map.P(), v = map.v();
  BRAID_CHECK(static_cast<int>(programs.size()) == P, "schedule has ", programs.size(),
              " stage programs for ", P, " stages");
  BRAID_CHECK(v >= 1 && m >= 1 && grad_send_buffers >= 1, "check_schedule: v=", v, " m=", m,
              " grad_send_buffers=", grad_send_buffers, " must be >= 1");
  check_tables(programs, P, m, v);
  return Simulation(programs, map, m, f_cost, b_cost, grad_send_buffers).run();
}

ScheduleStats check_schedule(const std::vector<StageProgram>& programs, int P, int m, int v, double f_cost,
                             double b_cost, int grad_send_buffers) {
  BRAID_CHECK(P >= 1 && v >= 1, "check_schedule: P=", P, " v=", v, " must be >= 1");
  return check_schedule(programs, StageMap(P, v), m, f_cost, b_cost, grad_send_buffers);
}

}  // namespace braid::parallel
