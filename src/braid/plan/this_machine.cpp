#include "braid/plan/this_machine.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "braid/comm/backends/local.h"
#include "braid/core/error.h"
#include "braid/core/host_memory.h"
#include "braid/core/rng.h"
#include "braid/core/span_sink.h"
#include "braid/core/stopwatch.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/adamw.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/model/gpt.h"
#include "braid/plan/cost_model.h"
#include "braid/kernels/cpu/probes.h"

namespace braid::plan {

namespace {

using Clock = SteadyClock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Bytes/s braid's optimizer streams at, as the cost model counts its bytes
// (optimizer_bytes_per_element per f32 element): the gradient norm's pass and AdamW as the
// clipped step runs it (adamw_update_mixed), over 16 Mi elements, best of a few.
double optimizer_bandwidth() {
  const size_t n = size_t{16} << 20;
  std::vector<float> p(n, 1.f), g(n, 1e-3f), m(n, 0.f), v(n, 0.f);
  double best = 1e30;
  for (int t = 1; t <= 4; ++t) {
    const auto t0 = Clock::now();
    kernels::grad_sumsq(g.data(), DType::f32, n, 1.f);
    kernels::adamw_update_mixed(p.data(), g.data(), DType::f32, 0.5f, m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f,
                                1e-8f, 0.1f, t);
    best = std::min(best, seconds_since(t0));
  }
  return optimizer_bytes_per_element(DType::f32, DType::f32) * static_cast<double>(n) / best;
}

// Seconds per span name, summed.
class SpanTotals : public SpanSink {
 public:
  void span(std::string name, const char*, const std::string&, double t0_us, double t1_us, std::string) override {
    std::lock_guard<std::mutex> lock(mu_);
    seconds_[name] += (t1_us - t0_us) * 1e-6;
  }
  double take(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    const double s = seconds_[name];
    seconds_.clear();
    return s;
  }

