#include "braid/parallel/pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "braid/core/error.h"

namespace braid::parallel {

ScheduleKind parse_schedule(const std::string& s) {
  if (s == "naive") return ScheduleKind::naive;
  if (s == "gpipe") return ScheduleKind::gpipe;
  if (s == "1f1b") return ScheduleKind::one_f_one_b;
  throw ConfigError("--schedule '" + s + "' is not available; use naive, gpipe or 1f1b" +
                    (s == "interleaved" || s == "zb-h1" ? " (interleaved and zb-h1 are not implemented yet)" : ""));
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::naive: return "naive";
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
  }
  return "?";
}

std::vector<StageProgram> build_schedule(ScheduleKind kind, int P, int m) {
  BRAID_CONFIG_CHECK(P >= 1 && m >= 1, "pipeline: ", P, " stages and ", m,
                     " micro-batches; both must be >= 1");
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
    }
  }
  return prog;
}

ScheduleStats check_schedule(const std::vector<StageProgram>& programs, int P, int m, double f_cost,
                             double b_cost) {
  BRAID_CHECK(static_cast<int>(programs.size()) == P, "schedule has ", programs.size(),
              " stage programs for ", P, " stages");
  const auto idx = [m](int s, int j) { return static_cast<size_t>(s) * static_cast<size_t>(m) + static_cast<size_t>(j); };
  const size_t n = static_cast<size_t>(P) * static_cast<size_t>(m);
  // Table checks: each stage runs F and B of every micro-batch once, F first.
  for (int s = 0; s < P; ++s) {
    std::vector<int> f(static_cast<size_t>(m), 0), b(static_cast<size_t>(m), 0);
    for (const auto& a : programs[static_cast<size_t>(s)]) {
      BRAID_CHECK(a.micro >= 0 && a.micro < m, "stage ", s, ": micro-batch ", a.micro, " outside [0, ", m, ")");
      auto& cnt = a.op == PipeOp::forward ? f : b;
      BRAID_CHECK(++cnt[static_cast<size_t>(a.micro)] == 1, "stage ", s, " runs ",
                  a.op == PipeOp::forward ? "forward" : "backward", " of micro-batch ", a.micro, " twice");
      BRAID_CHECK(a.op == PipeOp::forward || f[static_cast<size_t>(a.micro)] == 1, "stage ", s,
                  ": backward of micro-batch ", a.micro, " before its forward");
    }
    for (int j = 0; j < m; ++j) {
      BRAID_CHECK(f[static_cast<size_t>(j)] == 1 && b[static_cast<size_t>(j)] == 1, "stage ", s,
                  " never runs ", f[static_cast<size_t>(j)] ? "backward" : "forward", " of micro-batch ", j);
    }
  }
  // Simulation: repeatedly run any stage whose next action's inputs are ready.
  std::vector<double> f_done(n, -1), b_done(n, -1), free_at(static_cast<size_t>(P), 0);
  std::vector<size_t> pc(static_cast<size_t>(P), 0);
  ScheduleStats st;
  st.spans.resize(static_cast<size_t>(P));
  st.peak_in_flight.assign(static_cast<size_t>(P), 0);
  std::vector<int> alive(static_cast<size_t>(P), 0);
  size_t remaining = 2 * n;
  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < P; ++s) {
      const auto& prog = programs[static_cast<size_t>(s)];
      while (pc[static_cast<size_t>(s)] < prog.size()) {
        const PipeAction a = prog[pc[static_cast<size_t>(s)]];
        double ready = free_at[static_cast<size_t>(s)];
        if (a.op == PipeOp::forward) {
          if (s > 0) {
            const double dep = f_done[idx(s - 1, a.micro)];
            if (dep < 0) break;  // waits for the activation from stage s-1
            ready = std::max(ready, dep);
          }
        } else {
          if (s < P - 1) {
            const double dep = b_done[idx(s + 1, a.micro)];
            if (dep < 0) break;  // waits for the gradient from stage s+1
            ready = std::max(ready, dep);
          }
          ready = std::max(ready, f_done[idx(s, a.micro)]);
        }
        const double end = ready + (a.op == PipeOp::forward ? f_cost : b_cost);
        (a.op == PipeOp::forward ? f_done : b_done)[idx(s, a.micro)] = end;
        free_at[static_cast<size_t>(s)] = end;
        st.spans[static_cast<size_t>(s)].push_back({a, ready, end});
        int& live = alive[static_cast<size_t>(s)];
        live += a.op == PipeOp::forward ? 1 : -1;
        st.peak_in_flight[static_cast<size_t>(s)] = std::max(st.peak_in_flight[static_cast<size_t>(s)], live);
        ++pc[static_cast<size_t>(s)];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::ostringstream os;
      os << "schedule deadlocks:";
      for (int s = 0; s < P; ++s) {
        const auto& prog = programs[static_cast<size_t>(s)];
        if (pc[static_cast<size_t>(s)] < prog.size()) {
          const auto a = prog[pc[static_cast<size_t>(s)]];
          os << " stage " << s << " waits in " << (a.op == PipeOp::forward ? "forward" : "backward") << " "
             << a.micro << ";";
        }
      }
      throw Error(os.str());
    }
  }
  double busy = 0;
  for (int s = 0; s < P; ++s) st.makespan = std::max(st.makespan, free_at[static_cast<size_t>(s)]);
  busy = static_cast<double>(n) * (f_cost + b_cost);
  st.bubble = 1.0 - busy / (static_cast<double>(P) * st.makespan);
  return st;
}

