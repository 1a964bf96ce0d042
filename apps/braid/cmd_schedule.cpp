// `braid schedule`: builds a pipeline schedule, checks it on its tables (every
// action once, no deadlock) and prints (or draws) it with its bubble, without
// running anything.
#include <cstdio>
#include <fstream>
#include <memory>

#include "braid/core/error.h"
#include "braid/parallel/pipeline/draw.h"
#include "braid/parallel/plan.h"
#include "commands.h"

namespace braid::cli {

namespace {
struct ScheduleArgs {
  int pp = 4;
  int micro_batches = 8;
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  std::string svg;
};

// Peak micro-batches alive per stage, and per chunk when v > 1 (activation
// slots are sized per chunk).
void print_peaks(const parallel::ScheduleStats& st, int P, int v) {
  std::printf("peak micro-batches alive per stage (summed over chunks):");
  for (int s = 0; s < P; ++s) std::printf(" %d", st.peak_in_flight[static_cast<size_t>(s)]);
  std::printf("\n");
  if (v == 1) return;
  std::printf("peak per chunk (stage: chunk 0, 1, ...):");
  for (int s = 0; s < P; ++s) {
    std::printf(" %d:", s);
    for (int c = 0; c < v; ++c)
      std::printf("%s%d", c ? "," : "", st.peak_in_flight_chunk[static_cast<size_t>(s)][static_cast<size_t>(c)]);
  }
  std::printf("\n");
}

void print_schedule(const ScheduleArgs& a) {
  parallel::PipelinePlan pp;
  pp.stages = a.pp;
  pp.micro_batches = a.micro_batches;
  pp.schedule = &parallel::find_schedule(a.schedule);
  pp.virtual_stages = parallel::schedule_chunks(*pp.schedule, a.virtual_stages);
  parallel::ScheduleStats st;
  pp.programs(&st);
  const parallel::ScheduleDef& def = *pp.schedule;
  const int P = pp.stages, m = pp.micro_batches, v = pp.virtual_stages;
  std::printf("%s schedule, P=%d, m=%d, v=%d (stages, micro-batches, chunks per stage); a stage's "
              "forward = 1, backward = 2 time units, backward_input = backward_weight = 1, each /v per chunk\n",
              def.name, P, m, v);
  std::printf("cells: F forward, B backward, b backward_input, W backward_weight (F3.1: micro-batch 3 on chunk 1), . idle\n");
  std::printf("%s", parallel::draw_schedule(st, P).c_str());
  const std::string caveat = parallel::theory_assumption(def, P, m, v);
  std::printf("makespan %.4g | bubble %.1f%% (theory %s = %.1f%%%s)\n", st.makespan, 100 * st.bubble, def.bubble_text,
              100 * parallel::theoretical_bubble(def, P, m, v), caveat.empty() ? "" : ("; " + caveat).c_str());
  print_peaks(st, P, v);
  if (!a.svg.empty()) {
    const std::string tmp = a.svg + ".tmp";
    std::ofstream(tmp) << parallel::schedule_svg(
        st, P, std::string(def.name) + " P=" + std::to_string(P) + " m=" + std::to_string(m) +
                   (v > 1 ? " v=" + std::to_string(v) : std::string()));
    BRAID_CONFIG_CHECK(std::rename(tmp.c_str(), a.svg.c_str()) == 0, "cannot write --svg ", a.svg);
    std::printf("wrote %s\n", a.svg.c_str());
  }
}
}  // namespace

void add_schedule(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  auto* c = app.add_subcommand("schedule", "Print (or draw) a pipeline schedule and its bubble without running it");
  c->add_option("--pp", a->pp, "Pipeline stages")->capture_default_str();
  c->add_option("--micro-batches", a->micro_batches, "Micro-batches per step")->capture_default_str();
  c->add_option("--schedule", a->schedule, schedule_help())->capture_default_str();
  c->add_option("--virtual-stages", a->virtual_stages, "Model chunks per stage (interleaved: >= 2; a schedule with a fixed count: that count; the others: 1)")
      ->capture_default_str();
  c->add_option("--svg", a->svg, "Also write the schedule as an SVG picture to this file");
  c->callback([a]() { print_schedule(*a); });
}

}  // namespace braid::cli
