#include "braid/parallel/data_parallel/sharded.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "braid/core/error.h"
#include "braid/core/hash.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/elementwise.h"
#include "braid/parallel/data_parallel/group_buffer.h"

namespace braid::parallel {

using kernels::accumulate_cast;
using kernels::copy_cast;

// A unit's parameters in f32 for the kernels. At stage 3 `staging` receives the
// all-gather (N rank blocks, compute dtype) and is unpacked into `data`, and in
// half precision also into `half` (the unit in the compute dtype, for the
// model's matmuls); with FSDP in fp32 the gather lands in `data` directly (no staging).
struct ShardedEngine::Slot {
  int unit = -1;
  bool valid = false;    // data holds `unit` (or will, once `work` completes)
  bool in_use = false;
  int64_t used = 0;      // last use, for choosing a victim
  Buffer data, staging, half;
  comm::WorkPtr work;
};

// A unit's f32 gradient buffer; `staging` packs it (reduce dtype) for the
// reduce-scatter. `work` is the reduction in flight, completed before reuse.
struct ShardedEngine::GSlot {
  int unit = -1;
  Buffer data, staging;
  comm::WorkPtr work;
  const void* result = nullptr;  // this rank's reduced block, when work completes
};

std::vector<ShardedEngine::Unit> ShardedEngine::make_units(const model::GPTConfig& cfg,
                                                           const ShardedConfig& sc, size_t N) {
  const std::vector<size_t> bounds = model::unit_bounds(cfg, sc.tp, sc.pipeline);
  const std::vector<model::ParamInfo> table = model::param_table(cfg, sc.tp, sc.pipeline);
  std::vector<Unit> units;
  size_t shard_off = 0;
  for (size_t u = 0; u + 1 < bounds.size(); ++u) {
    Unit U;
    U.begin = bounds[u];
    U.end = bounds[u + 1];
    std::vector<size_t> cuts{U.begin};
    if (!sc.fsdp) {
      // One group per tensor; a tensor's group runs to the next tensor's start,
      // so the alignment gap (always zero) travels with it.
      for (const auto& p : table)
        if (p.offset > U.begin && p.offset < U.end) cuts.push_back(p.offset);
    }
    cuts.push_back(U.end);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const size_t lo = cuts[i], hi = cuts[i + 1];
      const size_t c = (hi - lo + N - 1) / N;
      U.groups.push_back({lo, hi, c, U.block});
      U.block += c;
    }
    U.shard_off = shard_off;
    shard_off += U.block;
    units.push_back(std::move(U));
  }
  return units;
}

