#include "braid/parallel/pipeline/schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "braid/core/error.h"

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

// Megatron-LM's interleaved order (get_schedule_table): micro-batches in
// groups of P, each group through chunk 0, then 1, ..., v-1; backwards visit
// the chunks from v-1 down. Returns the k-th forward (or backward) as (micro, chunk).
std::vector<std::pair<int, int>> interleaved_order(int P, int m, int v, bool forward) {
  std::vector<std::pair<int, int>> order;
  order.reserve(static_cast<size_t>(m) * static_cast<size_t>(v));
  for (int g0 = 0; g0 < m; g0 += P) {
    const int g1 = std::min(g0 + P, m);
    for (int k = 0; k < v; ++k)
      for (int j = g0; j < g1; ++j) order.emplace_back(j, forward ? k : v - 1 - k);
  }
  return order;
}

// Rank s: warm[s] forwards, then one forward one backward, then the rest.
std::vector<StageProgram> interleaved_programs(int P, int m, int v, const std::vector<int>& warm) {
  const auto fwd = interleaved_order(P, m, v, true), bwd = interleaved_order(P, m, v, false);
  const int total = m * v;
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    auto& p = prog[static_cast<size_t>(s)];
    const int w = warm[static_cast<size_t>(s)];
    for (int k = 0; k < w; ++k) p.push_back({PipeOp::forward, fwd[static_cast<size_t>(k)].first, fwd[static_cast<size_t>(k)].second});
    for (int k = 0; k < total - w; ++k) {
      const auto f = fwd[static_cast<size_t>(w + k)], b = bwd[static_cast<size_t>(k)];
      p.push_back({PipeOp::forward, f.first, f.second});
      p.push_back({PipeOp::backward, b.first, b.second});
    }
    for (int k = total - w; k < total; ++k) p.push_back({PipeOp::backward, bwd[static_cast<size_t>(k)].first, bwd[static_cast<size_t>(k)].second});
  }
  return prog;
}

// What a rank blocked in the simulation waits for.
struct Wait {
  enum Kind { none, recv_activation, recv_gradient, send_buffer, activation_send } kind = none;
  int peer = -1, chunk = 0, micro = 0, buffer = 0;  // for send_buffer: the (chunk, micro) sent earlier
};

// Thrown (internally) by the simulation on deadlock so the interleaved builder
// can see which ranks starved; check_schedule turns it into braid::Error.
struct Deadlock {
  std::string message;
  std::vector<int> blocked_in_backward;  // ranks blocked in a backward (receive or send buffer)
};

}  // namespace

ScheduleKind parse_schedule(const std::string& s) {
  if (s == "naive") return ScheduleKind::naive;
  if (s == "gpipe") return ScheduleKind::gpipe;
  if (s == "1f1b") return ScheduleKind::one_f_one_b;
  if (s == "interleaved") return ScheduleKind::interleaved;
  if (s == "zb-h1") return ScheduleKind::zb_h1;
  throw ConfigError("--schedule '" + s + "' is not available; use naive, gpipe, 1f1b, interleaved or zb-h1");
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::naive: return "naive";
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb_h1: return "zb-h1";
  }
  return "?";
}

namespace {

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
  Simulation(const std::vector<StageProgram>& programs, int P, int m, int v, double f_cost, double b_cost, int K)
      : programs_(programs), P_(P), m_(m), v_(v), Q_(P * v), K_(K), f_cost_(f_cost), b_cost_(b_cost) {
    const size_t n = static_cast<size_t>(Q_) * static_cast<size_t>(m);
    for (auto* t : {&f_end_, &act_post_, &grad_issue_, &grad_post_}) t->assign(n, -1);
    R_.resize(static_cast<size_t>(P));
    for (auto& r : R_) r.ring.assign(static_cast<size_t>(K), {-1, 0});
    st_.virtual_stages = v;
    st_.spans.resize(static_cast<size_t>(P));
  }