double theoretical_bubble(int P, int m) {
  return static_cast<double>(P - 1) / static_cast<double>(m + P - 1);
}

std::string draw_schedule(const ScheduleStats& st, int P) {
  // Each column is one time unit (the greatest common step of the costs is 1
  // for the default F = 1, B = 2).
  const int width = static_cast<int>(std::ceil(st.makespan));
  std::ostringstream os;
  for (int s = 0; s < P; ++s) {
    std::vector<std::string> cells(static_cast<size_t>(width), ".");
    for (const auto& sp : st.spans[static_cast<size_t>(s)]) {
      std::string tag(1, sp.action.op == PipeOp::forward ? 'F' : 'B');
      tag += std::to_string(sp.action.micro);
      for (int t = static_cast<int>(sp.start); t < static_cast<int>(std::ceil(sp.end)) && t < width; ++t)
        cells[static_cast<size_t>(t)] = tag;
    }
    char head[32];
    std::snprintf(head, sizeof head, "stage %d |", s);
    os << head;
    for (const auto& c : cells) {
      char cell[16];
      std::snprintf(cell, sizeof cell, "%4s", c.c_str());
      os << cell;
    }
    os << "\n";
  }
  return os.str();
}

std::string schedule_svg(const ScheduleStats& st, int P, const std::string& title) {
  const double unit = 24, row = 28, left = 70, top = 30;
  const double w = left + st.makespan * unit + 10, h = top + P * row + 10;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
     << "\" font-family=\"monospace\" font-size=\"11\">\n";
  os << "<text x=\"4\" y=\"16\">" << title << "</text>\n";
  for (int s = 0; s < P; ++s) {
    const double y = top + s * row;
    os << "<text x=\"4\" y=\"" << y + 17 << "\">stage " << s << "</text>\n";
    for (const auto& sp : st.spans[static_cast<size_t>(s)]) {
      const bool f = sp.action.op == PipeOp::forward;
      const double x = left + sp.start * unit, ww = (sp.end - sp.start) * unit;
      os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << ww << "\" height=\"" << row - 4
         << "\" fill=\"" << (f ? "#9ecae1" : "#a1d99b") << "\" stroke=\"#333\"/>\n";
      os << "<text x=\"" << x + 3 << "\" y=\"" << y + 16 << "\">" << (f ? "F" : "B") << sp.action.micro
         << "</text>\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace braid::parallel
