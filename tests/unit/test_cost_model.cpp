// braid plan's cost model: the alpha-beta pieces against their closed forms, the
// cluster files, and the step-time model against the published Megatron-LM
// weak-scaling table (its matmul fraction fitted on the first row only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "braid/core/error.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/plan/cluster.h"
#include "braid/plan/cost_model.h"
#include "braid/plan/search.h"

namespace braid::plan {
namespace {

TEST(CostModel, CollectivesFollowTheirClosedForms) {
  const Link l{10e9, 5e-6};
  const double n = 64e6;
  for (int p : {2, 3, 8, 64}) {
    EXPECT_DOUBLE_EQ(ring_all_reduce(n, p, l), 2.0 * (p - 1) * (5e-6 + n / (p * 10e9)));
    EXPECT_DOUBLE_EQ(ring_all_gather(n, p, l), (p - 1) * (5e-6 + n / (p * 10e9)));
  }
  EXPECT_DOUBLE_EQ(doubling_all_reduce(n, 8, l), 3 * (5e-6 + n / 10e9));
  EXPECT_EQ(ring_all_reduce(n, 1, l), 0.0);
}

TEST(CostModel, GroupsArePlacedOnNodes) {
  const Placement tp = place(8, 1, 8);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.per_node, 8);
  const Placement dp = place(32, 8, 8);  // TP 8: one DP member per node
  EXPECT_EQ(dp.nodes, 32);
  EXPECT_EQ(dp.per_node, 1);
  const Placement dp2 = place(16, 2, 8);  // TP 2: four DP members per node
  EXPECT_EQ(dp2.nodes, 4);
  EXPECT_EQ(dp2.per_node, 4);
}

TEST(CostModel, HierarchicalAllReduceSharesTheNodesLinks) {
  const Cluster c = load_cluster("a100-80gb");
  const double n = 1e9;
  const Link inter = c.inter_node_per_accelerator();
  EXPECT_DOUBLE_EQ(inter.bandwidth, 25e9);  // 8 links for 8 GPUs
  // One member per node: a ring over the inter-node links.
  EXPECT_DOUBLE_EQ(all_reduce(n, place(4, 8, 8), c), ring_all_reduce(n, 4, inter));
  // Inside a node: a ring over NVLink.
  EXPECT_DOUBLE_EQ(all_reduce(n, place(8, 1, 8), c), ring_all_reduce(n, 8, c.intra_node));
  // Four per node on 4 nodes: reduce-scatter and all-gather inside, n/4 across.
  EXPECT_DOUBLE_EQ(all_reduce(n, place(16, 2, 8), c),
                   2 * ring_all_gather(n, 4, c.intra_node) + ring_all_reduce(n / 4, 4, inter));
}

TEST(CostModel, ClusterFilesAreCheckedFieldByField) {
  for (const std::string& name : cluster_presets()) {
    std::istringstream in(cluster_preset_text(name));
    const Cluster c = parse_cluster(in, name);
    EXPECT_EQ(c.name, name);
    EXPECT_EQ(c.accelerators_per_node, 8);
    EXPECT_GT(c.peak_bf16, c.peak_fp32);
  }
  const Cluster a = load_cluster("a100-80gb");
  EXPECT_DOUBLE_EQ(a.peak_bf16, 312e12);
  EXPECT_DOUBLE_EQ(a.intra_node.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(a.memory_bandwidth, 2039e9);
  auto error = [](std::string text) {
    std::istringstream in(text);
    try {
      parse_cluster(in, "x.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string good = cluster_preset_text("a100-80gb");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  EXPECT_NE(error(replace("matmul_fraction = 0.634", "matmul_fraction = 1.5")).find("matmul_fraction"),
            std::string::npos);
  EXPECT_NE(error(replace("links_per_node = 8", "links = 8")).find("has no 'inter_node.links_per_node'"),
            std::string::npos);
  EXPECT_NE(error("extra = 3\n" + good).find("unknown field 'extra'"), std::string::npos);
  EXPECT_NE(error(replace("bf16 = 312", "bf16 = fast")).find("peak_tflops.bf16"), std::string::npos);
  EXPECT_THROW(load_cluster("no-such-cluster"), ConfigError);
}

TEST(CostModel, ThisMachineIsMeasuredAndWritesAClusterFile) {
  const Cluster m = load_cluster("this-machine");
  EXPECT_EQ(m.name, "this-machine");
  EXPECT_GT(m.peak_fp32, 1e9);  // any CPU of this decade
  // bf16 / fp16: oneDNN's half-precision ceiling here, or f32's where it has none.
  EXPECT_GT(m.peak_bf16, 0.0);
  EXPECT_EQ(m.peak_bf16 == m.peak_fp32, !braid::kernels::half_matmul_supported(braid::DType::bf16));
  EXPECT_EQ(m.peak_fp16 == m.peak_fp32, !braid::kernels::half_matmul_supported(braid::DType::f16));
  EXPECT_GT(m.memory_bandwidth, 1e8);
  EXPECT_GT(m.intra_node.bandwidth, 1e7);
  EXPECT_GT(m.memory_bytes, 0);
  // Fitted to braid's own block: a share of the ceiling, never above it.
  EXPECT_GT(m.matmul_fraction, 0.0);
  EXPECT_LE(m.matmul_fraction, 1.0);
  EXPECT_GT(m.backward_matmul_fraction, 0.0);
  EXPECT_LE(m.backward_matmul_fraction, 1.0);
  EXPECT_FALSE(m.comm_overlaps_compute);  // the progress threads share the cores
  std::istringstream in(format_cluster(m));
  const Cluster back = parse_cluster(in, "measured");
  EXPECT_NEAR(back.peak_fp32 / m.peak_fp32, 1.0, 1e-5);
  EXPECT_NEAR(back.intra_node.latency / m.intra_node.latency, 1.0, 1e-5);
  EXPECT_NEAR(back.backward_matmul_fraction / m.backward_matmul_fraction, 1.0, 1e-5);
  EXPECT_EQ(back.comm_overlaps_compute, m.comm_overlaps_compute);
  EXPECT_EQ(back.accelerators_per_node, m.accelerators_per_node);
}

// A cluster file with a line changed: `key = value` replaced, or added after
// kernel_overhead_us when the file has no such key.
Cluster with_line(const std::string& preset, const std::string& key, const std::string& value) {
  std::istringstream in(cluster_preset_text(preset));
  std::string text, line;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.rfind(key + " ", 0) == 0) line = key + " = " + value, found = true;
    text += line + "\n";
    if (!found && line.rfind("kernel_overhead_us", 0) == 0) text += key + " = " + value + "\n", found = true;
  }
  std::istringstream file(text);
  return parse_cluster(file, "edited");
}

TEST(CostModel, OptionalClusterFieldsDefaultAndParse) {
  const Cluster a = load_cluster("a100-80gb");
  EXPECT_EQ(a.backward_matmul_fraction, a.matmul_fraction);  // absent: backward as fast as forward
  EXPECT_TRUE(a.comm_overlaps_compute);
  EXPECT_EQ(with_line("a100-80gb", "backward_matmul_fraction", "0.5").backward_matmul_fraction, 0.5);
  EXPECT_FALSE(with_line("a100-80gb", "comm_overlaps_compute", "false").comm_overlaps_compute);
  EXPECT_THROW(with_line("a100-80gb", "comm_overlaps_compute", "sometimes"), ConfigError);
  EXPECT_THROW(with_line("a100-80gb", "backward_matmul_fraction", "1.5"), ConfigError);
}

// gpt2 at sequence 1024 with micro-batches of 8.
parallel::LayoutOptions gpt2_options(int64_t global_batch) {
  parallel::LayoutOptions o;
  o.model = "gpt2";
  o.global_batch = global_batch;
  o.micro_batch = 8;
  o.seq_len = 1024;
  return o;
}

TEST(CostModel, BackwardFractionSlowsBackwardOnly) {
  // Halving backward's rate doubles backward's matmul time and leaves forward alone.
  const parallel::LayoutOptions o = gpt2_options(8);
  const Cluster c = load_cluster("a100-80gb");
  const Cluster slow = with_line("a100-80gb", "backward_matmul_fraction", std::to_string(c.matmul_fraction / 2));
  const StepPrediction p = predict_step(o, 1, c), q = predict_step(o, 1, slow);
  EXPECT_NEAR(q.stage_forward_s, p.stage_forward_s, 1e-12);
  EXPECT_GT(q.stage_backward_s, 1.8 * p.stage_backward_s);
  EXPECT_LT(q.stage_backward_s, 2.0 * p.stage_backward_s);  // element-wise work and launches unchanged
}

TEST(CostModel, CommunicationOnSharedCoresIsNeverHidden) {
  // DDP on one node: overlap hides the gradient all-reduce behind backward,
  // unless the collectives run on the cores that compute; then the ring
  // all-reduce of the f32 gradients, 2(p-1)(alpha + n/(p beta)) per 4 MiB bucket
  // (each paying the latency), is exposed whole.
  const parallel::LayoutOptions o = gpt2_options(64);
  const Cluster c = load_cluster("a100-80gb");
  const Cluster shared = with_line("a100-80gb", "comm_overlaps_compute", "false");
  const StepPrediction hidden = predict_step(o, 8, c), exposed = predict_step(o, 8, shared);
  EXPECT_NEAR(hidden.dp_exposed, 0.0, 1e-12);
  const double n = 4.0 * 124475904;  // f32 gradients: gpt2's flat buffer (braid plan's Psi)
  const double buckets = std::ceil(n / (4 << 20));
  EXPECT_NEAR(exposed.dp_exposed / (buckets * ring_all_reduce(n / buckets, 8, c.intra_node)), 1.0, 1e-3);
  EXPECT_NEAR(exposed.step_s - hidden.step_s, exposed.dp_exposed, 1e-12);
}

TEST(CostModel, HsdpGathersInsideTheNodeAndAllReducesAcross) {
  // 16 A100s on 2 nodes, gathers exposed (comm on the computing cores): FSDP
  // gathers each unit's parameters from all 16 ranks, across the nodes' links;
  // HSDP with S = 8 gathers inside a node over NVLink and all-reduces only the
  // reduced shards (1/8 of the gradients) across nodes. Its optimizer state
  // is sharded 8 ways, not 16.
  parallel::LayoutOptions o = gpt2_options(16 * 8 * 8);  // 8 micro-batches per rank
  o.fsdp = true;
  const Cluster c = with_line("a100-80gb", "comm_overlaps_compute", "false");
  const StepPrediction fsdp = predict_step(o, 16, c);
  o.fsdp_shard_size = 8;
  const StepPrediction hsdp = predict_step(o, 16, c);
  EXPECT_LT(hsdp.dp_exposed, 0.7 * fsdp.dp_exposed);  // 27.8 ms against 46.6 here
  EXPECT_NEAR(hsdp.optimizer / fsdp.optimizer, 2.0, 1e-9);
  EXPECT_NEAR(hsdp.compute, fsdp.compute, 1e-12);
  o.fsdp_shard_size = 16;  // one group of every DP rank: FSDP
  EXPECT_NEAR(predict_step(o, 16, c).dp_exposed, fsdp.dp_exposed, 1e-12);
}

TEST(CostModel, OptimizerBytesCountTheNormPassAndTheComputeCopy) {
  EXPECT_EQ(optimizer_bytes_per_element(DType::f32, DType::f32), 24 + 2 * 4);
  EXPECT_EQ(optimizer_bytes_per_element(DType::bf16, DType::f32), 24 + 2 * 4 + 2);
  EXPECT_EQ(optimizer_bytes_per_element(DType::bf16, DType::bf16), 24 + 2 * 2 + 2);
}

TEST(CostModel, OneStageStepIsTheMicroBatchesWork) {
  // Without a pipeline, no bubble: the step is m micro-batches of forward and
  // backward, the gradient all-reduce and AdamW.
  parallel::LayoutOptions o;
  o.model = "gpt2";
  o.global_batch = 64;
  o.micro_batch = 8;
  o.seq_len = 1024;
  o.precision = "bf16";
  const Cluster c = load_cluster("a100-80gb");
  const StepPrediction p = predict_step(o, 8, c);
  EXPECT_EQ(p.micro_batches, 1);
  EXPECT_NEAR(p.bubble, 0.0, 1e-12);
  EXPECT_NEAR(p.step_s, p.stage_forward_s + p.stage_backward_s + p.dp_exposed + p.optimizer, 1e-12);
  EXPECT_GT(p.mfu, 0.2);
  EXPECT_LT(p.mfu, c.matmul_fraction);
}

// Context parallelism: each CP rank holds 1/CP of every sequence and attends
// it to all keys, so its compute is 1/CP of one rank's (the model's matmuls and
// the causal attention both split evenly; the kernels' fixed launch costs do
// not); inside a node the ring's forward transfers hide behind the attention
// and only backward's f32 key/value gradients show, while all-to-alls cost
// time of their own.
TEST(CostModel, ContextParallelSplitsComputeAndCostsItsAttention) {
  parallel::LayoutOptions o;
  o.model = "gpt2";
  o.block_size = 16384;
  o.seq_len = 16384;
  o.global_batch = 1;
  o.micro_batch = 1;
  o.precision = "bf16";
  const Cluster c = load_cluster("a100-80gb");
  const StepPrediction one = predict_step(o, 1, c);
  o.cp = 4;
  const StepPrediction ring = predict_step(o, 4, c);
  o.cp_comm = "a2a";
  const StepPrediction a2a = predict_step(o, 4, c);
  EXPECT_NEAR(ring.compute, one.compute / 4, 0.03 * one.compute / 4);
  EXPECT_GT(ring.cp_comm, 0.0);
  EXPECT_LT(ring.cp_comm, 0.05 * ring.step_s);
  EXPECT_GT(a2a.cp_comm, 0.0);
  EXPECT_NEAR(a2a.compute, ring.compute, 1e-9 * ring.compute);
  EXPECT_EQ(one.cp_comm, 0.0);
}

// braid plan --search over long sequences: gpt2 at 32,768 tokens, 16
// sequences on 64 A100s. Each sequence needs a model-parallel group of 4, and
// the search enumerates CP degrees and both forms; the best layout splits the
// sequence (CP >= 2), fits the memory, and every kept layout is one braid runs.
TEST(CostModel, SearchPicksContextParallelismForLongSequences) {
  parallel::LayoutOptions o;
  o.model = "gpt2";
  o.block_size = 32768;
  o.seq_len = 32768;
  o.global_batch = 16;
  const Cluster c = load_cluster("a100-80gb");
  const SearchResult r = search_layouts(o, 64, c, 5);
  ASSERT_FALSE(r.best.empty());
  EXPECT_GE(r.best[0].opt.cp, 2) << r.best[0].layout;
  for (const Candidate& k : r.best) {
    EXPECT_LE(k.peak_bytes, c.memory_bytes) << k.layout;
    EXPECT_EQ(k.opt.tp * k.opt.cp * k.opt.pp * k.opt.dp, 64) << k.layout;
  }
  EXPECT_GT(r.considered, 1000u);
}

TEST(CostModel, OneFOneBBubbleIsTheClosedForm) {
  // P stages, m micro-batches, uniform stages: (P-1)(f+b) idle per stage
  // (Narayanan et al. 2021, sec. 2.2.1).
  parallel::LayoutOptions o;
  o.model = "gpt2";
  o.n_layer = 8;
  o.global_batch = 16;
  o.micro_batch = 1;
  o.seq_len = 1024;
  o.pp = 4;
  o.precision = "bf16";
  o.vocab_size = 64;  // a negligible head: the stages are even
  const StepPrediction p = predict_step(o, 4, load_cluster("a100-80gb"));
  EXPECT_EQ(p.micro_batches, 16);
  EXPECT_NEAR(p.bubble / (3 * (p.stage_forward_s + p.stage_backward_s)), 1.0, 0.02);
}

// ---- the published table ----

struct Row {
  std::string name;
  double params_b, heads, hidden, layers, tp, pp, gpus, batch, tflops;
};

std::map<std::string, std::string> read_toml(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return read_toml_values(in, path);
}

std::vector<double> numbers(const std::string& s) {
  std::istringstream in(s);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

TEST(CostModel, PredictsTheMegatronWeakScalingTable) {
  const char* env = std::getenv("BRAID_SOURCE_DIR");
  const char* src = env ? env : BRAID_SOURCE_DIR;
  auto kv = read_toml(std::string(src) + "/bench/layouts/megatron_sc21.toml");
  std::map<std::string, std::vector<double>> col;
  for (const char* k : {"params_b", "heads", "hidden", "layers", "tp", "pp", "gpus", "batch", "tflops"})
    col[k] = numbers(kv["rows." + std::string(k)]);
  const size_t n = col["tflops"].size();
  ASSERT_EQ(n, 10u);
  auto options = [&](size_t i) {
    parallel::LayoutOptions o;
    o.model = "gpt2";
    o.n_layer = static_cast<int64_t>(col["layers"][i]);
    o.n_head = static_cast<int64_t>(col["heads"][i]);
    o.n_embd = static_cast<int64_t>(col["hidden"][i]);
    o.vocab_size = std::stoll(kv["assumptions.vocab_size"]);
    o.seq_len = o.block_size = std::stoll(kv["assumptions.seq_len"]);
    o.global_batch = static_cast<int64_t>(col["batch"][i]);
    o.micro_batch = std::stoll(kv["assumptions.micro_batch"]);
    o.tp = static_cast<int>(col["tp"][i]);
    o.pp = static_cast<int>(col["pp"][i]);
    o.precision = kv["assumptions.precision"];
    o.reduce_dtype = kv["assumptions.reduce_dtype"];
    o.recompute = kv["assumptions.recompute"];
    o.schedule = kv["assumptions.schedule"];
    o.overlap = kv["assumptions.overlap"] == "true";
    o.bucket_mb = std::stod(kv["assumptions.bucket_mb"]);
    o.dropout = std::stof(kv["assumptions.dropout"]);
    return o;
  };
  // Achieved TFLOP/s per GPU as the paper reports it: Eq. 3's FLOPs over the step.
  auto achieved = [&](size_t i, const Cluster& c) {
    const parallel::LayoutOptions o = options(i);
    const StepPrediction p = predict_step(o, static_cast<int>(col["gpus"][i]), c);
    if (std::getenv("BRAID_SHOW")) std::printf("%s", format_prediction(p).c_str());
    const double F = megatron_flops_per_iteration(o.global_batch, o.seq_len, o.n_layer, o.n_embd, o.vocab_size);
    return F / (col["gpus"][i] * p.step_s) / 1e12;
  };
  Cluster c = load_cluster("a100-80gb");
  // Fit the matmul fraction (forward and backward alike, as the preset has one)
  // on the first row alone (achieved grows with it).
  double lo = 0.05, hi = 1.0;
  for (int it = 0; it < 50; ++it) {
    c.matmul_fraction = c.backward_matmul_fraction = 0.5 * (lo + hi);
    (achieved(0, c) > col["tflops"][0] ? hi : lo) = c.matmul_fraction;
  }
  EXPECT_NEAR(c.matmul_fraction, load_cluster("a100-80gb").matmul_fraction, 0.0005)
      << "the preset's fitted fraction is stale";
  for (size_t i = 0; i < n; ++i) {
    const double got = achieved(i, c), want = col["tflops"][i];
    std::printf("  %6s: predicted %5.1f TFLOP/s per GPU, published %5.1f (%+.1f%%)\n",
                std::to_string(col["params_b"][i]).substr(0, 6).c_str(), got, want, 100 * (got / want - 1));
    if (i > 0) {
      EXPECT_NEAR(got / want, 1.0, 0.15) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace braid::plan
