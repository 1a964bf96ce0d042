#include "braid/parallel/data_parallel/bucketed_sync.h"

#include <algorithm>
#include <cstring>

#include "braid/core/error.h"
#include "braid/core/hash.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/group_buffer.h"
#include "braid/parallel/data_parallel/registry.h"

namespace braid::parallel {

namespace {
BucketReduce reduce_mode(const BucketedConfig& c) {
  return c.stage == 1 ? BucketReduce::reduce_scatter : BucketReduce::all_reduce;
}
bool half(const BucketedConfig& c) { return c.compute != DType::f32; }
BucketDTypes dtypes(const BucketedConfig& c) { return {c.reduce, c.compute}; }
}  // namespace

size_t BucketedSync::bucket_cut(const BucketedConfig& c, const std::vector<size_t>& bounds) {
  return c.tied_embedding && bounds.size() > 2 ? bounds[1] : 0;
}

BucketedSync::Plan BucketedSync::plan(const BucketedConfig& c, int world, int rank) {
  const std::vector<size_t> bounds = model::unit_bounds(c.model, c.tp, c.pipeline);
  const GradBuckets::Plan g = GradBuckets::plan(bounds.back(), world, rank, c.bucket_bytes, reduce_mode(c), dtypes(c),
                                                bucket_cut(c, bounds));
  Plan p;
  p.state_elems = g.shard_size;
  if (half(c)) p.bytes = HalfPrecisionStorage::plan(bounds, c.compute, c.reduce, g.shard_size);
  p.bytes[static_cast<size_t>(MemCategory::comm)] += g.staging_bytes;
  return p;
}

BucketedSync::BucketedSync(const BucketedConfig& c, comm::Communicator& dp, comm::Communicator& world,
                           MemoryLedger* ledger)
    : c_(c), dp_(dp), world_(world), ledger_(ledger) {
  BRAID_CONFIG_CHECK(c.stage == 0 || c.stage == 1, "bucketed gradient sync runs ZeRO stage 0 or 1, not ", c.stage);
  BRAID_CONFIG_CHECK(c.reduce == DType::f32 || c.reduce == c.compute, "gradients of a ", dtype_name(c.compute),
                     " model are reduced in f32 or ", dtype_name(c.compute), ", not ", dtype_name(c.reduce));
  const std::vector<size_t> bounds = model::unit_bounds(c.model, c.tp, c.pipeline);
  cut_ = bucket_cut(c, bounds);
  if (!half(c)) return;
  // The master weights cover what this rank will own: the buckets' plan, before the buckets exist.
  const GradBuckets::Plan g =
      GradBuckets::plan(bounds.back(), dp.size(), dp.rank(), c.bucket_bytes, reduce_mode(c), dtypes(c), cut_);
  half_ = std::make_unique<HalfPrecisionStorage>(bounds, c.compute, c.reduce, g.shard_size, ledger);
}

BucketedSync::~BucketedSync() = default;

size_t BucketedSync::num_params() const { return half_ ? half_->num_params() : model_->num_params(); }

void BucketedSync::attach(model::GPT& model) {
  FlatBufferSync::attach(model);
  if (c_.zero_copy && c_.algo == comm::Algorithm::ring && dp_.size() > 1) {
    // Into memory the DP ranks share: released first, so the peak stays as planned.
    Buffer& g = half_ ? half_->grad_buffer() : model.grad_buffer();
    const size_t bytes = g.bytes();
    g = Buffer();
    g = group_buffer(dp_, bytes, MemCategory::grads, ledger_, true, &grad_bytes_);
  }
  void* params = half_ ? half_->compute() : static_cast<void*>(model.params());
  void* grads = half_ ? half_->grads() : static_cast<void*>(model.grads());
  buckets_ = std::make_unique<GradBuckets>(dp_, params, grads, num_params(), c_.bucket_bytes, c_.overlap, c_.algo,
                                           reduce_mode(c_), dtypes(c_), ledger_, cut_);
  for (const auto& s : buckets_->owned()) owned_.push_back({s.offset, s.len, s.shard});
}

std::string BucketedSync::transport() const {
  std::string line = transport_line(c_.zero_copy, c_.algo, dp_.size(), grad_bytes_);
  // ZeRO-1 gathers the updated parameters into the model's own (private) buffer.
  if (!line.empty() && c_.stage == 1 && grad_bytes_.shared > 0) line += "; the parameter all-gather by messages";
  return line;
}

void BucketedSync::init_params(model::GPT& model, uint64_t seed) {
  if (!half_) {
    model.init_weights(seed);
    return;
  }
  // Every rank initialises the whole compute copy itself (no traffic), unit by unit.
  std::vector<float> tmp;
  for (int u = 0; u < half_->num_units(); ++u) {
    const size_t lo = half_->unit_begin(u), hi = half_->unit_begin(u + 1);
    tmp.resize(hi - lo);
    model.init_weights_range(seed, tmp.data(), lo, hi);
    kernels::copy_cast(static_cast<char*>(half_->compute()) + lo * dtype_size(c_.compute), c_.compute, tmp.data(),
                       DType::f32, tmp.size());
  }
  for (const auto& r : owned_) model.init_weights_range(seed, master(r), r.offset, r.offset + r.len);
  half_->params_changed();
}

void BucketedSync::begin_step(int64_t) {
  if (half_) {
    half_->zero_grads();
  } else {
    model_->zero_grad();
  }
  reduced_ = false;
}

GradReadyHook BucketedSync::backward_hook(bool last) {
  // Only the backward that ends accumulation releases buckets: one sync per step.
  GradReadyHook hook;
  if (last) {
    buckets_->begin_sync();
    hook = [this](size_t lo, size_t hi) { buckets_->on_ready(lo, hi); };
  }
  if (!half_) return hook;
  half_->set_ready_hook(std::move(hook));  // the storage sees each unit finish
  return {};
}

void BucketedSync::reduce_accumulated(comm::Communicator* tied) {
  // The tied embedding's copies are summed first, then averaged over DP with the rest.
  if (half_) half_->set_ready_hook({});
  if (tied) {
    void* g = half_ ? half_->grads() : static_cast<void*>(model_->grads());
    tied->all_reduce(g, g, model_->unit_end(0), c_.reduce, comm::ReduceOp::sum);
  }
  buckets_->begin_sync();
  buckets_->on_ready(0, num_params());
  finish(0.f);
  reduced_ = true;
}

float BucketedSync::finish(float local_loss) {
  if (!reduced_) buckets_->finish_sync();
  reduced_ = true;
  float loss = local_loss;
  if (dp_.size() > 1) dp_.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);
  return loss;
}