ShardedEngine::Plan ShardedEngine::plan(const model::GPTConfig& cfg, const ShardedConfig& sc,
                                        int world, int rank) {
  BRAID_CONFIG_CHECK(sc.stage == 2 || sc.stage == 3, "the sharding engine runs ZeRO stage 2 or 3 (FSDP and HSDP: 3), ",
                     "not ", sc.stage, "; stages 0 and 1 run through the gradient buckets (GradBuckets)");
  BRAID_CONFIG_CHECK(world >= 1 && rank >= 0 && rank < world, "sharding plan: rank ", rank,
                     " outside a group of ", world, " ranks");
  BRAID_CONFIG_CHECK(sc.reduce == DType::f32 || sc.reduce == sc.compute, "gradients of a ", dtype_name(sc.compute),
                     " model are reduced in f32 or ", dtype_name(sc.compute), ", not ", dtype_name(sc.reduce));
  const size_t N = static_cast<size_t>(world);
  const size_t r = static_cast<size_t>(rank);
  const std::vector<Unit> units = make_units(cfg, sc, N);
  const size_t n = units.back().end;
  const size_t b = dtype_size(sc.compute), gb = dtype_size(sc.reduce);
  const bool half = sc.compute != DType::f32;
  Plan p;
  size_t max_len = 0, max_block = 0, max_pad = 0, u0_len = 0, u0_pad = 0, u0_block = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    const Unit& U = units[u];
    for (const Group& g : U.groups) {
      const size_t a = std::min(g.lo + r * g.c, g.hi), e = std::min(g.lo + (r + 1) * g.c, g.hi);
      if (e > a) p.owned.push_back({a, e - a, U.shard_off + g.off + (a - g.lo - r * g.c)});
    }
    p.shard_elems += U.block;
    const size_t len = U.end - U.begin, pad = N * U.block;
    p.unit_gather_bytes.push_back((N - 1) * U.block * b);
    p.unit_scatter_bytes.push_back((N - 1) * U.block * gb);
    if (u == 0) {
      u0_len = len, u0_pad = pad, u0_block = U.block;
    } else {
      max_len = std::max(max_len, len), max_pad = std::max(max_pad, pad);
      max_block = std::max(max_block, U.block);
    }
  }
  auto add = [&p](MemCategory c, size_t bytes) { p.bytes[static_cast<size_t>(c)] += bytes; };
  p.state_elems = p.shard_elems;
  // Model states.
  if (sc.stage == 2) add(MemCategory::compute_params, n * b);
  if (sc.stage == 3) add(MemCategory::compute_params, p.shard_elems * b);
  if (half) add(MemCategory::master_params, p.state_elems * sizeof(float));
  add(MemCategory::grads, p.shard_elems * gb);
  // Transient buffers: three parameter slots (unit 0 and two rotating ones for
  // the current and the prefetched unit) where parameters are not f32 in
  // place, and three gradient slots, each with staging where needed.
  const bool gather = sc.stage == 3;
  // A single group in f32 (FSDP): collectives run in place, without staging.
  const bool direct_p = sc.fsdp && !half, direct_g = sc.fsdp && sc.reduce == DType::f32;
  if (gather || half) {
    const size_t s0 = gather && direct_p ? u0_pad : u0_len, s = gather && direct_p ? max_pad : max_len;
    add(MemCategory::comm, (s0 + 2 * s) * sizeof(float));
    if (gather && !direct_p) add(MemCategory::comm, N * (u0_block + 2 * max_block) * b);
    if (gather && half) add(MemCategory::comm, (u0_len + 2 * max_len) * b);
  }
  const size_t g0 = direct_g ? u0_pad : u0_len, g = direct_g ? max_pad : max_len;
  add(MemCategory::comm, (g0 + 2 * g) * sizeof(float));
  if (!direct_g) add(MemCategory::comm, N * (u0_block + 2 * max_block) * gb);
  // Stage 2 all-gathers the updated parameters unit by unit through one staging buffer.
  if (sc.stage == 2 && N > 1) add(MemCategory::comm, N * std::max(u0_block, max_block) * b);
  return p;
}

