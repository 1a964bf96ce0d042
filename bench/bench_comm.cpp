// `braid bench-comm`: collective bandwidth sweep in the style of nccl-tests. For each
// collective and message size it times our algorithms (ring / pairwise / tree over
// point-to-point) and the transport's own (MPI_Allreduce, ...) side by side and prints
// algbw and busbw (GB/s = 1e9 B/s).
//
// Definitions (nccl-tests doc/PERFORMANCE.md): size S bytes is the per-rank buffer of
// the collective (all-reduce: the buffer; all-gather: the gathered output; reduce-
// scatter: the input; all-to-all: the send buffer; broadcast: the buffer); time t is the
// median over iterations of the slowest rank; algbw = S / t; busbw = algbw * factor with
// factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all,
// and 1 for broadcast.
//
// "link" is no collective: local rank i of every node sends S bytes (in 1 MiB
// messages) to local rank i of the next node and receives S from the previous one,
// all ranks at once (the
// traffic of the hierarchical collectives' rails); busbw is then the bytes one node's
// uplink carries per second, algbw one rank's share. It measures the link between
// nodes as braid's ranks see it, busy ranks and all.
//
// Columns: "ours" runs our algorithms on private buffers (point-to-point messages);
// "zero-copy" runs them on buffers from Communicator::alloc_shared, where ranks on one
// node read each other's blocks directly; "native" is the transport's own collective on private buffers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/comm/communicator.h"
#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/core/memory.h"
#ifdef BRAID_WITH_MPI
#include "braid/comm/backends/mpi.h"
#endif

namespace braid::cli {
namespace {

using comm::Algorithm;
using comm::Communicator;

struct BenchCommArgs {
  size_t min_bytes = 4096;
  size_t max_bytes = size_t{64} << 20;
  size_t factor = 4;
  int iters = 20;
  int warmup = 5;
  std::string ops = "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast";
  std::string algos = "ring,native";
  bool zero_copy = true;
  std::string dtype = "f32";
  std::string json;
  int local_ranks = 0;
  int inject_failure_rank = -1;
};

const char* kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "link"};

double bus_factor(const std::string& op, int n, const comm::NodeMap& nodes) {
  if (op == "link") return nodes.min_local();
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// One column: an algorithm on private or shared buffers.
struct Variant {
  const char* key;  // JSON key and header
  Algorithm algo;
  bool shared;
};

struct Timing {
  double median_s = 0;
  double algbw = 0, busbw = 0;  // GB/s
};

// The copy ceiling of the collectives: every rank copies `bytes` from src to
// dst at the same time (a barrier before each copy), the median over `iters`
// of the slowest rank; returns GB/s per rank (bytes / t).
double memcpy_ceiling(Communicator& c, const void* src, void* dst, size_t bytes, int iters) {
  std::memcpy(dst, src, bytes);  // touched
  std::vector<float> t(static_cast<size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, bytes);
    t[static_cast<size_t>(i)] = std::chrono::duration<float>(std::chrono::steady_clock::now() - t0).count();
  }
  c.all_reduce(t.data(), t.data(), t.size(), DType::f32, comm::ReduceOp::max, Algorithm::ring);
  std::sort(t.begin(), t.end());
  return static_cast<double>(bytes) / t[t.size() / 2] / 1e9;
}

// The link op: `bytes` to `next` and from `prev` in 1 MiB messages, all posted at once
// (as the pipelined collectives stream their chunks), then waited for.
void stream_link(Communicator& c, const void* send, void* recv, size_t bytes, int next, int prev) {
  constexpr size_t kPiece = size_t{1} << 20;
  std::vector<comm::WorkPtr> works;
  for (size_t at = 0; at < bytes; at += kPiece)
    works.push_back(c.irecv(static_cast<std::byte*>(recv) + at, std::min(kPiece, bytes - at), prev, 7));
  for (size_t at = 0; at < bytes; at += kPiece)
    works.push_back(c.isend(static_cast<const std::byte*>(send) + at, std::min(kPiece, bytes - at), next, 7));
  for (auto& w : works) w->wait();
}

void run_bench(const BenchCommArgs& a, Communicator& c) {
  const int n = c.size(), r = c.rank();
  const DType dt = parse_dtype(a.dtype);
  const size_t esz = dtype_size(dt);
  const auto ops = split_list(a.ops);
  for (const auto& op : ops)
    BRAID_CONFIG_CHECK(std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps),
                       "--ops: unknown collective '", op,
                       "'; use all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, link");
  const comm::NodeMap& nodes = c.node_map();
  const bool wants_link = std::find(ops.begin(), ops.end(), "link") != ops.end();
  BRAID_CONFIG_CHECK(!wants_link || nodes.nodes() > 1, "--ops link times the link between nodes, but the ",
                     n, " ranks are all on one node (", nodes.describe(), "); start them on several hosts");
  // link: this rank's peers on the next and the previous node (none for an uneven
  // node's extra ranks, which wait).
  const int node = nodes.node_of(r), local = nodes.local_rank(r), k = nodes.nodes();
  const bool carries = local < nodes.min_local();
  const int next = carries ? nodes.members((node + 1) % k)[static_cast<size_t>(local)] : -1;
  const int prev = carries ? nodes.members((node + k - 1) % k)[static_cast<size_t>(local)] : -1;
  std::vector<Algorithm> algos;
  for (const auto& s : split_list(a.algos)) algos.push_back(comm::parse_algorithm(s));
  BRAID_CONFIG_CHECK(!algos.empty(), "--algos is empty; use ring, native or ring,native");
  const bool has_native = std::find(algos.begin(), algos.end(), Algorithm::native) != algos.end();
  BRAID_CONFIG_CHECK(a.min_bytes >= 1 && a.min_bytes <= a.max_bytes, "--min-bytes ", a.min_bytes,
                     " must be in [1, --max-bytes=", a.max_bytes, "]");
  BRAID_CONFIG_CHECK(a.factor >= 2, "--factor ", a.factor, " must be >= 2");
  BRAID_CONFIG_CHECK(a.iters >= 1 && a.warmup >= 0, "--iters ", a.iters, " must be >= 1 and --warmup ",
                     a.warmup, " >= 0");

