// A simulated schedule drawn as a text table or an SVG picture.
#pragma once
#include <string>

#include "braid/parallel/pipeline/check.h"

namespace braid::parallel {

/// Text table: one row per rank, one column per time unit of the cheapest
/// action. Cells: op letter, micro-batch, and ".c" for chunk c when v > 1:
/// "F3" forward, "B3" full backward, "b3" backward_input, "W3"
/// backward_weight, "F3.1" forward of micro-batch 3 on chunk 1, "." idle.
std::string draw_schedule(const ScheduleStats& s, int P);
/// The same as an SVG picture: forwards in blue (darker per chunk), full
/// backward and backward_input in green (backward_input lighter), backward_weight in orange.
std::string schedule_svg(const ScheduleStats& s, int P, const std::string& title);

}  // namespace braid::parallel