 private:
  std::mutex mu_;
  std::map<std::string, double> seconds_;
};

// The shape the matmul fractions are fitted at: a block of gpt2's width with 512
// tokens per micro-batch, between what `small` (1,024) and `gpt2` runs here
// (256) use.
constexpr int64_t kFitB = 4, kFitT = 128, kFitC = 768, kFitHeads = 12;

// One rank's figures, measured while every other rank of the node measures its own.
struct RankRates {
  double ceiling = 0;              // FLOP/s, the median probe
  double optimizer_bandwidth = 0;  // bytes/s
  double forward_fraction = 0, backward_fraction = 0;
  double bf16_ratio = 1, fp16_ratio = 1;  // half-precision matmul ceiling / f32's, same shape
};

// The matmul ceiling now in `t`: one short probe at a large GPT-2 shape.
double ceiling_probe(DType t = DType::f32) { return kernels::measure_matmul_ceiling(1024, 768, 3072, t, 1, 0.05).flops; }

// A half-precision run's matmul ceiling over f32's (the median of 3 alternated
// pairs of probes); 1 where oneDNN has no matmul for `t` here, since braid then
// multiplies in f32 (kernels::gemm_typed widens the operands).
double half_ratio(DType t) {
  if (!kernels::half_matmul_supported(t)) return 1.0;
  std::vector<double> r;
  for (int i = 0; i < 3; ++i) r.push_back(ceiling_probe(t) / ceiling_probe());
  return median(r);
}

// The share of the ceiling a block's matmuls reach, such that the cost model's
// block (block_forward_work: its FLOPs at that share plus its element-wise bytes
// at `bandwidth`) takes `seconds`.
double fitted_fraction(double flops, double bytes, double seconds, double bandwidth, double ceiling) {
  const double matmul_s = std::max(seconds - bytes / bandwidth, 0.5 * seconds);
  return flops / (ceiling * matmul_s);
}

// Block 0's forward and backward in a 2-block f32 GPT of a small vocabulary at
// the fit shape, each step after a warm-up beside a ceiling probe: the fractions
// are the medians of the per-step ratios, so that a neighbour's burst of load
// slows the probe and the block alike.
RankRates measure_rank() {
  RankRates r;
  r.optimizer_bandwidth = optimizer_bandwidth();
  model::GPTConfig cfg = model::GPTConfig::preset("small");
  cfg.name = "fit";
  cfg.n_layer = 2, cfg.n_embd = kFitC, cfg.n_head = kFitHeads, cfg.block_size = kFitT;
  cfg.vocab_size = cfg.padded_vocab_size = 256;
  model::GPT gpt(cfg, kFitB, kFitT);
  gpt.init_weights(1);
  std::vector<int32_t> tokens(static_cast<size_t>(kFitB * kFitT)), targets(tokens.size());
  Rng rng(3);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(rng.below(256)), targets[i] = static_cast<int32_t>(rng.below(256));
  SpanTotals spans;
  gpt.set_span_sink(&spans);
  const BlockWork w = block_forward_work(kFitB, kFitT, kFitC, kFitHeads, 1, 4, false, false);
  std::vector<double> f, b, ceilings;
  for (int rep = 0; rep < 8; ++rep) {
    const double ceiling = ceiling_probe();
    gpt.zero_grad();
    gpt.forward(tokens.data(), targets.data(), kFitB, kFitT);
    const double fwd = spans.take("forward block 0");
    gpt.backward(1.0f);
    const double bwd = spans.take("backward block 0");
    if (rep == 0) continue;  // warm-up
    ceilings.push_back(ceiling);
    f.push_back(fitted_fraction(w.flops, w.bytes, fwd, r.optimizer_bandwidth, ceiling));
    b.push_back(fitted_fraction(2 * w.flops, 2 * w.bytes, bwd, r.optimizer_bandwidth, ceiling));
  }
  r.ceiling = median(ceilings);
  r.forward_fraction = median(f), r.backward_fraction = median(b);
  r.bf16_ratio = half_ratio(DType::bf16), r.fp16_ratio = half_ratio(DType::f16);
  return r;
}

// Seconds of braid's ring all-reduce of `bytes` (f32 sum) over `c`, the best of
// a few after a warm-up, and the same figure on every rank (the slowest rank's).
double all_reduce_seconds(comm::Communicator& c, std::vector<float>& buf, size_t bytes) {
  const size_t count = bytes / sizeof(float);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    c.all_reduce(buf.data(), buf.data(), count, DType::f32, comm::ReduceOp::sum);
    if (r > 0) best = std::min(best, seconds_since(t0));
  }
  float t = static_cast<float>(best);
  c.all_reduce(&t, &t, 1, DType::f32, comm::ReduceOp::max);
  return t;
}

// alpha-beta of the link from braid's ring all-reduce over all of `c` (p ranks)
// at 64 KiB to 64 MiB: its time is 2(p-1)(alpha + n/(p beta)), a line in n. The fit takes in what a collective costs beyond the wire:
// the copies through shared memory and the reduction's arithmetic.
Link fit_all_reduce_link(comm::Communicator& c) {
  std::vector<float> buf(size_t{16} << 20, 1.f);
  std::vector<double> n, t;
  for (size_t bytes = size_t{64} << 10; bytes <= buf.size() * sizeof(float); bytes *= 4) {
    n.push_back(static_cast<double>(bytes));
    t.push_back(all_reduce_seconds(c, buf, bytes));
  }
  // Least squares in relative error (weights 1/t^2), so that the small
  // messages' latency counts as much as the large ones' bandwidth.
  double sw = 0, sn = 0, st = 0, snn = 0, snt = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const double w = 1.0 / (t[i] * t[i]);
    sw += w, sn += w * n[i], st += w * t[i], snn += w * n[i] * n[i], snt += w * n[i] * t[i];
  }
  const double slope = std::max((sw * snt - sn * st) / (sw * snn - sn * sn), 1e-15);
  const double intercept = (st - slope * sn) / sw;
  const double p = c.size(), steps = 2 * (p - 1);
  // A fit whose line passes under zero (the large messages slower per byte than
  // the small ones) takes the smallest message's excess over the line instead.
  const double alpha = std::max(intercept, t.front() - slope * n.front()) / steps;
  return {steps / (p * slope), std::max(alpha, 1e-7)};
}

