// Placeholder until the sub-command lands; replaced by its owner.
#include "braid/commands.h"
namespace braid::cli {
void add_bench_comm(CLI::App& app) { (void)app; }
}  // namespace braid::cli
