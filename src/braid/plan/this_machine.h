// The `this-machine` cluster: braid measures the machine it runs on instead of
// reading a description. An accelerator is a rank with its compute threads
// (OMP_NUM_THREADS); a node holds as many as the machine has cores for.
#pragma once
#include "braid/plan/cluster.h"

namespace braid::plan {

/// Measures: the matmul ceiling per dtype of one rank (oneDNN at a large GPT-2
/// shape; a dtype without a fast path here gets the f32 figure), the bandwidth of
/// a large memcpy (element-wise kernels and the optimizer), and the alpha-beta of
/// braid's own point-to-point messages between two ranks (ranks as threads, a
/// ping-pong at 4 KiB to 16 MiB, least-squares fit), used for every link since
/// the ranks share one machine. matmul_fraction is 1 (the ceilings are what is
/// reached). Takes a few seconds.
Cluster measure_this_machine();

}  // namespace braid::plan