// The node's figures: the mean of every rank's.
RankRates combine(const std::vector<RankRates>& all) {
  RankRates m;
  const double n = static_cast<double>(all.size());
  for (const RankRates& r : all) {
    m.ceiling += r.ceiling / n;
    m.optimizer_bandwidth += r.optimizer_bandwidth / n;
    m.forward_fraction += r.forward_fraction / n, m.backward_fraction += r.backward_fraction / n;
    m.bf16_ratio += (r.bf16_ratio - 1) / n, m.fp16_ratio += (r.fp16_ratio - 1) / n;
  }
  return m;
}

// Every rank's figures of `world` (as f32), in rank order.
std::vector<RankRates> gather_rates(comm::Communicator& world, const RankRates& mine) {
  constexpr size_t k = 6;
  const float v[k] = {static_cast<float>(mine.ceiling),          static_cast<float>(mine.optimizer_bandwidth),
                      static_cast<float>(mine.forward_fraction), static_cast<float>(mine.backward_fraction),
                      static_cast<float>(mine.bf16_ratio),       static_cast<float>(mine.fp16_ratio)};
  std::vector<float> all(k * static_cast<size_t>(world.size()));
  world.all_gather(v, all.data(), k, DType::f32);
  std::vector<RankRates> out;
  for (size_t r = 0; r < static_cast<size_t>(world.size()); ++r) {
    const float* a = all.data() + k * r;
    out.push_back({a[0], a[1], a[2], a[3], a[4], a[5]});
  }
  return out;
}

}  // namespace

Cluster measure_this_machine(comm::Communicator* world) {
  Cluster c;
  c.name = "this-machine";
  const int threads = std::max(1, omp_threads());
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  c.accelerators_per_node = std::max(1, cores / threads);
  // The memory the host has free now, shared by the node's ranks.
  c.memory_bytes = static_cast<double>(host_memory_available().value_or(uint64_t{1} << 30)) / c.accelerators_per_node;
  // Every rank of the node at work at once: ranks on one host share its memory,
  // caches and clocks, so a rank is slower beside busy neighbours than alone,
  // and a layout that fills the node sees these rates.
  RankRates m;
  if (world && world->size() > 1) {
    world->barrier();
    m = combine(gather_rates(*world, measure_rank()));
    c.intra_node = fit_all_reduce_link(*world);
  } else {
    comm::run_local(c.accelerators_per_node, [&](comm::Communicator& w) {
      const RankRates all = combine(gather_rates(w, measure_rank()));
      if (w.rank() == 0) m = all;
    });
    comm::run_local(std::max(2, c.accelerators_per_node), [&](comm::Communicator& w) {
      const Link l = fit_all_reduce_link(w);
      if (w.rank() == 0) c.intra_node = l;
    });
  }
  c.peak_fp32 = m.ceiling;
  c.peak_bf16 = m.ceiling * m.bf16_ratio;
  c.peak_fp16 = m.ceiling * m.fp16_ratio;
  c.memory_bandwidth = m.optimizer_bandwidth;
  c.matmul_fraction = std::clamp(m.forward_fraction, 0.01, 1.0);
  c.backward_matmul_fraction = std::clamp(m.backward_fraction, 0.01, 1.0);
  c.inter_node = c.intra_node;
  c.links_per_node = c.accelerators_per_node;
  c.comm_overlaps_compute = false;  // braid's progress threads run on the ranks' cores
  return c;
}

}  // namespace braid::plan
