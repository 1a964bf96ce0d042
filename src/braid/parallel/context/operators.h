// Context-parallel operators (the fourth strand: Megatron-Core's context
// parallelism, Liu et al. 2023's ring attention): the forms of
// model::Operators for a CP group, on top of the tensor-parallel ones. Each CP
// rank holds chunks r and 2 CP - 1 - r of every sequence (chunk_layout), so
// set_batch(B, T) takes T = T_seq / CP tokens per sequence; the base class
// then places the position embeddings and dropout masks at the tokens' global
// positions, and attention runs over the group (ring: key / value blocks round
// the group; a2a: an all-to-all to a head split, whole sequences, and back).
// Everything else is per token and needs no change. At CP = 1 every
// call is the tensor-parallel form's.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "braid/parallel/tensor/operators.h"

namespace braid::parallel::context {

/// How the CP group attends: `ring` (point-to-point blocks; Liu et al. 2023) or
/// `a2a` (all-to-all to a head split and back; Jacobs et al. 2023, Ulysses).
enum class CpComm { ring, a2a };
/// "ring" or "a2a" for --cp-comm; throws ConfigError on another name, listing the known ones.
CpComm parse_cp_comm(const std::string& s);
const char* cp_comm_name(CpComm c);

class ContextParallelOperators : public tensor::TensorParallelOperators {
 public:
  /// tp: the TP group (nullptr: TP = 1); cp: the CP group (nullptr: CP = 1).
  ContextParallelOperators(comm::Communicator* tp, bool sequence_parallel, comm::Communicator* cp, CpComm how);

  /// Ring and all-to-all attention run the fused kernel's blocks at any length.
  bool fused_attention(int64_t) const override { return true; }
  size_t attention_scratch_floats(int64_t B, int64_t T, int64_t Cl, int64_t NHl, DType operands,
                                  int64_t NKVl = 0) const override;
  /// Sets this rank's chunks of each sequence of T x CP tokens.
  void set_batch(int64_t B, int64_t T) override;
  /// Ring or all-to-all attention over the CP group (a collective: every CP rank calls it).
  void attention_forward(float* out, const model::AttentionSaved& saved, const model::AttentionInputs& qkv,
                         const model::AttentionShape& s) override;
  void attention_backward(const model::AttentionGrads& d, const float* dout, const model::AttentionSaved& saved,
                          const model::AttentionShape& s) override;

 private:
  comm::Communicator* cp_;
  int cp_size_, cp_rank_;
  CpComm how_;
};

/// The operators of a rank in TP group `tp` and CP group `cp` (either may be null).
std::unique_ptr<model::Operators> make_operators(comm::Communicator* tp, bool sequence_parallel,
                                                 comm::Communicator* cp, CpComm how);

}  // namespace braid::parallel::context