void BucketedSync::after_update(StepScalars&) {
  if (half_) {
    // The owned master weights, rounded, into the compute copy (bf16: the
    // optimizer wrote it, bf16_compute); ZeRO-1 then gathers it.
    const size_t b = dtype_size(c_.compute);
    if (c_.compute != DType::bf16)
      for (const auto& r : owned_)
        kernels::copy_cast(static_cast<char*>(half_->compute()) + r.offset * b, c_.compute, master(r), DType::f32,
                           r.len);
    half_->params_changed();
  }
  buckets_->gather_params();
}

size_t BucketedSync::state_elems() const {
  size_t n = 0;
  for (const auto& r : owned_) n = std::max(n, r.state + r.len);
  return n;
}

bool BucketedSync::counts_in_norm() const {
  // ZeRO-1: every rank owns distinct elements; DDP replicas are equal, DP rank 0 counts.
  return c_.stage == 1 || dp_.rank() == 0;
}

const void* BucketedSync::grad(const OwnedRange& r) const {
  if (!half_) return FlatBufferSync::grad(r);
  return static_cast<const char*>(half_->grads()) + r.offset * dtype_size(c_.reduce);
}

uint16_t* BucketedSync::bf16_compute(const OwnedRange& r) {
  return half_ && c_.compute == DType::bf16 ? static_cast<uint16_t*>(half_->compute()) + r.offset : nullptr;
}

