#include "braid/train/replica_check.h"

#include <vector>

#include "braid/core/error.h"
#include "braid/core/hash.h"

namespace braid::train {

namespace {
void compare(comm::Communicator& g, uint64_t h, const char* what, int64_t step) {
  std::vector<uint64_t> all(static_cast<size_t>(g.size()));
  // Raw bytes travel as f32 pairs; all-gather copies bits without arithmetic.
  g.all_gather(&h, all.data(), 2, DType::f32);
  for (int q = 0; q < g.size(); ++q) {
    BRAID_CHECK(all[static_cast<size_t>(q)] == h, what, " diverged at step ", step, ": rank ", q,
                " of the group differs from rank ", g.rank());
  }
}
}  // namespace

uint64_t check_replicas(parallel::ParallelContext& ctx, model::GPT& model, parallel::GradSync& sync, int64_t step) {
  const uint64_t hash = sync.hash_params();
  compare(ctx.dp(), hash, "DP replicas", step);
  if (ctx.tp() && model.params()) {
    uint64_t h = kFnvBasis;
    for (const auto& p : model.param_table())
      if (p.tp_dim < 0) h = fnv1a(model.params() + p.offset, p.numel * sizeof(float), h);
    compare(*ctx.tp(), h, "TP-replicated parameters", step);
  }
  if (ctx.emb() && (model.is_first_stage() || model.is_last_stage())) {
    const uint64_t h = fnv1a(sync.acquire_unit_params(0), model.unit_end(0) * sizeof(float));
    sync.release_unit_params(0);
    compare(*ctx.emb(), h, "tied embedding copies", step);
  }
  return hash;
}

}  // namespace braid::train