ShardedEngine::ShardedEngine(const model::GPTConfig& cfg, const ShardedConfig& sc,
                             comm::Communicator& shard, comm::Communicator* replicate,
                             MemoryLedger* ledger)
    : cfg_(cfg), sc_(sc), shard_(shard), replicate_(replicate) {
  const Plan p = plan(cfg, sc, shard.size(), shard.rank());
  N_ = static_cast<size_t>(shard.size());
  r_ = static_cast<size_t>(shard.rank());
  units_ = make_units(cfg, sc, N_);
  n_ = units_.back().end;
  b_ = dtype_size(sc.compute);
  gb_ = dtype_size(sc.reduce);
  owned_ = p.owned;
  shard_elems_ = p.shard_elems;
  state_elems_ = p.state_elems;
  const bool half = sc.compute != DType::f32;
  if (sc.stage == 2) compute_full_ = Buffer(n_ * b_, MemCategory::compute_params, ledger);
  if (sc.stage == 3) compute_shard_ = Buffer(shard_elems_ * b_, MemCategory::compute_params, ledger);
  if (half) master_ = Buffer(state_elems_ * sizeof(float), MemCategory::master_params, ledger);
  grad_shard_ = Buffer(shard_elems_ * gb_, MemCategory::grads, ledger);

  size_t max_len = 0, max_block = 0, max_pad = 0;
  for (size_t u = 1; u < units_.size(); ++u) {
    max_len = std::max(max_len, units_[u].end - units_[u].begin);
    max_block = std::max(max_block, units_[u].block);
    max_pad = std::max(max_pad, N_ * units_[u].block);
  }
  const size_t u0_len = units_[0].end - units_[0].begin, u0_pad = N_ * units_[0].block;
  const bool gather = sc.stage == 3, direct_p = sc.fsdp && !half, direct_g = sc.fsdp && sc.reduce == DType::f32;
  // What the shard group all-gathers into and reduce-scatters from, shared when it can be.
  const bool share = sc.zero_copy && sc.algo == comm::Algorithm::ring && N_ > 1;
  auto comm_buffer = [&](size_t bytes) { return group_buffer(shard, bytes, MemCategory::comm, ledger, share, &comm_bytes_); };
  for (int i = 0; i < 3; ++i) {
    auto s = std::make_unique<Slot>();
    const size_t block = i == 0 ? units_[0].block : max_block;
    if (gather || half) {
      const size_t elems = gather && direct_p ? (i == 0 ? u0_pad : max_pad) : (i == 0 ? u0_len : max_len);
      s->data = gather && direct_p ? comm_buffer(elems * sizeof(float)) : Buffer(elems * sizeof(float), MemCategory::comm, ledger);
      if (gather && !direct_p) s->staging = comm_buffer(N_ * block * b_);
      if (gather && half) s->half = Buffer((i == 0 ? u0_len : max_len) * b_, MemCategory::comm, ledger);
    }
    slots_.push_back(std::move(s));
    auto g = std::make_unique<GSlot>();
    const size_t gelems = direct_g ? (i == 0 ? u0_pad : max_pad) : (i == 0 ? u0_len : max_len);
    g->data = direct_g ? comm_buffer(gelems * sizeof(float)) : Buffer(gelems * sizeof(float), MemCategory::comm, ledger);
    if (!direct_g) g->staging = comm_buffer(N_ * block * gb_);
    gslots_.push_back(std::move(g));
  }
  if (sc.stage == 2 && N_ > 1)
    block_staging_ = comm_buffer(N_ * std::max(units_[0].block, max_block) * b_);
  // The constructor allocated what plan() predicts (checked by tests against the ledger).
}

ShardedEngine::~ShardedEngine() {
  // Outstanding collectives reference our buffers: they end before the buffers go.
  for (auto& s : slots_) comm::settle(s->work);
  for (auto& g : gslots_) comm::settle(g->work);
}

// ---- layout helpers ----

void ShardedEngine::pack_block(const void* src_unit, DType t, int u, int q, void* dst, DType dt) const {
  // dst (block, dtype dt) = rank q's slices of the unit held in src_unit (unit-relative, dtype t).
  const Unit& U = units_[static_cast<size_t>(u)];
  const size_t Q = static_cast<size_t>(q), db = dtype_size(dt);
  char* d = static_cast<char*>(dst);
  for (const Group& g : U.groups) {
    const size_t a = std::min(g.lo + Q * g.c, g.hi), e = std::min(g.lo + (Q + 1) * g.c, g.hi);
    const size_t v = e - a;
    copy_cast(d + g.off * db, dt, static_cast<const char*>(src_unit) + (a - U.begin) * dtype_size(t), t, v);
    std::memset(d + (g.off + v) * db, 0, (g.c - v) * db);
  }
}

void ShardedEngine::unpack_block(const void* block, DType t, int u, int q, void* dst_unit,
                                 DType dt) const {
  const Unit& U = units_[static_cast<size_t>(u)];
  const size_t Q = static_cast<size_t>(q);
  for (const Group& g : U.groups) {
    const size_t a = std::min(g.lo + Q * g.c, g.hi), e = std::min(g.lo + (Q + 1) * g.c, g.hi);
    const char* src = static_cast<const char*>(block) + g.off * dtype_size(t);
    // A half-precision unit's f32 copy skips what the model reads only in half.
    if (dt == DType::f32 && t != DType::f32) {
      widen(static_cast<float*>(dst_unit), u, src, a, e);
    } else {
      copy_cast(static_cast<char*>(dst_unit) + (a - U.begin) * dtype_size(dt), dt, src, t, e - a);
    }
  }
}