  // Advances every rank as far as it goes until all are done; throws Deadlock
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
      r.wait = {Wait::send_buffer, (e.first - 1) % P_, e.first / P_, e.second, k};
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
    if (r.phase == 1) return gradient_send(r, a.chunk * P_ + s, a.micro);
    return release_activation(r, a.chunk * P_ + s, a.micro);
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
    const int q = a.chunk * P_ + s, j = a.micro;
    if (q > 0) {
      if (act_post_[at(q, j)] < 0) act_post_[at(q, j)] = r.t;
      const double sent = f_end_[at(q - 1, j)];
      if (sent < 0) {
        r.wait = {Wait::recv_activation, (q - 1) % P_, a.chunk, j, 0};
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
    const int q = a.chunk * P_ + s, j = a.micro;
    if (q < Q_ - 1) {
      if (grad_post_[at(q, j)] < 0) grad_post_[at(q, j)] = r.t;
      const double sent = grad_issue_[at(q + 1, j)];
      if (sent < 0) {
        r.wait = {Wait::recv_gradient, (q + 1) % P_, a.chunk, j, 0};
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
        r.wait = {Wait::activation_send, (q + 1) % P_, q / P_, j, 0};
        return false;
      }
      wait_until(r, std::max(f_end_[at(q, j)], post));
    }
    r.phase = 0;
    ++r.pc;
    return true;
  }

  Deadlock deadlock() const {
    Deadlock d;
    std::ostringstream os;
    os << "schedule deadlocks:";
    for (int s = 0; s < P_; ++s) {
      const Rank& r = R_[static_cast<size_t>(s)];
      if (r.done) continue;
      const auto& prog = programs_[static_cast<size_t>(s)];
      os << " rank " << s << " waits";
      if (r.pc < prog.size()) {
        const auto a = prog[r.pc];
        if (a.op != PipeOp::forward) d.blocked_in_backward.push_back(s);
        os << " in " << op_name(a.op) << " (chunk " << a.chunk << ", micro " << a.micro << ")";
      } else {
        os << " at the end of the step";
      }
      describe(os, r.wait);
      os << ";";
    }
    d.message = os.str();
    return d;
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
  const int P_, m_, v_, Q_, K_;
  const double f_cost_, b_cost_;
  // Per (stage q, micro), -1 until it happens. f_end: forward done (= activation
  // send posted); act_post / grad_post: receive posted; grad_issue: gradient send posted.
  std::vector<double> f_end_, act_post_, grad_issue_, grad_post_;
  std::vector<Rank> R_;
  ScheduleStats st_;
};

ScheduleStats simulate(const std::vector<StageProgram>& programs, int P, int m, int v, double f_cost,
                       double b_cost, int K) {
  return Simulation(programs, P, m, v, f_cost, b_cost, K).run();
}

}  // namespace

std::vector<StageProgram> build_schedule(ScheduleKind kind, int P, int m, int v) {
  BRAID_CONFIG_CHECK(P >= 1 && m >= 1, "pipeline: ", P, " stages and ", m,
                     " micro-batches; both must be >= 1");
  BRAID_CONFIG_CHECK(v >= 1, "--virtual-stages ", v, " must be >= 1");
  // The tables hold every action: keep them to a size a step can run.
  BRAID_CONFIG_CHECK(int64_t{P} * m * v <= 10'000'000, "pipeline: ", P, " stages x ", m, " micro-batches x ", v,
                     " chunks is more than 10^7 actions per step; use fewer");
  if (kind == ScheduleKind::interleaved) {
    BRAID_CONFIG_CHECK(P >= 2, "--schedule interleaved needs --pp >= 2 (got --pp ", P,
                       "); with one stage use --schedule 1f1b");
    BRAID_CONFIG_CHECK(v >= 2, "--schedule interleaved needs --virtual-stages >= 2 (got ", v,
                       "); use --virtual-stages 2 or --schedule 1f1b");
    const int total = m * v;
    std::vector<int> warm(static_cast<size_t>(P));
    for (int s = 0; s < P; ++s) warm[static_cast<size_t>(s)] = std::min((P - s - 1) * 2 + (v - 1) * P, total);
    // Megatron's warm-up assumes P | m. With a smaller last group a rank can
    // block in a backward (on a gradient, or on a gradient send buffer whose
    // receiver is itself waiting) that needs a forward it has not run yet:
    // give each rank blocked in a backward one more warm-up forward and retry.
    // Deterministic, and it terminates: warm-up = m*v is all forwards first.
    // The check uses 2 gradient send buffers, as check_schedule's default.
    for (;;) {
      auto prog = interleaved_programs(P, m, v, warm);
      try {
        simulate(prog, P, m, v, 1.0, 2.0, kGradSendBuffers);
        return prog;
      } catch (const Deadlock& d) {
        bool raised = false;
        for (int s : d.blocked_in_backward)
          if (warm[static_cast<size_t>(s)] < total) ++warm[static_cast<size_t>(s)], raised = true;
        BRAID_CONFIG_CHECK(raised, "--schedule interleaved: no deadlock-free order for --pp ", P,
                           " --micro-batches ", m, " --virtual-stages ", v, " (", d.message,
                           "); use a multiple of ", P, " micro-batches");
      }
    }
  }
  BRAID_CONFIG_CHECK(v == 1, "--schedule ", schedule_name(kind), " runs one model chunk per stage; --virtual-stages ",
                     v, " needs --schedule interleaved (or use --virtual-stages 1)");
  std::vector<StageProgram> prog(static_cast<size_t>(P));
  for (int s = 0; s < P; ++s) {
    auto& p = prog[static_cast<size_t>(s)];
    switch (kind) {
      case ScheduleKind::naive:
        for (int j = 0; j < m; ++j) {
          p.push_back({PipeOp::forward, j});
          p.push_back({PipeOp::backward, j});
        }
        break;
      case ScheduleKind::gpipe:
        for (int j = 0; j < m; ++j) p.push_back({PipeOp::forward, j});
        for (int j = 0; j < m; ++j) p.push_back({PipeOp::backward, j});
        break;
      case ScheduleKind::one_f_one_b: {
        const int warm = std::min(P - 1 - s, m);
        for (int j = 0; j < warm; ++j) p.push_back({PipeOp::forward, j});
        for (int i = 0; i < m - warm; ++i) {
          p.push_back({PipeOp::forward, warm + i});
          p.push_back({PipeOp::backward, i});
        }
        for (int j = m - warm; j < m; ++j) p.push_back({PipeOp::backward, j});
        break;
      }
      case ScheduleKind::zb_h1: {
        const int warm = std::min(P - 1 - s, m);
        for (int j = 0; j < warm; ++j) p.push_back({PipeOp::forward, j});
        for (int i = 0; i < m; ++i) {
          if (warm + i < m) p.push_back({PipeOp::forward, warm + i});
          p.push_back({PipeOp::backward_input, i});
          // Stage s defers W by s micro-batches: stage s's cool-down bubble is
          // filled with the weight gradients it put off.
          if (i - s >= 0) p.push_back({PipeOp::backward_weight, i - s});
        }
        for (int j = std::max(0, m - s); j < m; ++j) p.push_back({PipeOp::backward_weight, j});
        break;
      }
      case ScheduleKind::interleaved: break;  // handled above
    }
  }
  return prog;
}

ScheduleStats check_schedule(const std::vector<StageProgram>& programs, int P, int m, int v, double f_cost,
                             double b_cost, int grad_send_buffers) {
  BRAID_CHECK(static_cast<int>(programs.size()) == P, "schedule has ", programs.size(),
              " stage programs for ", P, " stages");
  BRAID_CHECK(v >= 1 && m >= 1 && grad_send_buffers >= 1, "check_schedule: v=", v, " m=", m,
              " grad_send_buffers=", grad_send_buffers, " must be >= 1");
  check_tables(programs, P, m, v);
  try {
    return simulate(programs, P, m, v, f_cost, b_cost, grad_send_buffers);
  } catch (const Deadlock& d) {
    throw Error(d.message);
  }
}

double theoretical_bubble(ScheduleKind kind, int P, int m, int v) {
  const double p1 = P - 1;
  switch (kind) {
    case ScheduleKind::naive: return p1 / P;
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b: return p1 / (m + p1);
    case ScheduleKind::interleaved: return p1 / (static_cast<double>(v) * m + p1);
    case ScheduleKind::zb_h1: return p1 / (3.0 * m + p1);
  }
  return 0;
}

namespace {

std::string cell_tag(const PipeAction& a, int v) {
  const char op = a.op == PipeOp::forward ? 'F' : a.op == PipeOp::backward ? 'B' : a.op == PipeOp::backward_input ? 'b' : 'W';
  std::string tag(1, op);
  tag += std::to_string(a.micro);
  if (v > 1) {
    tag += '.';
    tag += std::to_string(a.chunk);
  }
  return tag;
}

// Column width: the cheapest action, so every action covers whole columns.
double time_unit(const ScheduleStats& st) {
  double unit = 0;
  for (const auto& row : st.spans)
    for (const auto& sp : row)
      if (sp.end > sp.start && (unit == 0 || sp.end - sp.start < unit)) unit = sp.end - sp.start;
  return unit > 0 ? unit : 1.0;
}

}  // namespace

std::string theory_assumption(ScheduleKind kind, int P, int m) {
  if (kind == ScheduleKind::interleaved && m % P != 0) return "the formula assumes P divides m";
  if (kind == ScheduleKind::zb_h1 && m < P) return "the formula assumes m >= P";
  return "";
}

std::string draw_schedule(const ScheduleStats& st, int P) {
  const double unit = time_unit(st);
  const int width = static_cast<int>(std::llround(std::ceil(st.makespan / unit - 1e-9)));
  size_t cw = 3;
  for (const auto& row : st.spans)
    for (const auto& sp : row) cw = std::max(cw, cell_tag(sp.action, st.virtual_stages).size());
  std::ostringstream os;
  for (int s = 0; s < P; ++s) {
    std::vector<std::string> cells(static_cast<size_t>(width), ".");
    for (const auto& sp : st.spans[static_cast<size_t>(s)]) {
      const std::string tag = cell_tag(sp.action, st.virtual_stages);
      const long t0 = std::lround(sp.start / unit), t1 = std::lround(sp.end / unit);
      for (long t = t0; t < t1 && t < width; ++t) cells[static_cast<size_t>(t)] = tag;
    }
    char head[32];
    std::snprintf(head, sizeof head, "stage %d |", s);
    os << head;
    for (const auto& c : cells) os << std::string(cw + 1 - c.size(), ' ') << c;
    os << "\n";
  }
  return os.str();
}

std::string schedule_svg(const ScheduleStats& st, int P, const std::string& title) {
  const double unit = time_unit(st);
  const double px = 24 / unit, row = 28, left = 70, top = 30;
  const double w = left + st.makespan * px + 10, h = top + P * row + 10;
  // Shades from light (chunk 0) to dark (last chunk).
  static const char* blue[] = {"#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5"};
  static const char* green[] = {"#a1d99b", "#74c476", "#41ab5d", "#238b45", "#006d2c"};
  static const char* orange[] = {"#fdd0a2", "#fdae6b", "#fd8d3c", "#f16913", "#d94801"};
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
     << "\" font-family=\"monospace\" font-size=\"11\">\n";
  os << "<text x=\"4\" y=\"16\">" << title << "</text>\n";
  for (int s = 0; s < P; ++s) {
    const double y = top + s * row;
    os << "<text x=\"4\" y=\"" << y + 17 << "\">stage " << s << "</text>\n";
    for (const auto& sp : st.spans[static_cast<size_t>(s)]) {
      const auto& a = sp.action;
      const size_t shade = static_cast<size_t>(std::min(a.chunk, 4));
      // backward_input one shade lighter than the full backward: it is half of it.
      const char* fill = a.op == PipeOp::forward           ? blue[shade]
                         : a.op == PipeOp::backward         ? green[std::min<size_t>(shade + 1, 4)]
                         : a.op == PipeOp::backward_input   ? green[shade]
                                                            : orange[shade];
      const double x = left + sp.start * px, ww = (sp.end - sp.start) * px;
      os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << ww << "\" height=\"" << row - 4
         << "\" fill=\"" << fill << "\" stroke=\"#333\"/>\n";
      os << "<text x=\"" << x + 2 << "\" y=\"" << y + 16 << "\">" << cell_tag(a, st.virtual_stages) << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace braid::parallel
