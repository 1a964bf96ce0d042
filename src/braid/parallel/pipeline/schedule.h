// Pipeline schedules as data (docs/ARCHITECTURE.md): a builder returns each
// rank's list of actions, a checker verifies the tables alone (every action
// once, forward before backward, no deadlock) and measures the bubble by
// simulating the executor on them (check.h), and PipelineExecutor (executor.h)
// runs them. Activations move to the next virtual stage after a forward and
// gradients to the previous one after a backward (point-to-point, tagged by
// micro-batch and chunk; passed locally when both stages are on one rank), so
// the tables hold compute actions only and their order fixes the order of
// every send and receive.
//
// Virtual stages: with v model chunks per rank and P ranks there are Q = v*P
// virtual stages; each schedule places them (ScheduleDef::placement). The
// default is Megatron-LM's interleaved layout q = chunk*P + rank (rank s holds
// chunks s, s+P, s+2P, ... of the layer sequence); with v = 1 a virtual stage
// is a rank ("stage").
//
// Each schedule is one file under schedules/ that returns its ScheduleDef; the
// list of them is in registry.cpp (schedules()), built once and immutable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace braid::parallel {

/// backward: the full backward (input and weight gradients). The zero-bubble
/// split (Qi et al. 2024): backward_input ("B") computes the input gradient
/// only and sends it upstream; backward_weight ("W") computes the weight
/// gradient only and communicates nothing. A (chunk, micro-batch) runs either
/// backward or the pair backward_input then backward_weight.
enum class PipeOp : uint8_t { forward, backward, backward_input, backward_weight };

struct PipeAction {
  PipeOp op;
  int micro;
  int chunk = 0;  // model chunk on this rank, 0..v-1 (its virtual stage: the schedule's placement)
};
using StageProgram = std::vector<PipeAction>;

/// Gradient send buffers of the executor (a ring): the checker and the
/// interleaved builder verify the tables with this many.
constexpr int kGradSendBuffers = 2;

/// The modes of a run a schedule may refuse (see ScheduleDef::refuse).
struct ScheduleModes {
  std::string recompute = "none";  // --recompute
};

/// One pipeline schedule: everything braid needs to know about it.
struct ScheduleDef {
  const char* name;         // the --schedule value
  const char* description;  // one line, with its source
  /// Model chunks per rank: 1, a fixed count (e.g. 2 for a V-shape), or 0 when
  /// --virtual-stages chooses it (>= 2).
  int chunks = 1;
  /// Throws ConfigError naming the values and the fix for sizes the schedule
  /// refuses (P ranks, m micro-batches, v chunks per rank; P, m, v >= 1 and v
  /// matching `chunks` are checked before).
  void (*validate)(int P, int m, int v) = nullptr;
  /// "" or why the schedule cannot run with these modes, and the fix.
  std::string (*refuse)(const ScheduleModes& modes) = nullptr;
  /// Per-rank programs for P ranks, m micro-batches and v chunks (validated sizes).
  std::vector<StageProgram> (*build)(int P, int m, int v) = nullptr;
  /// Bubble fraction in theory with the unit costs (forward 1, backward 2,
  /// backward_input = backward_weight = 1), and the formula as text.
  double (*bubble)(int P, int m, int v) = nullptr;
  const char* bubble_text = "";
  /// "" when bubble(P, m, v) is what the schedule reaches with the unit costs,
  /// else the assumption of the formula that (P, m, v) breaks.
  std::string (*assumption)(int P, int m, int v) = nullptr;
  /// The virtual stage rank `rank`'s chunk `chunk` holds; null: q = chunk*P + rank.
  /// A rank's chunks must hold increasing virtual stages.
  int (*placement)(int rank, int chunk, int P, int v) = nullptr;
  /// The chunk counts `braid plan` tries for P ranks, m micro-batches and a
  /// model of L layers (empty: the planner does not search this schedule).
  std::vector<int> (*planner_chunks)(int P, int64_t m, int64_t L) = nullptr;
  /// Whether the composability matrix (tests/parallel/test_matrix.cpp)
  /// covers it (schedules that only reorder another's passes need not).
  bool in_matrix = true;
};

/// Every schedule, in the order the help, `braid schedule` and the planner
/// list them. Built once; immutable.
const std::vector<ScheduleDef>& schedules();
/// The schedule named `name`; throws ConfigError naming the choices.
const ScheduleDef& find_schedule(const std::string& name);
/// "naive, gpipe, ... or zb-h1": the names, for help texts and errors.
std::string schedule_names();
/// The chunks per rank `def` runs when --virtual-stages asks for `requested`:
/// a schedule with a fixed count takes it when none was asked for (1).
int schedule_chunks(const ScheduleDef& def, int requested);
/// "" or, for a schedule that keeps the matmul inputs for a deferred
/// backward_weight, its refusal of recomputation (zb-h1, zb-v).
std::string refuse_recompute_for_split_backward(const char* name, const ScheduleModes& modes);
/// Throws ConfigError for v != 1: `name` runs one model chunk per rank.
void require_one_chunk(const char* name, int v);
/// Appends stage s's 1F1B warm-up to p: the forwards of micro-batches
/// 0 .. min(P-1-s, m)-1 (P stages, m micro-batches). Returns their count.
int push_warmup_forwards(StageProgram& p, int P, int s, int m);

/// Which virtual stage each (rank, chunk) holds, and back.
class StageMap {
 public:
  /// Megatron-LM's interleaved placement q = chunk*P + rank.
  StageMap(int P, int v);
  /// The placement of `def` (its own, or the interleaved one). Throws
  /// braid::Error when it is not a one-to-one map with increasing stages per rank.
  StageMap(const ScheduleDef& def, int P, int v);
  int P() const { return P_; }
  int v() const { return v_; }
  int Q() const { return P_ * v_; }
  int stage(int rank, int chunk) const { return q_[static_cast<size_t>(rank * v_ + chunk)]; }
  int rank_of(int q) const { return rank_[static_cast<size_t>(q)]; }
  int chunk_of(int q) const { return chunk_[static_cast<size_t>(q)]; }

 private:
  int P_, v_;
  std::vector<int> q_, rank_, chunk_;
};

/// Per-rank programs of `def` for P ranks, m micro-batches and v chunks per
/// rank. Throws ConfigError naming the values and the fix for P < 1, m < 1,
/// v < 1, more than 10^7 actions, a v the schedule does not take, or sizes its
/// validate() refuses.
std::vector<StageProgram> build_schedule(const ScheduleDef& def, int P, int m, int v = 1);
std::vector<StageProgram> build_schedule(const std::string& name, int P, int m, int v = 1);

/// def.bubble(P, m, v), and def.assumption(P, m, v) ("" when exact).
double theoretical_bubble(const ScheduleDef& def, int P, int m, int v = 1);
std::string theory_assumption(const ScheduleDef& def, int P, int m, int v = 1);

}  // namespace braid::parallel
