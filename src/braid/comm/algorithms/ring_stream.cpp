#include "braid/comm/algorithms/ring_stream.h"

#include <cstring>

#include "braid/comm/reduce.h"
#include "braid/core/error.h"

namespace braid::comm::algo::ring {

Stream reducing_stream(const Ring& R, int steps, ReduceOp op, const void* send) {
  const auto* in = static_cast<const std::byte*>(send);
  const int n = R.c.size();
  Stream S;
  S.steps = steps;
  S.rs_steps = n - 1;
  S.base = 1;
  S.op = op;
  S.final_divisor = op == ReduceOp::avg ? static_cast<float>(n) : 0.f;
  S.own = in;
  const size_t esz = R.esz;
  S.step0_src = [&R, in, esz](int j) { return in + R.off[j] * esz; };
  return S;
}

void run_stream(Ring& R, Workspace* ws, const RingOptions& o, const Stream& S) {
  const int tag = kCollectiveTag;
  const size_t esz = R.esz, C = R.C;
  auto send_seg = [&](int t) { return R.mod(R.r - S.base - t); };
  auto recv_seg = [&](int t) { return R.mod(R.r - S.base - 1 - t); };

  std::vector<std::vector<WorkPtr>> sends(S.steps);
  {
    int j = send_seg(0);
    const std::byte* p = S.step0_src(j);
    for (size_t i = 0; i < R.nchunks(j); ++i)
      sends[0].push_back(R.c.isend(p + i * C * esz, R.chunk_len(j, i) * esz, R.next, tag));
  }
  struct Unit {
    int t;
    size_t i;
  };
  std::vector<Unit> units;
  for (int t = 0; t < S.steps; ++t)
    for (size_t i = 0; i < R.nchunks(recv_seg(t)); ++i) units.push_back({t, i});

  const size_t depth = static_cast<size_t>(std::max(1, o.depth));
  std::byte* tmp = nullptr;
  if (S.rs_steps > 0 && !units.empty())
    tmp = static_cast<std::byte*>(ws->get(0, depth * std::min(C, R.len[0] + 1) * esz));
  const size_t tmp_stride = std::min(C, R.len[0] + 1) * esz;  // segment 0 is the longest

  std::vector<WorkPtr> rq(units.size());
  size_t posted = 0;
  // Posts receives in order while within `depth` of the unit being processed and free
  // of hazards (a receive into memory an earlier send still reads must wait for it).
  auto post_ahead = [&](size_t u) {
    while (posted < units.size() && posted < u + depth) {
      const Unit& x = units[posted];
      int j = recv_seg(x.t);
      size_t l = R.chunk_len(j, x.i);
      std::byte* target;
      if (x.t < S.rs_steps) {
        target = tmp + (posted % depth) * tmp_stride;
      } else {
        int hs = S.hazard_send_step_on_recv(x.t);
        if (hs >= 0) {
          if (sends[hs].size() <= x.i) break;  // that send is not even posted yet
          sends[hs][x.i]->wait();
        }
        target = S.dst(x.t, j) + x.i * C * esz;
      }
      rq[posted] = R.c.irecv(target, l * esz, R.prev, tag);
      ++posted;
    }
  };

  for (size_t u = 0; u < units.size(); ++u) {
    post_ahead(u);
    BRAID_CHECK(posted > u, "ring receive ", u, " could not be posted");
    rq[u]->wait();
    rq[u].reset();
    const Unit& x = units[u];
    int j = recv_seg(x.t);
    size_t l = R.chunk_len(j, x.i);
    std::byte* d = S.dst(x.t, j) + x.i * C * esz;
    if (x.t < S.rs_steps) {
      int hs = S.hazard_send_step_on_reduce(x.t);
      if (hs >= 0 && sends[hs].size() > x.i) sends[hs][x.i]->wait();
      float div = (x.t == S.rs_steps - 1) ? S.final_divisor : 0.f;
      reduce_elems(d, tmp + (u % depth) * tmp_stride, S.own + (R.off[j] + x.i * C) * esz, l, R.dt,
                   S.op, div);
    }
    post_ahead(u + 1);  // the tmp slot of u is free again
    if (x.t + 1 < S.steps) sends[x.t + 1].push_back(R.c.isend(d, l * esz, R.next, tag));
  }
  for (auto& step : sends)
    for (auto& w : step) w->wait();
}

bool trivial_reduction(Communicator& comm, const void* send, void* recv, size_t count, DType dtype) {
  if (count > 0 && comm.size() > 1) return false;
  if (count > 0 && send != recv) std::memcpy(recv, send, count * dtype_size(dtype));
  return true;
}

}  // namespace braid::comm::algo::ring