  // Buffers sized once for the largest message and touched before timing.
  const size_t max_elems = a.max_bytes / esz + static_cast<size_t>(n);
  Buffer sbuf(max_elems * esz, MemCategory::comm), rbuf(max_elems * esz, MemCategory::comm);
  for (size_t i = 0; i < max_elems; ++i) store_from_f32(sbuf.data(), i, dt, 1.f);
  std::vector<Variant> variants;
  for (Algorithm al : algos) {
    if (al == Algorithm::ring) variants.push_back({"ours", al, false});
    if (al == Algorithm::ring && a.zero_copy) variants.push_back({"zero_copy", al, true});
    if (al == Algorithm::native) variants.push_back({"native", al, false});
  }
  comm::SharedBuffer ssh, rsh;
  if (a.zero_copy) {
    ssh = c.alloc_shared(max_elems * esz);
    rsh = c.alloc_shared(max_elems * esz);
    for (size_t i = 0; i < max_elems; ++i) store_from_f32(ssh.data(), i, dt, 1.f);
    std::memset(rsh.data(), 0, max_elems * esz);
  }

  const double copy_gbps = memcpy_ceiling(c, sbuf.data(), rbuf.data(), a.max_bytes, a.iters);
  if (r == 0) {
    std::printf("# braid bench-comm: %d ranks (%s backend), dtype %s, %d iters (+%d warm-up), "
                "median of the slowest rank; GB/s = 1e9 B/s\n",
                n, c.backend().c_str(), dtype_name(dt), a.iters, a.warmup);
    std::printf("# memcpy ceiling: %.3f GB/s per rank (%zu bytes, all ranks copying at once)\n", copy_gbps,
                a.max_bytes);
    if (a.zero_copy)
      std::printf("# zero-copy: shared buffers, %s\n",
                  ssh.zero_copy() ? "mapped by every rank"
                                  : "private (the ranks span nodes, or the shared-memory file system lacks room)");
    std::printf("# nodes: %s\n", nodes.describe().c_str());
    std::printf("%-15s %12s %11s", "collective", "bytes", "count");
    for (const Variant& v : variants) std::printf(" | %9s us %8s %8s", v.key, "algbw", "busbw");
    for (const Variant& v : variants)
      if (v.algo == Algorithm::ring && has_native) std::printf(" | %s/native", v.key);
    std::printf("\n");
    std::fflush(stdout);
  }

