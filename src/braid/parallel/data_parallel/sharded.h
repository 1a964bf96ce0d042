// The sharding engine behind ZeRO stages 2 and 3 (Rajbhandari et al. 2020,
// sec. 5.2-5.3), FSDP and HSDP (Zhao et al. 2023, "PyTorch FSDP", sec. 3-4), in
// fp32 or mixed precision (Micikevicius et al. 2018). It is the
// model's UnitStorage: forward and backward take each unit's parameters and
// gradient buffer from it, so parameters can be all-gathered just in time
// (stage 3, the next unit prefetched asynchronously) and gradients
// reduce-scattered unit by unit while backward runs (stages 2, 3).
//
// Shard layout. The flat parameter space is cut into units (embeddings, each
// block, final LayerNorm; see model::UnitStorage) and each unit into groups:
// one group per tensor for ZeRO (each tensor split over the ranks, as DeepSpeed
// partitions each parameter), one group per unit for FSDP (the unit's flat
// parameter split). Rank r owns [lo + r·c, min(lo + (r+1)·c, hi)) of a group
// [lo, hi) with c = ceil((hi − lo)/N): possibly nothing. A rank's shard is the
// concatenation over units and groups of its c-element slices; the slice tail
// beyond hi is padding, kept at zero, so it never reaches a parameter.
//
// What each stage keeps per rank (b = bytes of the compute dtype, 2 or 4; g =
// bytes of the reduce dtype, 4 by default, 2 when a half-precision reduce is
// opted in; stages 0 and 1 run through GradBuckets, grad_buckets.h):
//   stage 2: compute params Ψb, grads Ψg/N, master 4Ψ/N (half only), moments 8Ψ/N
//   stage 3: compute params Ψb/N, grads Ψg/N, master 4Ψ/N (half only), moments 8Ψ/N
// (in fp32 the compute parameters are the master weights). Transient buffers
// (gathered units, unit gradients, staging) are tagged comm and sized from the
// largest unit.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/dtype.h"
#include "braid/core/memory.h"
#include "braid/model/gpt.h"
#include "braid/parallel/data_parallel/grad_sync.h"
#include "braid/parallel/data_parallel/group_buffer.h"

namespace braid::parallel {

struct ShardedConfig {
  int stage = 3;                 // ZeRO stage 2 or 3 (FSDP, HSDP: 3)
  bool fsdp = false;             // one flat parameter per unit instead of per-tensor shards
  DType compute = DType::f32;    // dtype of compute parameters and their all-gathers
  DType reduce = DType::f32;     // gradients' accumulation and reduce-scatter: f32 or `compute`
  comm::Algorithm algo = comm::Algorithm::ring;
  bool zero_copy = true;         // gather and reduce through memory the shard group shares (one node)
  int tp = 1;                    // TP degree: the layout is that of a TP rank's local tensors
  model::PipelineStage pipeline; // pipeline stage: its units, in its own flat layout
};

class ShardedEngine final : public model::UnitStorage {
 public:
  /// Valid elements owned by this rank: flat [offset, offset + len) <-> shard
  /// [shard, shard + len).
  struct Segment {
    size_t offset, len, shard;
  };

  /// What rank `rank` of a shard group of `world` ranks allocates; computed
  /// without allocating, by the same layout code the constructor uses.
  struct Plan {
    std::vector<Segment> owned;    // increasing offsets
    size_t shard_elems = 0;        // elements of one shard incl. padding (same on every rank)
    size_t state_elems = 0;        // elements of each AdamW moment on this rank
    std::array<size_t, kNumMemCategories> bytes{};  // bytes the engine allocates, by category
    /// Bytes one rank sends per all-gather of unit u's parameters (compute
    /// dtype) and per reduce-scatter of its gradient (reduce dtype); ring:
    /// (N−1) blocks of the unit's per-rank slice; 0 when N = 1.
    std::vector<size_t> unit_gather_bytes, unit_scatter_bytes;
  };
  /// Throws ConfigError for a stage other than 2, 3, a reduce dtype other
  /// than f32 or the compute dtype, or rank outside [0, world).
  static Plan plan(const model::GPTConfig& cfg, const ShardedConfig& sc, int world, int rank);

  /// shard: the group parameters are sharded over. replicate: for HSDP the
  /// group of ranks holding the same shard (gradient shards are averaged over
  /// it), else nullptr. Both must outlive the engine.
  ShardedEngine(const model::GPTConfig& cfg, const ShardedConfig& sc, comm::Communicator& shard,
                comm::Communicator* replicate, MemoryLedger* ledger);
  ~ShardedEngine() override;

  // ---- model::UnitStorage ----
  const float* acquire_params(int u) override;
  void release_params(int u) override;
  /// Half precision: unit u's compute copy (stage 2: its part of the
  /// replicated copy; stage 3: the gathered unit, while acquired).
  const void* compute_params(int u) override;
  bool has_compute_params() const override { return sc_.compute != DType::f32; }
  /// The model reads these flat ranges only from compute_params: a unit's f32
  /// copy leaves them out (stale), so a half-precision unit widens only the rest.
  void set_compute_only(const std::vector<std::pair<size_t, size_t>>& ranges) override;
  float* acquire_grads(int u) override;
  void grads_ready(int u) override;

