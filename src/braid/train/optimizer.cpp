#include "braid/train/optimizer.h"

#include <algorithm>

#include "braid/kernels/cpu/adamw.h"

namespace braid::train {

namespace {

// The owned ranges cut at parameter boundaries.
std::vector<AdamW::Segment> cut_segments(const std::vector<parallel::OwnedRange>& owned, const model::GPT& model,
                                         bool last_stage_copy) {
  std::vector<AdamW::Segment> out;
  const auto& table = model.param_table();
  for (const auto& seg : owned) {
    size_t pos = seg.offset;
    const size_t end = seg.offset + seg.len;
    while (pos < end) {
      bool decay = false, replicated = true;
      size_t stop = end;
      for (const auto& p : table) {
        if (pos >= p.offset && pos < p.offset + p.numel) {
          decay = p.weight_decay;
          replicated = p.tp_dim < 0;
          stop = std::min(end, p.offset + p.numel);
          break;
        }
        if (p.offset > pos) {
          stop = std::min(end, p.offset);
          break;
        }
      }
      out.push_back({pos, stop - pos, seg.state + (pos - seg.offset), decay, replicated,
                     last_stage_copy && pos < model.unit_end(0)});
      pos = stop;
    }
  }
  return out;
}

// Sum over `group` of one double per rank, added in rank order: the same value
// on every rank (raw doubles travel as f32 pairs, copied bit for bit).
double group_sum(comm::Communicator* group, double x) {
  if (!group || group->size() == 1) return x;
  std::vector<double> all(static_cast<size_t>(group->size()));
  group->all_gather(&x, all.data(), 2, DType::f32);
  double s = 0;
  for (double v : all) s += v;
  return s;
}

}  // namespace

AdamW::AdamW(const AdamWSettings& s, const parallel::GradSync& sync, const model::GPT& model, bool last_stage_copy,
             MemoryLedger* ledger)
    : s_(s),
      segments_(cut_segments(sync.owned(), model, last_stage_copy)),
      m_(sync.state_elems() * sizeof(float), MemCategory::optimizer, ledger),
      v_(sync.state_elems() * sizeof(float), MemCategory::optimizer, ledger) {}

double AdamW::global_grad_sumsq(parallel::GradSync& sync, float mult, int tp_rank) const {
  double ss = 0;
  if (sync.counts_in_norm()) {
    for (const auto& u : segments_) {
      if ((u.tp_replicated && tp_rank != 0) || u.pp_copy) continue;
      ss += kernels::grad_sumsq(sync.grad({u.offset, u.len, u.state}), sync.grad_dtype(), u.len, mult);
    }
  }
  return group_sum(sync.norm_group(), ss);
}

void AdamW::step(parallel::GradSync& sync, float lr, float grad_mult, int64_t t) {
  const DType gt = sync.grad_dtype();
  for (const auto& u : segments_) {
    const parallel::OwnedRange r{u.offset, u.len, u.state};
    const float wd = u.decay ? s_.weight_decay : 0.f;
    float* m = m_.as<float>() + u.state;
    float* v = v_.as<float>() + u.state;
    uint16_t* bf16 = sync.bf16_compute(r);
    if (gt == DType::f32 && grad_mult == 1.0f && !bf16) {
      kernels::adamw_update(sync.master(r), static_cast<const float*>(sync.grad(r)), m, v, u.len, lr, s_.beta1,
                            s_.beta2, s_.eps, wd, t);
    } else {
      kernels::adamw_update_mixed(sync.master(r), sync.grad(r), gt, grad_mult, m, v, u.len, lr, s_.beta1,
                                  s_.beta2, s_.eps, wd, t, bf16);
    }
  }
}

void AdamW::load_state(const parallel::FlatReader& read_m, const parallel::FlatReader& read_v) {
  for (const auto& u : segments_) {
    read_m(u.offset, u.len, m_.as<float>() + u.state);
    read_v(u.offset, u.len, v_.as<float>() + u.state);
  }
}

}  // namespace braid::train
