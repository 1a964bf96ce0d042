#include "braid/parallel/context/ulysses_attention.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "braid/comm/communicator.h"
#include "braid/core/error.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/model/memory_plan.h"

namespace braid::parallel::context {

namespace k = braid::kernels;

namespace {


// The sizes of one exchange: B sequences, this rank's T of T_seq tokens, parts
// (q, k, v; or one) of widths[p] features each, every part split into N head
// groups of widths[p] / N.
struct Split {
  int64_t B, T, T_seq;
  int N;
  std::vector<int64_t> widths;
  int64_t row() const {  // features of a local token row
    int64_t w = 0;
    for (int64_t x : widths) w += x;
    return w;
  }
  int64_t group_row() const { return row() / N; }                        // of a token row of one head group
  size_t block() const { return size_t(B * T * group_row()); }            // elements to or from one rank
};

// Global position of local row t of rank `rank`'s layout.
int64_t position(const model::SequenceLayout& l, int64_t t) {
  for (const auto& sp : l.spans) {
    if (t < sp.count) return sp.first + t;
    t -= sp.count;
  }
  return -1;
}

// Calls f(local column, group column, n) for each part's columns of head group j.
template <typename F>
void for_group_columns(const Split& x, int j, F&& f) {
  int64_t local = 0, grouped = 0;
  for (int64_t w : x.widths) {
    const int64_t g = w / x.N;
    f(size_t(local + j * g), size_t(grouped), size_t(g));
    local += w, grouped += g;
  }
}

// Token split (B, T, row) -> head split (B, T_seq, row / N), this rank's head
// group, in position order. send and recv hold N blocks each.
void to_heads(comm::Communicator& cp, void* full, const void* local, void* send, void* recv, const Split& x, DType t) {
  const size_t esz = dtype_size(t), row = size_t(x.row()), grow = size_t(x.group_row());
  const char* src = static_cast<const char*>(local);
  char* s = static_cast<char*>(send);
  for (int j = 0; j < x.N; ++j)
    for (int64_t r = 0; r < x.B * x.T; ++r)
      for_group_columns(x, j, [&](size_t col, size_t gcol, size_t n) {
        std::memcpy(s + ((size_t(j) * size_t(x.B * x.T) + size_t(r)) * grow + gcol) * esz,
                    src + (size_t(r) * row + col) * esz, n * esz);
      });
  cp.all_to_all(send, recv, x.block(), t);
  const char* rv = static_cast<const char*>(recv);
  char* dst = static_cast<char*>(full);
  for (int i = 0; i < x.N; ++i) {
    const model::SequenceLayout l = chunk_layout(x.T_seq, x.N, i);
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t tt = 0; tt < x.T; ++tt)
        std::memcpy(dst + size_t(b * x.T_seq + position(l, tt)) * grow * esz,
                    rv + ((size_t(i) * size_t(x.B) + size_t(b)) * size_t(x.T) + size_t(tt)) * grow * esz,
                    grow * esz);
  }
}

// The inverse: head split (B, T_seq, row / N) -> token split (B, T, row).
void to_tokens(comm::Communicator& cp, void* local, const void* full, void* send, void* recv, const Split& x,
               DType t) {
  const size_t esz = dtype_size(t), row = size_t(x.row()), grow = size_t(x.group_row());
  const char* src = static_cast<const char*>(full);
  char* s = static_cast<char*>(send);
  for (int i = 0; i < x.N; ++i) {
    const model::SequenceLayout l = chunk_layout(x.T_seq, x.N, i);
    for (int64_t b = 0; b < x.B; ++b)
      for (int64_t tt = 0; tt < x.T; ++tt)
        std::memcpy(s + ((size_t(i) * size_t(x.B) + size_t(b)) * size_t(x.T) + size_t(tt)) * grow * esz,
                    src + size_t(b * x.T_seq + position(l, tt)) * grow * esz, grow * esz);
  }
  cp.all_to_all(send, recv, x.block(), t);
  const char* rv = static_cast<const char*>(recv);
  char* dst = static_cast<char*>(local);
  for (int j = 0; j < x.N; ++j)
    for (int64_t r = 0; r < x.B * x.T; ++r)
      for_group_columns(x, j, [&](size_t col, size_t gcol, size_t n) {
        std::memcpy(dst + (size_t(r) * row + col) * esz,
                    rv + ((size_t(j) * size_t(x.B * x.T) + size_t(r)) * grow + gcol) * esz, n * esz);
      });
}

// The q | k | v widths of s and the heads each rank attends.
std::vector<int64_t> qkv_widths(const RingShape& s) {
  const int64_t kv = s.kv_heads() * (s.C / s.NH);
  return {s.C, kv, kv};
}
k::AttentionHeads group_heads(const RingShape& s, int N) { return {s.NH / N, s.kv_heads() / N, s.C / s.NH}; }

void check_heads(const comm::Communicator& cp, const RingShape& s) {
  BRAID_CONFIG_CHECK(s.NH % cp.size() == 0 && s.kv_heads() % cp.size() == 0,
                     "--cp-comm a2a turns the sequence split into a head split: the ", s.NH, " query and ",
                     s.kv_heads(), " key/value heads of this rank (n_head, n_kv_head / TP) do not both divide over CP=",
                     cp.size(), "; use a CP degree that divides them, or --cp-comm ring");
  BRAID_CHECK(s.T * cp.size() == s.T_seq, "a2a attention: ", s.T, " tokens per rank x CP=", cp.size(),
              " is not the sequence's ", s.T_seq);
}

}  // namespace