  /// Sets master weights (and compute copies) to GPT's initialisation for `seed`.
  void init_weights(const model::GPT& model, uint64_t seed);
  /// Starts a step: zeroes the gradient accumulators.
  void begin_step();
  /// How the shard group gathers and reduce-scatters (transport_line, group_buffer.h).
  std::string transport() const;
  /// After finish_grads(): sums unit u's gradient (this rank's shard block)
  /// over `group`, whose ranks hold
  /// the same unit in the same layout and shard position (the tied
  /// embedding's copies on the first and last pipeline stage). Collective over `group`.
  void sum_unit_grads(int u, comm::Communicator& group);
  /// Waits for outstanding reductions; afterwards the owned gradient elements
  /// hold the average over all data-parallel ranks (HSDP: also over replicas).
  void finish_grads();
  /// After the optimizer updated the master weights of the owned segments:
  /// refresh the compute copies (all-gather at stage 2, cast at 3) and
  /// forget gathered units.
  void after_update();

  const std::vector<Segment>& owned() const { return owned_; }
  size_t state_elems() const { return state_elems_; }
  /// f32 master weights of owned segment s (its len elements).
  float* master(const Segment& s);
  /// bf16 compute at stage 2: where segment s's compute parameters live (the
  /// optimizer writes them, after_update does not cast); otherwise nullptr.
  uint16_t* bf16_compute(const Segment& s);
  /// Gradient of owned segment s in grad_dtype() (its len elements).
  const void* grad(const Segment& s) const;
  DType grad_dtype() const { return sc_.reduce; }

  /// Full f32 master weights into out (num_params), identical on all ranks.
  /// Collective over the shard group.
  void gather_master(float* out);
  /// out (num_params) = per-rank state (state_elems, indexed by Segment::shard)
  /// placed at its flat offsets and summed over the shard group (each element
  /// has one owner, so the sum is exact). Collective over the shard group.
  void assemble(const float* state, float* out);
  /// Sets master weights (and compute copies) from full f32 parameters.
  void load_master(const FlatReader& read);
  /// FNV-1a hash of the compute parameters every rank computes with (stage 3:
  /// of each unit as gathered). Collective at stage 3.
  uint64_t hash_compute_params();

  /// Test hook: the next grads_ready() puts +inf into its unit's first gradient.
  void inject_inf_once() { inject_inf_ = true; }
  /// Each wait on a gather or a reduce-scatter becomes a span in `sink` (null: none).
  void set_span_sink(SpanSink* sink) { sink_ = sink; }

  const ShardedConfig& config() const { return sc_; }

 private:
  struct Group {
    size_t lo, hi, c, off;  // flat range, per-rank slice, offset in the unit's rank block
  };
  struct Unit {
    size_t begin, end;
    std::vector<Group> groups;
    size_t block = 0;       // elements of one rank's block (sum of c)
    size_t shard_off = 0;   // offset of this unit's block in the shard
  };
  struct Slot;    // a gathered unit
  struct GSlot;   // a unit gradient buffer with its pending reduction
  static std::vector<Unit> make_units(const model::GPTConfig& cfg, const ShardedConfig& sc, size_t N);
  /// Widens flat elements [a, e) of unit u, read from src (element a first,
  /// compute dtype), into the unit's f32 copy unit_f32, except compute_only_.
  void widen(float* unit_f32, int u, const char* src, size_t a, size_t e) const;

  Slot& slot_for(int u);
  void fill(Slot& s, int u, bool async);
  void complete(Slot& s);
  void prefetch_after(int u);
  void launch_reduce(GSlot& g);
  void complete_reduce(GSlot& g);
  void pack_block(const void* src_full, DType t, int u, int q, void* dst, DType dt) const;
  void unpack_block(const void* block, DType t, int u, int q, void* dst_unit, DType dt) const;
  void gather_compute_full();
  /// out (num_params) = each owned segment's values from `src(segment)`,
  /// summed over the shard group (one owner per element: exact).
  template <typename Src>
  void assemble_owned(Src src, float* out);

  model::GPTConfig cfg_;
  ShardedConfig sc_;
  comm::Communicator& shard_;
  comm::Communicator* replicate_;
  size_t N_, r_, n_;
  std::vector<Unit> units_;
  std::vector<std::pair<size_t, size_t>> compute_only_;  // sorted flat ranges the f32 copies skip
  std::vector<Segment> owned_;
  size_t shard_elems_ = 0, state_elems_ = 0;
  size_t b_;   // bytes per compute element
  size_t gb_;  // bytes per gradient element
  Buffer compute_full_;    // stage 2: (Ψ) compute dtype
  Buffer compute_shard_;   // stage 3: (shard) compute dtype
  Buffer master_;          // half: (shard) f32
  Buffer grad_shard_;      // (shard) reduce dtype
  std::vector<std::unique_ptr<Slot>> slots_;   // [0] unit 0, [1], [2] the others
  std::vector<std::unique_ptr<GSlot>> gslots_; // [0] unit 0, [1], [2] the others
  Buffer block_staging_;   // stage 2: N x largest block, for the parameter all-gather
  size_t next_gslot_ = 1;
  int last_acquired_ = -1;
  bool in_backward_ = false;
  bool inject_inf_ = false;
  SharedBytes comm_bytes_;  // the gather and reduce buffers, shared with the shard group or not
  SpanSink* sink_ = nullptr;
  int64_t tick_ = 0;
};

}  // namespace braid::parallel
