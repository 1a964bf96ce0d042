#include "braid/parallel/context/ring_attention.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "braid/comm/communicator.h"
#include "braid/core/error.h"
#include "braid/core/span_sink.h"
#include "braid/kernels/cpu/attention_layout.h"
#include "braid/kernels/cpu/flash_attention.h"
#include "braid/model/memory_plan.h"

namespace braid::parallel::context {

namespace k = braid::kernels;
using k::detail::elem_at;

model::SequenceLayout chunk_layout(int64_t T_seq, int cp, int rank) {
  BRAID_CONFIG_CHECK(cp >= 1 && rank >= 0 && rank < cp, "context parallel: rank ", rank, " of CP=", cp);
  if (cp == 1) return {T_seq, {{0, T_seq}}};
  BRAID_CONFIG_CHECK(T_seq % (2 * cp) == 0, "context parallel: a sequence of ", T_seq,
                     " tokens does not split into 2 x CP = ", 2 * cp, " equal chunks; use a --seq-len that ",
                     2 * cp, " divides (for example ", (T_seq / (2 * cp) + 1) * 2 * cp, ")");
  const int64_t c = T_seq / (2 * cp);
  return {T_seq, {{rank * c, c}, {(2 * cp - 1 - rank) * c, c}}};
}

void keep_local_tokens(int32_t* x, int64_t B, const model::SequenceLayout& layout) {
  // Destinations never pass their sources (row b's tokens move to b * T <= b * T_seq).
  int32_t* dst = x;
  for (int64_t b = 0; b < B; ++b)
    for (const model::TokenSpan& sp : layout.spans) {
      std::memmove(dst, x + b * layout.T_seq + sp.first, size_t(sp.count) * sizeof(int32_t));
      dst += sp.count;
    }
}

namespace {

constexpr int kTagKv = 0x5201, kTagGradKv = 0x5202;


// The ring's neighbours and the owner of the block held at step s.
struct Ring {
  int rank, size;
  int next() const { return (rank + 1) % size; }
  int prev() const { return (rank + size - 1) % size; }
  int owner(int step) const { return (rank + size - step) % size; }
};

// Rows of one span (all spans of a layout have the same length) and the
// query tiles per span.
struct SpanTiles {
  int64_t len, per_span, jobs_per_head;
};
SpanTiles span_tiles(const model::SequenceLayout& l) {
  const int64_t len = l.spans.front().count, per = (len + k::kQueryTile - 1) / k::kQueryTile;
  return {len, per, per * int64_t(l.spans.size())};
}

// The sizes of a call: head size, the query part and one key/value part of
// the head-major tensors (elements), and the query heads per key/value head.
struct Parts {
  int64_t hs, q, kv, group;
  explicit Parts(const RingShape& s)
      : hs(s.C / s.NH), q(s.B * s.T * s.C), kv(s.B * s.T * s.kv_heads() * (s.C / s.NH)), group(s.NH / s.kv_heads()) {}
  // The first row of query head bh's key/value head (head-major rows of T).
  int64_t kv_head(int64_t bh, const RingShape& s) const { return (bh / s.NH) * s.kv_heads() + (bh % s.NH) / group; }
};

k::AttentionHeads heads_of(const RingShape& s) { return {s.NH, s.kv_heads(), s.C / s.NH}; }

// Folds the key/value block `kv` ([k | v], head-major over this rank's T rows,
// owned by the rank whose layout is `kl`) into the running state of every query.
void fold_block(const k::FlashState& st, const void* q, const void* kv, const model::SequenceLayout& ql,
                const model::SequenceLayout& kl, const RingShape& s) {
  const Parts p(s);
  const int64_t hs = p.hs, BH = s.B * s.NH, part = p.kv;
  const SpanTiles qt = span_tiles(ql), kt = span_tiles(kl);
#pragma omp parallel for schedule(dynamic)
  for (int64_t job = 0; job < BH * qt.jobs_per_head; ++job) {
    const int64_t bh = job / qt.jobs_per_head, j = job % qt.jobs_per_head;
    const int64_t span = j / qt.per_span, r0 = (j % qt.per_span) * k::kQueryTile;
    const int64_t row = span * qt.len + r0, nr = std::min(k::kQueryTile, qt.len - r0);
    const size_t qrow = size_t((bh * s.T + row) * hs);
    const k::FlashState rows{st.o + qrow, st.m + bh * s.T + row, st.l + bh * s.T + row};
    for (size_t ks = 0; ks < kl.spans.size(); ++ks) {
      const size_t krow = size_t((p.kv_head(bh, s) * s.T + int64_t(ks) * kt.len) * hs);
      k::flash_forward_block(rows, elem_at(q, qrow, s.store), elem_at(kv, krow, s.store),
                             elem_at(kv, size_t(part) + krow, s.store), s.store, s.round, nr, kt.len, hs,
                             ql.spans[size_t(span)].first + r0, kl.spans[ks].first);
    }
  }
}

// The backward of fold_block: dq (this rank's queries) and the block's dk, dv
// (f32, [dk | dv] head-major) accumulate; each key/value head with its group
// of query heads is one thread's serial work (in head order: deterministic).
void unfold_block(float* dq, float* dkv, const void* q, const void* kv, const void* dO, const float* lse,
                  const float* D, const model::SequenceLayout& ql, const model::SequenceLayout& kl,
                  const RingShape& s) {
  const Parts p(s);
  const int64_t hs = p.hs, part = p.kv;
  const int64_t qlen = ql.spans.front().count, klen = kl.spans.front().count;
#pragma omp parallel for schedule(dynamic)
  for (int64_t bg = 0; bg < s.B * s.kv_heads(); ++bg) {
    const int64_t bh0 = (bg / s.kv_heads()) * s.NH + (bg % s.kv_heads()) * p.group;  // the group's first query head
    for (int64_t bh = bh0; bh < bh0 + p.group; ++bh)
      for (size_t qs = 0; qs < ql.spans.size(); ++qs) {
        const int64_t qrow = bh * s.T + int64_t(qs) * qlen;
        for (size_t ks = 0; ks < kl.spans.size(); ++ks) {
          const int64_t krow = bg * s.T + int64_t(ks) * klen;
          k::flash_backward_block(dq + qrow * hs, dkv + krow * hs, dkv + part + krow * hs,
                                  elem_at(q, size_t(qrow * hs), s.store), elem_at(kv, size_t(krow * hs), s.store),
                                  elem_at(kv, size_t(part + krow * hs), s.store),
                                  elem_at(dO, size_t(qrow * hs), s.store), lse + qrow, D + qrow, s.store, s.round,
                                  qlen, klen, hs, ql.spans[qs].first, kl.spans[ks].first);
        }
      }
  }
}

// Posts the exchange of one block round the ring: send `cur` on, receive the
// previous rank's into `next`. Nothing at CP = 1 or after the last step. With
// a trace, each step's compute and the wait for its transfers after it are
// spans of the main lane ("ring fold 2", "ring wait 2"): a short wait is a
// transfer hidden behind the compute.
struct Exchange {
  Exchange(std::shared_ptr<SpanSink> s, const char* p) : sink(std::move(s)), pass(p) {}
  std::shared_ptr<SpanSink> sink;
  const char* pass;  // "ring forward" or "ring backward"
  comm::WorkPtr send, recv;
  size_t bytes = 0;
  double t0 = 0;
  void post(comm::Communicator& cp, const Ring& ring, const void* cur, void* next, size_t n, int tag) {
    recv = cp.irecv(next, n, ring.prev(), tag);
    send = cp.isend(cur, n, ring.next(), tag);
    bytes = n;
  }
  void start() { t0 = sink ? SpanSink::now_us() : 0; }
  // After step s's compute: waits for its transfers.
  void wait(int step) {
    const double t1 = sink ? SpanSink::now_us() : 0;
    if (send) send->wait();
    if (recv) recv->wait();
    if (sink) {
      const std::string s = std::to_string(step);
      sink->span(std::string(pass) + " fold " + s, "compute", "main", t0, t1);
      if (send) sink->span(std::string(pass) + " wait " + s, "comm", "main", t1, SpanSink::now_us(),
                           std::to_string(bytes) + " bytes each way");
    }
    send.reset(), recv.reset();
  }
};

void check_shape(const comm::Communicator& cp, const RingShape& s) {
  BRAID_CHECK(s.NH > 0 && s.C % s.NH == 0, "ring attention: C=", s.C, " not divisible by NH=", s.NH);
  BRAID_CHECK(s.kv_heads() > 0 && s.NH % s.kv_heads() == 0, "ring attention: ", s.NH,
              " query heads do not group over ", s.kv_heads(), " key/value heads");
  BRAID_CHECK(s.T * cp.size() == s.T_seq, "ring attention: ", s.T, " tokens per rank x CP=", cp.size(),
              " is not the sequence's ", s.T_seq);
}

}  // namespace

size_t ring_attention_scratch_floats(const RingShape& s) {
  const Parts p(s);
  const size_t q = size_t(p.q), kvp = size_t(p.kv), bht = size_t(s.B * s.NH * s.T);
  const size_t kv = model::operand_floats(2 * kvp, s.store);  // one travelling [k | v] block
  const size_t forward = q + 2 * bht + 2 * kv;
  // dq dk dv, two [k | v] blocks, two [dk | dv] gradients, dO in f32 and stored, D.
  const size_t backward = q + 2 * kvp + 2 * kv + 4 * kvp + q + model::operand_floats(q, s.store) + bht;
  return std::max(forward, backward);
}

void ring_attention_forward(comm::Communicator& cp, float* out, void* qkvr, float* lse, float* scratch,
                            const void* qkv, const RingShape& s) {
  check_shape(cp, s);
  k::detail::check_attention_dtypes(s.C, s.NH, s.store, s.round);
  const Ring ring{cp.rank(), cp.size()};
  const Parts p(s);
  const int64_t hs = p.hs, BH = s.B * s.NH;
  const size_t part = size_t(p.q), bht = size_t(BH * s.T), kv_bytes = 2 * size_t(p.kv) * dtype_size(s.store);
  k::permute_qkv(qkvr, qkv, dtype_size(s.store), s.B, s.T, heads_of(s), true);
  const k::FlashState st{scratch, scratch + part, scratch + part + bht};
  void* bufs[2] = {scratch + part + 2 * bht,
                   scratch + part + 2 * bht + model::operand_floats(2 * size_t(p.kv), s.store)};
  k::flash_state_init(st, int64_t(bht), hs);
  const model::SequenceLayout mine = chunk_layout(s.T_seq, ring.size, ring.rank);
  const void* cur = elem_at(qkvr, part, s.store);  // this rank's [k | v]
  Exchange ex{cp.span_sink(), "ring forward"};
  for (int step = 0; step < ring.size; ++step) {
    void* next = bufs[step % 2];
    ex.start();
    if (step + 1 < ring.size) ex.post(cp, ring, cur, next, kv_bytes, kTagKv);  // in flight while we compute
    fold_block(st, qkvr, cur, mine, chunk_layout(s.T_seq, ring.size, ring.owner(step)), s);
    ex.wait(step);
    cur = next;
  }
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < BH; ++bh) {
    const int64_t b = bh / s.NH, h = bh % s.NH;
    const k::FlashState rows{st.o + bh * s.T * hs, st.m + bh * s.T, st.l + bh * s.T};
    k::flash_state_finish(out + b * s.T * s.C + h * hs, s.C, lse + bh * s.T, rows, s.T, hs);
  }
}