// ---- parameters ----

void ShardedEngine::set_compute_only(const std::vector<std::pair<size_t, size_t>>& ranges) {
  compute_only_ = ranges;
  std::sort(compute_only_.begin(), compute_only_.end());
  for (auto& s : slots_) s->valid = false, s->unit = -1;
}

void ShardedEngine::widen(float* unit_f32, int u, const char* src, size_t a, size_t e) const {
  const size_t u0 = units_[static_cast<size_t>(u)].begin;
  model::for_each_gap(compute_only_, a, e, [&](size_t lo, size_t hi) {
    copy_cast(unit_f32 + (lo - u0), DType::f32, src + (lo - a) * b_, sc_.compute, hi - lo);
  });
}

ShardedEngine::Slot& ShardedEngine::slot_for(int u) {
  if (u == 0) return *slots_[0];
  for (size_t i = 1; i < 3; ++i)
    if (slots_[i]->valid && slots_[i]->unit == u) return *slots_[i];
  // Victim: a free rotating slot, the least recently used.
  Slot* best = nullptr;
  for (size_t i = 1; i < 3; ++i) {
    Slot* s = slots_[i].get();
    if (s->in_use) continue;
    if (!best || s->used < best->used) best = s;
  }
  BRAID_CHECK(best != nullptr, "sharding: no free parameter slot for unit ", u,
              " (more than one unit acquired at once)");
  if (best->work) complete(*best);  // a prefetch nobody used
  best->valid = false;
  best->unit = -1;
  return *best;
}

void ShardedEngine::fill(Slot& s, int u, bool async) {
  const Unit& U = units_[static_cast<size_t>(u)];
  const size_t len = U.end - U.begin;
  s.unit = u;
  s.valid = true;
  if (sc_.stage == 2) {
    // Replicated compute copy in half precision: widen the unit for the kernels.
    widen(s.data.as<float>(), u, compute_full_.as<char>() + U.begin * b_, U.begin, U.begin + len);
    return;
  }
  const char* mine = compute_shard_.as<char>() + U.shard_off * b_;
  if (N_ == 1) {
    unpack_block(mine, sc_.compute, u, 0, s.data.data(), DType::f32);
    if (s.half.bytes() > 0) unpack_block(mine, sc_.compute, u, 0, s.half.data(), sc_.compute);
    return;
  }
  void* recv = s.staging.bytes() > 0 ? s.staging.data() : s.data.data();
  shard_.set_next_label(detail::concat(async ? "prefetch unit " : "unit ", u, " parameters"));
  s.work = shard_.all_gather_async(mine, recv, U.block, sc_.compute, sc_.algo);
  if (!async) complete(s);
}

void ShardedEngine::complete(Slot& s) {
  if (!s.work) return;
  {
    ScopedSpan wait(sink_, "wait parameters of unit ", s.unit, "comm wait");
    s.work->wait();
  }
  s.work.reset();
  if (s.staging.bytes() == 0) return;  // gathered in place: rank blocks are the unit
  for (size_t q = 0; q < N_; ++q) {
    const char* block = s.staging.as<char>() + q * units_[static_cast<size_t>(s.unit)].block * b_;
    unpack_block(block, sc_.compute, s.unit, static_cast<int>(q), s.data.data(), DType::f32);
    if (s.half.bytes() > 0) unpack_block(block, sc_.compute, s.unit, static_cast<int>(q), s.half.data(), sc_.compute);
  }
}

void ShardedEngine::prefetch_after(int u) {
  // The guess follows one model's unit order (UnitStorage); a pipeline stage
  // interleaves micro-batches and holds other units, so it gathers on demand.
  if (sc_.stage != 3 || N_ == 1 || !sc_.pipeline.chunks.empty()) return;
  const int L = static_cast<int>(cfg_.n_layer);
  int next = -1;
  if (in_backward_) {
    next = u == 0 ? L + 1 : (u >= 2 ? u - 1 : -1);
  } else if (u == 0) {
    next = last_acquired_ == L + 1 ? -1 : 1;  // the head (after ln_f) or the encoder
  } else {
    next = u <= L ? u + 1 : 0;
  }
  if (next <= 0) return;  // unit 0 has its own slot and stays gathered
  for (size_t i = 1; i < 3; ++i)
    if (slots_[i]->valid && slots_[i]->unit == next) return;
  Slot& s = slot_for(next);
  fill(s, next, true);
  s.used = ++tick_;
}

