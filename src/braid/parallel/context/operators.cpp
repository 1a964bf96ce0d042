#include "braid/parallel/context/operators.h"

#include "braid/comm/communicator.h"
#include "braid/core/error.h"
#include "braid/parallel/context/ring_attention.h"
#include "braid/parallel/context/ulysses_attention.h"

namespace braid::parallel::context {

CpComm parse_cp_comm(const std::string& s) {
  if (s == "ring") return CpComm::ring;
  if (s == "a2a") return CpComm::a2a;
  throw ConfigError("--cp-comm '" + s + "': known ways are ring and a2a");
}

const char* cp_comm_name(CpComm c) { return c == CpComm::a2a ? "a2a" : "ring"; }

ContextParallelOperators::ContextParallelOperators(comm::Communicator* tp, bool sequence_parallel,
                                                   comm::Communicator* cp, CpComm how)
    : TensorParallelOperators(tp, sequence_parallel),
      cp_(cp),
      cp_size_(cp ? cp->size() : 1),
      cp_rank_(cp ? cp->rank() : 0),
      how_(how) {}

std::unique_ptr<model::Operators> make_operators(comm::Communicator* tp, bool sequence_parallel,
                                                 comm::Communicator* cp, CpComm how) {
  if (!cp || cp->size() == 1) return tensor::make_operators(tp, sequence_parallel);
  return std::make_unique<ContextParallelOperators>(tp, sequence_parallel, cp, how);
}

size_t ContextParallelOperators::attention_scratch_floats(int64_t B, int64_t T, int64_t Cl, int64_t NHl,
                                                          DType operands, int64_t NKVl) const {
  const RingShape s{B, T, Cl, NHl, operands, operands, T * cp_size_, NKVl};
  return how_ == CpComm::a2a ? ulysses_attention_scratch_floats(s, cp_size_) : ring_attention_scratch_floats(s);
}

void ContextParallelOperators::set_batch(int64_t B, int64_t T) {
  TensorParallelOperators::set_batch(B, T);
  seq_ = chunk_layout(T * cp_size_, cp_size_, cp_rank_);
}

void ContextParallelOperators::attention_forward(float* out, const model::AttentionSaved& saved,
                                                 const model::AttentionInputs& qkv, const model::AttentionShape& s) {
  const RingShape rs{s.B, s.T, s.heads * s.head_dim, s.heads, s.store, s.round, seq_.T_seq, s.kv()};
  if (how_ == CpComm::a2a)
    ulysses_attention_forward(*cp_, out, saved.heads, saved.lse, ws_.attention, packed_qkv(qkv, s), rs);
  else
    ring_attention_forward(*cp_, out, saved.heads, saved.lse, ws_.attention, packed_qkv(qkv, s), rs);
}

void ContextParallelOperators::attention_backward(const model::AttentionGrads& d, const float* dout,
                                                  const model::AttentionSaved& saved,
                                                  const model::AttentionShape& s) {
  const int64_t Cl = s.heads * s.head_dim, KVl = s.kv() * s.head_dim;
  BRAID_CHECK(d.ld == s.qkv_width() && d.dk == d.dq + Cl && d.dv == d.dq + Cl + KVl && saved.out,
              "context-parallel attention: writes dq, dk, dv packed as (B, T, ", Cl, " + 2 x ", KVl,
              ") and needs the forward's output");
  const RingShape rs{s.B, s.T, Cl, s.heads, s.store, s.round, seq_.T_seq, s.kv()};
  if (how_ == CpComm::a2a)
    ulysses_attention_backward(*cp_, d.dq, ws_.attention, dout, saved.out, saved.heads, saved.lse, rs);
  else
    ring_attention_backward(*cp_, d.dq, ws_.attention, dout, saved.out, saved.heads, saved.lse, rs);
}

}  // namespace braid::parallel::context