void ring_attention_backward(comm::Communicator& cp, float* dqkv, float* scratch, const float* dout, const void* out,
                             const void* qkvr, const float* lse, const RingShape& s) {
  check_shape(cp, s);
  const Ring ring{cp.rank(), cp.size()};
  const Parts p(s);
  const size_t part = size_t(p.q), kvp = size_t(p.kv), kvf = model::operand_floats(2 * kvp, s.store);
  const size_t kv_bytes = 2 * kvp * dtype_size(s.store), grad_bytes = 2 * kvp * sizeof(float);
  float* dqkvr = scratch;  // [dq | dk | dv] head-major f32: the result
  float* const after = dqkvr + part + 2 * kvp;
  void* kv_bufs[2] = {after, after + kvf};
  float* grad_bufs[2] = {after + 2 * kvf, after + 2 * kvf + 2 * kvp};
  float* dy = after + 2 * kvf + 4 * kvp;
  void* dy_s = s.store == DType::f32 ? static_cast<void*>(dy) : static_cast<void*>(dy + part);
  float* D = dy + part + (s.store == DType::f32 ? 0 : model::operand_floats(part, s.store));
  k::detail::permute_heads(dy, dout, sizeof(float), s.B, s.T, s.C, s.NH, 1, true);
  k::detail::store_all(dy_s, dy, part, s.store, s.round);
  k::flash_attention_output_dot(D, dout, out, s.store, s.B, s.T, s.C, s.NH);
  std::fill(dqkvr, dqkvr + part, 0.0f);
  std::fill(grad_bufs[0], grad_bufs[0] + 2 * kvp, 0.0f);
  const model::SequenceLayout mine = chunk_layout(s.T_seq, ring.size, ring.rank);
  const void* cur = elem_at(qkvr, part, s.store);
  float* grad = grad_bufs[0];
  Exchange ex{cp.span_sink(), "ring backward"};
  for (int step = 0; step < ring.size; ++step) {
    void* next = kv_bufs[step % 2];
    ex.start();
    if (step + 1 < ring.size) ex.post(cp, ring, cur, next, kv_bytes, kTagKv);
    unfold_block(dqkvr, grad, qkvr, cur, dy_s, lse, D, mine, chunk_layout(s.T_seq, ring.size, ring.owner(step)), s);
    ex.wait(step);
    // The block's gradients go on with it; after the last step they go home.
    float* other = grad == grad_bufs[0] ? grad_bufs[1] : grad_bufs[0];
    if (ring.size > 1) cp.sendrecv(grad, grad_bytes, ring.next(), other, grad_bytes, ring.prev(), kTagGradKv);
    grad = ring.size > 1 ? other : grad;
    cur = next;
  }
  std::memcpy(dqkvr + part, grad, grad_bytes);
  k::permute_qkv(dqkv, dqkvr, sizeof(float), s.B, s.T, heads_of(s), false);
}

}  // namespace braid::parallel::context