const float* ShardedEngine::acquire_params(int u) {
  BRAID_CHECK(u >= 0 && static_cast<size_t>(u) < units_.size(), "acquire_params: unit ", u);
  const Unit& U = units_[static_cast<size_t>(u)];
  if (sc_.stage == 2 && sc_.compute == DType::f32) {
    last_acquired_ = u;
    return compute_full_.as<float>() + U.begin;
  }
  Slot& s = slot_for(u);
  if (!s.valid || s.unit != u) {
    fill(s, u, false);
  } else {
    complete(s);
  }
  s.in_use = true;
  s.used = ++tick_;
  prefetch_after(u);
  last_acquired_ = u;
  return s.data.as<float>();
}

const void* ShardedEngine::compute_params(int u) {
  if (sc_.compute == DType::f32) return nullptr;
  if (sc_.stage == 2) return compute_full_.as<char>() + units_[static_cast<size_t>(u)].begin * b_;
  for (auto& s : slots_)
    if (s->valid && s->unit == u && s->in_use) return s->half.data();
  BRAID_CHECK(false, "compute_params: unit ", u, " is not acquired");
  return nullptr;
}

void ShardedEngine::release_params(int u) {
  if (sc_.stage == 2 && sc_.compute == DType::f32) return;
  for (auto& s : slots_)
    if (s->unit == u) s->in_use = false;
}

// ---- gradients ----

float* ShardedEngine::acquire_grads(int u) {
  BRAID_CHECK(u >= 0 && static_cast<size_t>(u) < units_.size(), "acquire_grads: unit ", u);
  if (u == 0) in_backward_ = true;
  GSlot* g;
  if (u == 0) {
    g = gslots_[0].get();
  } else {
    g = gslots_[next_gslot_].get();
    next_gslot_ = next_gslot_ == 1 ? 2 : 1;
  }
  complete_reduce(*g);
  g->unit = u;
  std::memset(g->data.data(), 0, g->data.bytes());  // zeroes the padding as well
  return g->data.as<float>();
}

void ShardedEngine::grads_ready(int u) {
  GSlot* g = nullptr;
  for (auto& s : gslots_)
    if (s->unit == u && !s->work) g = s.get();
  BRAID_CHECK(g != nullptr, "grads_ready: unit ", u, " has no acquired gradient buffer");
  if (inject_inf_) {
    g->data.as<float>()[0] = std::numeric_limits<float>::infinity();
    inject_inf_ = false;
  }
  if (u == 0) in_backward_ = false;
  launch_reduce(*g);
}

void ShardedEngine::launch_reduce(GSlot& g) {
  const int u = g.unit;
  const Unit& U = units_[static_cast<size_t>(u)];
  const DType t = sc_.reduce;
  if (N_ > 1) shard_.set_next_label(detail::concat("unit ", u, " gradients"));
  if (g.staging.bytes() == 0) {
    // FSDP in fp32: the unit buffer is already N rank blocks (zero padding).
    float* mine = g.data.as<float>() + r_ * U.block;
    if (N_ > 1) g.work = shard_.reduce_scatter_async(g.data.data(), mine, U.block, t, comm::ReduceOp::avg, sc_.algo);
    g.result = mine;
  } else {
    for (size_t q = 0; q < N_; ++q)
      pack_block(g.data.data(), DType::f32, g.unit, static_cast<int>(q), g.staging.as<char>() + q * U.block * gb_, t);
    char* mine = g.staging.as<char>() + r_ * U.block * gb_;
    if (N_ > 1) g.work = shard_.reduce_scatter_async(g.staging.data(), mine, U.block, t, comm::ReduceOp::avg, sc_.algo);
    g.result = mine;
  }
  if (!g.work) complete_reduce(g);  // one rank: nothing to wait for
}