size_t ulysses_attention_scratch_floats(const RingShape& s, int cp) {
  const size_t part = size_t(s.B * s.T * s.C), qkv = size_t(s.B * s.T * s.qkv_width());
  const k::AttentionHeads g{std::max<int64_t>(1, s.NH / cp), std::max<int64_t>(1, s.kv_heads() / cp), s.C / s.NH};
  const size_t exchange = 2 * qkv;  // send and recv of q | k | v in f32 at most
  const size_t forward = exchange + model::operand_floats(qkv, s.store) + part;
  const size_t backward = exchange + part + model::operand_floats(part, s.store) + qkv +
                          k::flash_attention_backward_scratch_floats(s.B, s.T_seq, g, s.store);
  return std::max(forward, backward);
}

void ulysses_attention_forward(comm::Communicator& cp, float* out, void* qkvr, float* lse, float* scratch,
                               const void* qkv, const RingShape& s) {
  check_heads(cp, s);
  const int N = cp.size();
  const size_t qkv_n = size_t(s.B * s.T * s.qkv_width());
  float* send = scratch;
  float* recv = send + qkv_n;
  void* qkv_full = recv + qkv_n;  // (B, T_seq, qkv_width / N) in store
  float* out_full = recv + qkv_n + model::operand_floats(qkv_n, s.store);
  to_heads(cp, qkv_full, qkv, send, recv, {s.B, s.T, s.T_seq, N, qkv_widths(s)}, s.store);
  k::flash_attention_forward(out_full, qkvr, lse, qkv_full, s.store, s.B, s.T_seq, group_heads(s, N), s.round);
  to_tokens(cp, out, out_full, send, recv, {s.B, s.T, s.T_seq, N, {s.C}}, DType::f32);
}

void ulysses_attention_backward(comm::Communicator& cp, float* dqkv, float* scratch, const float* dout,
                                const void* out, const void* qkvr, const float* lse, const RingShape& s) {
  check_heads(cp, s);
  const int N = cp.size();
  const size_t part = size_t(s.B * s.T * s.C), qkv_n = size_t(s.B * s.T * s.qkv_width());
  float* send = scratch;
  float* recv = send + qkv_n;
  float* dout_full = recv + qkv_n;                      // (B, T_seq, C / N) f32
  void* out_full = dout_full + part;                    // the same in store
  float* dqkv_full = dout_full + part + model::operand_floats(part, s.store);  // (B, T_seq, qkv_width / N) f32
  float* fscratch = dqkv_full + qkv_n;
  to_heads(cp, dout_full, dout, send, recv, {s.B, s.T, s.T_seq, N, {s.C}}, DType::f32);
  to_heads(cp, out_full, out, send, recv, {s.B, s.T, s.T_seq, N, {s.C}}, s.store);
  k::flash_attention_backward(dqkv_full, fscratch, dout_full, out_full, qkvr, lse, s.store, s.B, s.T_seq,
                              group_heads(s, N), s.round);
  to_tokens(cp, dqkv, dqkv_full, send, recv, {s.B, s.T, s.T_seq, N, qkv_widths(s)}, DType::f32);
}

}  // namespace braid::parallel::context