float* BucketedSync::master(const OwnedRange& r) {
  return half_ ? half_->master() + r.state : FlatBufferSync::master(r);
}

void BucketedSync::sum_owned(float* full) {
  // ZeRO-1: each element has one owner, so the sum over DP is exact.
  if (c_.stage == 1 && dp_.size() > 1) dp_.all_reduce(full, full, num_params(), DType::f32, comm::ReduceOp::sum);
}

const float* BucketedSync::full_params(std::vector<float>& scratch) {
  if (!half_) return FlatBufferSync::full_params(scratch);
  scratch.assign(num_params(), 0.f);
  for (const auto& r : owned_) std::copy_n(master(r), r.len, scratch.data() + r.offset);
  sum_owned(scratch.data());
  return scratch.data();
}

void BucketedSync::assemble_state(const float* state, float* full) {
  std::fill(full, full + num_params(), 0.f);
  for (const auto& r : owned_) std::copy_n(state + r.state, r.len, full + r.offset);
  sum_owned(full);
}

void BucketedSync::load_params(const FlatReader& read) {
  if (!half_) return FlatBufferSync::load_params(read);
  for (const auto& r : owned_) read(r.offset, r.len, master(r));
  // The compute copy of the whole layout, a bounded piece at a time.
  const size_t n = num_params(), esz = dtype_size(c_.compute);
  std::vector<float> piece(std::min(n, kLoadPieceElems));
  for (size_t o = 0; o < n; o += piece.size()) {
    const size_t k = std::min(piece.size(), n - o);
    read(o, k, piece.data());
    kernels::copy_cast(static_cast<char*>(half_->compute()) + o * esz, c_.compute, piece.data(), DType::f32, k);
  }
  half_->params_changed();
}

const float* BucketedSync::acquire_unit_params(int u) {
  return half_ ? half_->acquire_params(u) : FlatBufferSync::acquire_unit_params(u);
}

void BucketedSync::release_unit_params(int u) {
  if (half_) half_->release_params(u);
}

uint64_t BucketedSync::hash_params() {
  if (!half_) return FlatBufferSync::hash_params();
  return fnv1a(half_->compute(), num_params() * dtype_size(c_.compute));
}

void BucketedSync::inject_inf_once() {
  if (half_) half_->inject_inf_once();
}

// ---- the modes this class runs ----

namespace {

std::unique_ptr<GradSync> make_bucketed(const GradSyncInputs& in) {
  return std::make_unique<BucketedSync>(in.bucketed, in.dp, in.world, in.ledger);
}

SyncMemory plan_bucketed(const SyncPlanInputs& in) {
  const BucketedSync::Plan b = BucketedSync::plan(in.bucketed, in.dp_degree, in.dp_rank);
  SyncMemory m;
  m.bytes = b.bytes;
  m.optimizer_elems = b.state_elems;
  return m;
}

}  // namespace

const DataParallelMode kDdpMode{
    "ddp", "every rank keeps every model state; gradients all-reduced in buckets", 0,
    {Holding::replica, Holding::replica, Holding::replica}, false, false, false, false,
    [](const DataParallelFlags& f) { return f.zero == 0; }, no_mode_rules, shard_over_dp, make_bucketed,
    plan_bucketed};

extern const DataParallelMode kZero1Mode{
    "zero1", "ZeRO-1: the AdamW moments sharded over DP; gradients reduce-scattered, parameters all-gathered", 1,
    {Holding::replica, Holding::replica, Holding::shard}, false, false, false, false,
    [](const DataParallelFlags& f) { return f.zero == 1; }, no_mode_rules, shard_over_dp, make_bucketed,
    plan_bucketed};

}  // namespace braid::parallel