void ShardedEngine::sum_unit_grads(int u, comm::Communicator& group) {
  // The unit's block of the gradient shard: the same slice of the unit on
  // every rank of `group` (same unit, same shard group size and rank).
  const Unit& U = units_[static_cast<size_t>(u)];
  char* g = grad_shard_.as<char>() + U.shard_off * gb_;
  group.set_next_label(detail::concat("unit ", u, " gradients, tied copies"));
  group.all_reduce(g, g, U.block, sc_.reduce, comm::ReduceOp::sum, sc_.algo);
}

void ShardedEngine::complete_reduce(GSlot& g) {
  if (g.work) {
    ScopedSpan wait(sink_, "wait gradients of unit ", g.unit, "comm wait");
    g.work->wait();
    g.work.reset();
  }
  if (g.unit < 0 || !g.result) {
    g.unit = -1;
    g.result = nullptr;
    return;
  }
  const Unit& U = units_[static_cast<size_t>(g.unit)];
  accumulate_cast(grad_shard_.as<char>() + U.shard_off * gb_, sc_.reduce, g.result, sc_.reduce, U.block);
  g.unit = -1;
  g.result = nullptr;
}

std::string ShardedEngine::transport() const {
  std::string line = transport_line(sc_.zero_copy, sc_.algo, int(N_), comm_bytes_);
  // HSDP: the replicas average their gradient shards from a private buffer.
  if (replicate_ && replicate_->size() > 1)
    line += (line.empty() ? "" : "; ") + std::string("gradient shards averaged across the ") +
            std::to_string(replicate_->size()) + " replicas by messages";
  return line;
}

void ShardedEngine::begin_step() {
  for (auto& g : gslots_) complete_reduce(*g);
  kernels::fill_zero(grad_shard_.data(), grad_shard_.bytes());
  in_backward_ = false;
}

void ShardedEngine::finish_grads() {
  for (auto& g : gslots_) complete_reduce(*g);
  if (replicate_ && replicate_->size() > 1) {
    // HSDP: the shard holds the average over this shard group; average the
    // shards of the replicas (same layout on every replica).
    replicate_->set_next_label("gradient shard across replicas");
    replicate_->all_reduce(grad_shard_.data(), grad_shard_.data(), shard_elems_, sc_.reduce, comm::ReduceOp::avg,
                           sc_.algo);
  }
}

// ---- optimizer side ----

uint16_t* ShardedEngine::bf16_compute(const Segment& s) {
  // Stage 3's shard may still be the source of a parameter all-gather in
  // flight (a prefetch): after_update settles those, then casts.
  if (sc_.compute != DType::bf16 || sc_.stage != 2) return nullptr;
  return compute_full_.as<uint16_t>() + s.offset;
}

float* ShardedEngine::master(const Segment& s) {
  if (master_.bytes()) return master_.as<float>() + s.shard;
  if (sc_.stage == 3) return compute_shard_.as<float>() + s.shard;
  return compute_full_.as<float>() + s.offset;  // fp32 replicated: update in place
}

const void* ShardedEngine::grad(const Segment& s) const { return grad_shard_.as<char>() + s.shard * gb_; }

void ShardedEngine::gather_compute_full() {
  // Stages 1/2: every rank's updated block travels once (all-gather per unit).
  if (N_ == 1) return;
  char* tmp = block_staging_.as<char>();
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& U = units_[u];
    char* mine = tmp + r_ * U.block * b_;
    pack_block(compute_full_.as<char>() + U.begin * b_, sc_.compute, static_cast<int>(u),
               static_cast<int>(r_), mine, sc_.compute);
    shard_.all_gather(mine, tmp, U.block, sc_.compute, sc_.algo);
    for (size_t q = 0; q < N_; ++q)
      unpack_block(tmp + q * U.block * b_, sc_.compute, static_cast<int>(u),
                   static_cast<int>(q), compute_full_.as<char>() + U.begin * b_, sc_.compute);
  }
}

