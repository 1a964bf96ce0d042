#include "braid/parallel/context/ulysses_attention.h"

#include <algorithm>
#include <cstring>

#include "braid/comm/communicator.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/model/memory_plan.h"

namespace braid::parallel::context {

namespace k = braid::kernels;

namespace {


// The sizes of one exchange: B sequences, this rank's T of T_seq tokens, P
// parts (q, k, v: 3) of C features each, split into N head groups of C / N.
struct Split {
  int64_t B, T, T_seq, P, C;
  int N;
  int64_t group() const { return C / N; }
  size_t block() const { return size_t(B * T * P * group()); }  // elements to or from one rank
};

// Global position of local row t of rank `rank`'s layout.
int64_t position(const model::SequenceLayout& l, int64_t t) {
  for (const auto& sp : l.spans) {
    if (t < sp.count) return sp.first + t;
    t -= sp.count;
  }
  return -1;
}

// Token split (B, T, P C) -> head split (B, T_seq, P C / N), this rank's head
// group, in position order. send and recv hold N blocks each.
void to_heads(comm::Communicator& cp, void* full, const void* local, void* send, void* recv, const Split& x, DType t) {
  const size_t esz = dtype_size(t), g = size_t(x.group()), P = size_t(x.P);
  const char* src = static_cast<const char*>(local);
  char* s = static_cast<char*>(send);
  for (int j = 0; j < x.N; ++j)
    for (int64_t r = 0; r < x.B * x.T; ++r)
      for (size_t p = 0; p < P; ++p)
        std::memcpy(s + ((size_t(j) * size_t(x.B * x.T) + size_t(r)) * P * g + p * g) * esz,
                    src + (size_t(r) * P * size_t(x.C) + p * size_t(x.C) + size_t(j) * g) * esz, g * esz);
  cp.all_to_all(send, recv, x.block(), t);
  const char* rv = static_cast<const char*>(recv);
  char* dst = static_cast<char*>(full);
  for (int i = 0; i < x.N; ++i) {
    const model::SequenceLayout l = chunk_layout(x.T_seq, x.N, i);
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t tt = 0; tt < x.T; ++tt)
        std::memcpy(dst + size_t(b * x.T_seq + position(l, tt)) * P * g * esz,
                    rv + ((size_t(i) * size_t(x.B) + size_t(b)) * size_t(x.T) + size_t(tt)) * P * g * esz,
                    P * g * esz);
  }
}

// The inverse: head split (B, T_seq, P C / N) -> token split (B, T, P C).
void to_tokens(comm::Communicator& cp, void* local, const void* full, void* send, void* recv, const Split& x,
               DType t) {
  const size_t esz = dtype_size(t), g = size_t(x.group()), P = size_t(x.P);
  const char* src = static_cast<const char*>(full);
  char* s = static_cast<char*>(send);
  for (int i = 0; i < x.N; ++i) {
    const model::SequenceLayout l = chunk_layout(x.T_seq, x.N, i);
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t tt = 0; tt < x.T; ++tt)
        std::memcpy(s + ((size_t(i) * size_t(x.B) + size_t(b)) * size_t(x.T) + size_t(tt)) * P * g * esz,
                    src + size_t(b * x.T_seq + position(l, tt)) * P * g * esz, P * g * esz);
  }
  cp.all_to_all(send, recv, x.block(), t);
  const char* rv = static_cast<const char*>(recv);
  char* dst = static_cast<char*>(local);
  for (int j = 0; j < x.N; ++j)
    for (int64_t r = 0; r < x.B * x.T; ++r)
      for (size_t p = 0; p < P; ++p)
        std::memcpy(dst + (size_t(r) * P * size_t(x.C) + p * size_t(x.C) + size_t(j) * g) * esz,
                    rv + ((size_t(j) * size_t(x.B * x.T) + size_t(r)) * P * g + p * g) * esz, g * esz);
}

void check_heads(const comm::Communicator& cp, const RingShape& s) {
  BRAID_CONFIG_CHECK(s.NH % cp.size() == 0, "--cp-comm a2a turns the sequence split into a head split: the ",
                     s.NH, " heads of this rank (n_head / TP) do not divide over CP=", cp.size(),
                     "; use a CP degree that divides them, or --cp-comm ring");
  BRAID_CHECK(s.T * cp.size() == s.T_seq, "a2a attention: ", s.T, " tokens per rank x CP=", cp.size(),
              " is not the sequence's ", s.T_seq);
}

}  // namespace

size_t ulysses_attention_scratch_floats(const RingShape& s, int cp) {
  const size_t part = size_t(s.B * s.T * s.C);
  const int64_t Cg = s.C / cp, NHg = std::max<int64_t>(1, s.NH / cp);
  const size_t exchange = 2 * 3 * part;  // send and recv, 3 parts in f32 at most
  const size_t forward = exchange + model::operand_floats(3 * part, s.store) + part;
  const size_t backward = exchange + part + model::operand_floats(part, s.store) + 3 * part +
                          k::flash_attention_backward_scratch_floats(s.B, s.T_seq, Cg, NHg, s.store);
  return std::max(forward, backward);
}

void ulysses_attention_forward(comm::Communicator& cp, float* out, void* qkvr, float* lse, float* scratch,
                               const void* qkv, const RingShape& s) {
  check_heads(cp, s);
  const int N = cp.size();
  const size_t part = size_t(s.B * s.T * s.C);
  float* send = scratch;
  float* recv = send + 3 * part;
  void* qkv_full = recv + 3 * part;  // (B, T_seq, 3 C / N) in store
  float* out_full = recv + 3 * part + model::operand_floats(3 * part, s.store);
  to_heads(cp, qkv_full, qkv, send, recv, {s.B, s.T, s.T_seq, 3, s.C, N}, s.store);
  k::flash_attention_forward(out_full, qkvr, lse, qkv_full, s.store, s.B, s.T_seq, s.C / N, s.NH / N, s.round);
  to_tokens(cp, out, out_full, send, recv, {s.B, s.T, s.T_seq, 1, s.C, N}, DType::f32);
}

void ulysses_attention_backward(comm::Communicator& cp, float* dqkv, float* scratch, const float* dout,
                                const void* out, const void* qkvr, const float* lse, const RingShape& s) {
  check_heads(cp, s);
  const int N = cp.size();
  const size_t part = size_t(s.B * s.T * s.C);
  float* send = scratch;
  float* recv = send + 3 * part;
  float* dout_full = recv + 3 * part;                   // (B, T_seq, C / N) f32
  void* out_full = dout_full + part;                    // the same in store
  float* dqkv_full = dout_full + part + model::operand_floats(part, s.store);  // (B, T_seq, 3 C / N) f32
  float* fscratch = dqkv_full + 3 * part;
  to_heads(cp, dout_full, dout, send, recv, {s.B, s.T, s.T_seq, 1, s.C, N}, DType::f32);
  to_heads(cp, out_full, out, send, recv, {s.B, s.T, s.T_seq, 1, s.C, N}, s.store);
  k::flash_attention_backward(dqkv_full, fscratch, dout_full, out_full, qkvr, lse, s.store, s.B, s.T_seq, s.C / N,
                              s.NH / N, s.round);
  to_tokens(cp, dqkv, dqkv_full, send, recv, {s.B, s.T, s.T_seq, 3, s.C, N}, DType::f32);
}

}  // namespace braid::parallel::context