  nlohmann::json rows = nlohmann::json::array();
  int rows_done = 0;
  for (const auto& op : ops) {
    for (size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= a.factor) {
      // Elements per rank-block, so that the S-byte buffer divides evenly.
      size_t count;
      const bool whole = op == "all_reduce" || op == "broadcast" || op == "link";
      if (whole)
        count = std::max<size_t>(1, bytes / esz);
      else
        count = std::max<size_t>(1, bytes / (esz * n));
      const size_t size_bytes = whole ? count * esz : count * esz * n;

      auto run_once = [&](const Variant& v) {
        const Algorithm al = v.algo;
        void* s = v.shared ? ssh.data() : sbuf.data();
        void* d = v.shared ? rsh.data() : rbuf.data();
        if (op == "all_reduce") c.all_reduce(s, d, count, dt, comm::ReduceOp::sum, al);
        else if (op == "all_gather") c.all_gather(s, d, count, dt, al);
        else if (op == "reduce_scatter") c.reduce_scatter(s, d, count, dt, comm::ReduceOp::sum, al);
        else if (op == "all_to_all") c.all_to_all(s, d, count, dt, al);
        else if (op == "link") {
          if (carries) stream_link(c, s, d, count * esz, next, prev);
        }
        else c.broadcast(d, count, dt, 0, al);
      };

      std::vector<Timing> res;
      for (const Variant& v : variants) {
        for (int i = 0; i < a.warmup; ++i) run_once(v);
        std::vector<float> t(static_cast<size_t>(a.iters));
        for (int i = 0; i < a.iters; ++i) {
          c.barrier();
          auto t0 = std::chrono::steady_clock::now();
          run_once(v);
          auto t1 = std::chrono::steady_clock::now();
          t[i] = std::chrono::duration<float>(t1 - t0).count();
        }
        // Slowest rank per iteration, then the median over iterations.
        c.all_reduce(t.data(), t.data(), t.size(), DType::f32, comm::ReduceOp::max, Algorithm::ring);
        std::sort(t.begin(), t.end());
        Timing tm;
        tm.median_s = a.iters % 2 ? t[a.iters / 2] : 0.5 * (t[a.iters / 2 - 1] + t[a.iters / 2]);
        tm.algbw = size_bytes / tm.median_s / 1e9;
        tm.busbw = tm.algbw * bus_factor(op, n, nodes);
        res.push_back(tm);
      }
      if (r == 0) {
        std::printf("%-15s %12zu %11zu", op.c_str(), size_bytes, count);
        nlohmann::json row = {{"collective", op}, {"bytes", size_bytes}, {"count", count},
                              {"dtype", dtype_name(dt)}, {"ranks", n}, {"backend", c.backend()},
                              {"memcpy_GBps", copy_gbps}};
        for (size_t k = 0; k < variants.size(); ++k) {
          std::printf(" | %12.1f %8.3f %8.3f", res[k].median_s * 1e6, res[k].algbw, res[k].busbw);
          if (res[k].median_s > 0)
            row[variants[k].key] = {{"time_us", res[k].median_s * 1e6}, {"algbw_GBps", res[k].algbw},
                                    {"busbw_GBps", res[k].busbw}};
        }
        const Timing* native = nullptr;
        for (size_t k = 0; k < variants.size(); ++k)
          if (variants[k].algo == Algorithm::native) native = &res[k];
        for (size_t k = 0; k < variants.size() && native; ++k) {
          if (variants[k].algo != Algorithm::ring) continue;
          const double ratio = res[k].median_s > 0 ? res[k].busbw / native->busbw : 0.0;
          std::printf(" | %10.2fx", ratio);
          if (ratio > 0) row[std::string(variants[k].key) + "_over_native"] = ratio;
        }
        std::printf("\n");
        std::fflush(stdout);
        rows.push_back(row);
      }
      // Testing hook: fail one rank mid-sweep; the job must go down, not hang.
      if (++rows_done == 1 && r == a.inject_failure_rank)
        throw Error("injected failure on rank " + std::to_string(r));
      if (bytes > a.max_bytes / a.factor) break;  // next step would overflow max
    }
  }
  if (r == 0 && !a.json.empty()) {
    std::ofstream f(a.json);
    BRAID_CONFIG_CHECK(f.good(), "--json: cannot write '", a.json, "'");
    f << rows.dump(2) << "\n";
  }
}

}  // namespace

void add_bench_comm(CLI::App& app) {
  auto a = std::make_shared<BenchCommArgs>();
  auto* c = app.add_subcommand(
      "bench-comm",
      "Collective bandwidth sweep (nccl-tests algbw/busbw), ours vs MPI's own; run under mpirun");
  c->add_option("--min-bytes", a->min_bytes, "Smallest message, bytes")->capture_default_str();
  c->add_option("--max-bytes", a->max_bytes, "Largest message, bytes")->capture_default_str();
  c->add_option("--factor", a->factor, "Size step factor (2 or 4)")->capture_default_str();
  c->add_option("--iters", a->iters, "Timed iterations per size")->capture_default_str();
  c->add_option("--warmup", a->warmup, "Untimed iterations per size")->capture_default_str();
  c->add_option("--ops", a->ops,
                "Comma-separated collectives; link: local rank i of each node streams to its peer on the next node "
                "(the link between nodes as busy ranks see it)")
      ->capture_default_str();
  c->add_option("--algos", a->algos, "Comma-separated: ring (ours), native (MPI)")->capture_default_str();
  c->add_option("--dtype", a->dtype, "f32, bf16 or f16")->capture_default_str();
  c->add_option("--zero-copy", a->zero_copy,
                "Also time ours on shared buffers (memory every rank of the node maps), where ranks read and "
                "write each other's blocks instead of sending messages")
      ->capture_default_str();
  c->add_option("--json", a->json, "Write the rows to this JSON file");
  c->add_option("--local", a->local_ranks, "Run N ranks as threads (local backend) instead of MPI");
  c->add_option("--inject-failure-rank", a->inject_failure_rank,
                "Testing: this rank throws after the first row")
      ->group("");  // hidden
  c->callback([a] {
    if (a->local_ranks > 0) {
      comm::run_local(a->local_ranks, [&](Communicator& w) { run_bench(*a, w); });
      return;
    }
#ifdef BRAID_WITH_MPI
    comm::MpiRuntime mpi;
    auto world = mpi.world();
    g_abort_job_on_error = world->size() > 1;
    run_bench(*a, *world);
#else
    throw ConfigError("this braid was built without MPI; use --local N");
#endif
  });
}

}  // namespace braid::cli