void ShardedEngine::after_update() {
  for (auto& s : slots_) {
    if (s->work) complete(*s);
    s->valid = false;
    s->unit = -1;
  }
  // Stage 2 in bf16: the optimizer wrote the owned compute parameters (bf16_compute).
  const bool half = sc_.compute != DType::f32;
  if (sc_.stage == 3) {
    if (half) copy_cast(compute_shard_.data(), sc_.compute, master_.data(), DType::f32, shard_elems_);
    return;
  }
  if (half && sc_.compute != DType::bf16) {
    // Cast the owned master elements into the replicated compute copy.
    for (const auto& s : owned_)
      copy_cast(compute_full_.as<char>() + s.offset * b_, sc_.compute, master(s), DType::f32, s.len);
  }
  gather_compute_full();
}

void ShardedEngine::init_weights(const model::GPT& model, uint64_t seed) {
  std::vector<float> tmp;
  for (const auto& s : owned_) model.init_weights_range(seed, master(s), s.offset, s.offset + s.len);
  if (sc_.stage == 3) {
    if (sc_.compute != DType::f32)
      copy_cast(compute_shard_.data(), sc_.compute, master_.data(), DType::f32, shard_elems_);
  } else {
    // Every rank initialises the full compute copy itself (no traffic).
    for (const auto& U : units_) {
      tmp.resize(U.end - U.begin);
      model.init_weights_range(seed, tmp.data(), U.begin, U.end);
      copy_cast(compute_full_.as<char>() + U.begin * b_, sc_.compute, tmp.data(), DType::f32, tmp.size());
    }
  }
  for (auto& s : slots_) s->valid = false, s->unit = -1;
}

template <typename Src>
void ShardedEngine::assemble_owned(Src src, float* out) {
  std::memset(out, 0, n_ * sizeof(float));
  for (const auto& s : owned_) std::memcpy(out + s.offset, src(s), s.len * sizeof(float));
  // Exactly one rank contributes each element, so the sum is exact.
  if (shard_.size() > 1) shard_.all_reduce(out, out, n_, DType::f32, comm::ReduceOp::sum);
}

void ShardedEngine::gather_master(float* out) {
  assemble_owned([this](const Segment& s) { return master(s); }, out);
}

void ShardedEngine::assemble(const float* state, float* out) {
  assemble_owned([state](const Segment& s) { return state + s.shard; }, out);
}

void ShardedEngine::load_master(const FlatReader& read) {
  for (const auto& s : owned_) read(s.offset, s.len, master(s));
  if (sc_.stage == 3) {
    if (sc_.compute != DType::f32)
      copy_cast(compute_shard_.data(), sc_.compute, master_.data(), DType::f32, shard_elems_);
  } else {
    // The compute copy of the whole layout, a bounded piece at a time.
    std::vector<float> piece(std::min(n_, kLoadPieceElems));
    for (size_t o = 0; o < n_; o += piece.size()) {
      const size_t k = std::min(piece.size(), n_ - o);
      read(o, k, piece.data());
      copy_cast(compute_full_.as<char>() + o * b_, sc_.compute, piece.data(), DType::f32, k);
    }
  }
  for (auto& s : slots_) s->valid = false, s->unit = -1;
}

uint64_t ShardedEngine::hash_compute_params() {
  uint64_t h = kFnvBasis;
  if (sc_.stage == 2) return fnv1a(compute_full_.data(), n_ * b_, h);
  for (size_t u = 0; u < units_.size(); ++u) {
    const int U = static_cast<int>(u);
    const size_t len = units_[u].end - units_[u].begin;
    const float* p = acquire_params(U);
    // In half precision the gathered compute copy (the f32 one skips the matmul weights).
    h = sc_.compute == DType::f32 ? fnv1a(p, len * sizeof(float), h) : fnv1a(compute_params(U), len * b_, h);
    release_params(U);
  }
  // Forget what the hash gathered, so checking does not change the next step's traffic.
  for (auto& s : slots_) {
    complete(*s);
    s->valid = false, s->unit = -1;
  }
  last_acquired_ = -1;
  return h;
}

}  // namespace braid::parallel
