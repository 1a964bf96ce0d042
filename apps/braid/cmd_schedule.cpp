// `braid schedule`: builds a pipeline schedule, checks it on its tables (every
// action once, no deadlock) and prints (or draws) it with its bubble, without
// running anything.
#include <cstdio>
#include <fstream>
#include <memory>

#include "braid/core/error.h"
#include "braid/parallel/pipeline.h"
#include "commands.h"

namespace braid::cli {

namespace {
struct ScheduleArgs {
  int pp = 4;
  int micro_batches = 8;
  std::string schedule = "1f1b";
  std::string svg;
};
}  // namespace

void add_schedule(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  auto* c = app.add_subcommand("schedule", "Print (or draw) a pipeline schedule and its bubble without running it");
  c->add_option("--pp", a->pp, "Pipeline stages")->capture_default_str();
  c->add_option("--micro-batches", a->micro_batches, "Micro-batches per step")->capture_default_str();
  c->add_option("--schedule", a->schedule, "naive, gpipe or 1f1b")->capture_default_str();
  c->add_option("--svg", a->svg, "Also write the schedule as an SVG picture to this file");
  c->callback([a]() {
    const auto kind = parallel::parse_schedule(a->schedule);
    const auto prog = parallel::build_schedule(kind, a->pp, a->micro_batches);
    const auto st = parallel::check_schedule(prog, a->pp, a->micro_batches);
    std::printf("%s schedule, P=%d stages, m=%d micro-batches (forward = 1, backward = 2 time units)\n",
                parallel::schedule_name(kind), a->pp, a->micro_batches);
    std::printf("%s", parallel::draw_schedule(st, a->pp).c_str());
    std::printf("makespan %.0f | bubble %.1f%% (theory for GPipe/1F1B (P-1)/(m+P-1) = %.1f%%) | "
                "activations alive on stage 0: %d micro-batches\n",
                st.makespan, 100 * st.bubble, 100 * parallel::theoretical_bubble(a->pp, a->micro_batches),
                st.peak_in_flight[0]);
    if (!a->svg.empty()) {
      const std::string tmp = a->svg + ".tmp";
      std::ofstream(tmp) << parallel::schedule_svg(
          st, a->pp, std::string(parallel::schedule_name(kind)) + " P=" + std::to_string(a->pp) +
                         " m=" + std::to_string(a->micro_batches));
      BRAID_CONFIG_CHECK(std::rename(tmp.c_str(), a->svg.c_str()) == 0, "cannot write --svg ", a->svg);
      std::printf("wrote %s\n", a->svg.c_str());
    }
  });
}

}  // namespace braid::cli
