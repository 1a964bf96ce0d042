#include "braid/parallel/pipeline/draw.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace braid::parallel {

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
