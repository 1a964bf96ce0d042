#include "braid/plan/cluster.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "braid/core/error.h"
#include "braid/plan/this_machine.h"

namespace braid::plan {

namespace {

// Vendors' figures; where a figure is ours (latency, achievable fractions) the
// comment says so.
constexpr const char* kA100 = R"(# DGX A100 nodes: 8 x A100 80GB SXM on NVSwitch, 8 HDR InfiniBand links.
# Sources: NVIDIA A100 Tensor Core GPU datasheet (80GB SXM: 312 TFLOPS BF16/FP16
# dense, 19.5 TFLOPS FP32, 2,039 GB/s HBM2e, NVLink 600 GB/s per GPU counting
# both directions); NVIDIA DGX A100 datasheet (8 single-port ConnectX-6 HDR
# 200 Gb/s = 25 GB/s for compute traffic).
name = "a100-80gb"
accelerators_per_node = 8
memory_gib = 80
memory_bandwidth_gbs = 2039
# Fitted on the 1.7B row of Narayanan et al. (SC21) Table 1 (the only row fitted;
# docs/BENCHMARKS.md, "braid plan at cluster scale").
matmul_fraction = 0.634
# ours: what each kernel launch costs beyond its work (CUDA launch and the
# framework's dispatch; PyTorch eager is several microseconds per operator).
kernel_overhead_us = 5

[peak_tflops]
bf16 = 312
fp16 = 312
fp32 = 19.5

[intra_node]
bandwidth_gbs = 300   # NVLink 3: 600 GB/s both directions
latency_us = 5        # ours: a ring step's latency, not a vendor figure

[inter_node]
bandwidth_gbs = 25    # HDR InfiniBand, 200 Gb/s per link
latency_us = 10       # ours, as above
links_per_node = 8
)";

// What DGX H100 and DGX H200 nodes share: the fit, the peaks, NVLink 4 and NDR
// InfiniBand.
constexpr const char* kHopperNode = R"(matmul_fraction = 0.634   # ours: the a100-80gb fit, no published row fitted here
kernel_overhead_us = 5    # ours, as for a100-80gb

[peak_tflops]
bf16 = 989
fp16 = 989
fp32 = 67

[intra_node]
bandwidth_gbs = 450   # NVLink 4: 900 GB/s both directions
latency_us = 5        # ours

[inter_node]
bandwidth_gbs = 50    # NDR InfiniBand, 400 Gb/s per link
latency_us = 10       # ours
links_per_node = 8
)";

constexpr const char* kH100 = R"(# DGX H100 nodes: 8 x H100 SXM5 80GB on NVSwitch, 8 NDR InfiniBand links.
# Sources: NVIDIA H100 Tensor Core GPU datasheet (SXM: 989 TFLOPS BF16/FP16 dense,
# 67 TFLOPS FP32, 3.35 TB/s HBM3, NVLink 900 GB/s per GPU counting both
# directions); NVIDIA DGX H100 datasheet (8 ConnectX-7 400 Gb/s = 50 GB/s).
name = "h100-80gb"
accelerators_per_node = 8
memory_gib = 80
memory_bandwidth_gbs = 3350
)";

constexpr const char* kH200 = R"(# DGX H200 nodes: 8 x H200 SXM 141GB on NVSwitch, 8 NDR InfiniBand links.
# Sources: NVIDIA H200 Tensor Core GPU datasheet (SXM: 989 TFLOPS BF16/FP16 dense,
# 67 TFLOPS FP32, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s per GPU counting both
# directions); NVIDIA DGX H200 datasheet (8 ConnectX-7 400 Gb/s = 50 GB/s).
name = "h200"
accelerators_per_node = 8
memory_gib = 141
memory_bandwidth_gbs = 4800
)";

const std::map<std::string, std::string>& presets() {
  static const std::map<std::string, std::string> p = {
      {"a100-80gb", kA100},
      {"h100-80gb", std::string(kH100) + kHopperNode},
      {"h200", std::string(kH200) + kHopperNode},
  };
  return p;
}

// Every field a cluster file may have (backward_matmul_fraction and
// comm_overlaps_compute optional).
const std::vector<std::string> kClusterFields = {
    "name", "accelerators_per_node", "memory_gib", "memory_bandwidth_gbs", "matmul_fraction",
    "backward_matmul_fraction", "comm_overlaps_compute", "kernel_overhead_us", "peak_tflops.bf16",
    "peak_tflops.fp16", "peak_tflops.fp32", "intra_node.bandwidth_gbs", "intra_node.latency_us",
    "inter_node.bandwidth_gbs", "inter_node.latency_us", "inter_node.links_per_node"};

std::string known_fields() {
  std::string s;
  for (const std::string& f : kClusterFields) s += (s.empty() ? "" : ", ") + f;
  return s;
}

std::string preset_names() {
  std::string s;
  for (const auto& [name, text] : presets()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

double Cluster::peak_flops(DType dtype) const {
  switch (dtype) {
    case DType::bf16: return peak_bf16;
    case DType::f16: return peak_fp16;
    default: return peak_fp32;
  }
}

Link Cluster::inter_node_per_accelerator() const {
  Link l = inter_node;
  l.bandwidth = inter_node.bandwidth * links_per_node / accelerators_per_node;
  return l;
}

std::map<std::string, std::string> read_toml_values(std::istream& in, const std::string& origin) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(in);
  } catch (const CLI::ParseError& e) {
    throw ConfigError(detail::concat(origin, ": ", e.what()));
  }
  std::map<std::string, std::string> kv;
  for (const CLI::ConfigItem& it : items) {
    if (it.inputs.empty()) continue;  // a section header
    std::string key;
    for (const auto& p : it.parents) key += p + ".";
    key += it.name;
    // CLI11 gathers a list's items, and a key given twice, into one item's inputs.
    BRAID_CONFIG_CHECK(it.inputs.size() == 1 && kv.emplace(key, it.inputs.front()).second, origin, ": ", key,
                       " has more than one value (a list, or the key given twice); give it one");
  }
  return kv;
}

Cluster parse_cluster(std::istream& in, const std::string& origin) {
  const std::map<std::string, std::string> kv = read_toml_values(in, "cluster " + origin);
  Cluster c;
  std::map<std::string, bool> used;
  auto text = [&](const std::string& key) -> std::string {
    auto it = kv.find(key);
    if (it == kv.end()) {
      std::string unknown;  // misspellings, most likely
      for (const auto& [k, v] : kv)
        if (std::find(kClusterFields.begin(), kClusterFields.end(), k) == kClusterFields.end())
          unknown += (unknown.empty() ? " (it has '" : "', '") + k;
      throw ConfigError(detail::concat("cluster ", origin, " has no '", key, "'", unknown.empty() ? "" : unknown + "')",
                                       "; every field of `braid plan --print-cluster a100-80gb` is required"));
    }
    used[key] = true;
    return it->second;
  };
  auto number = [&](const std::string& key, double lo, double hi) {
    const std::string s = text(key);
    double v = 0;
    size_t end = 0;
    try {
      v = std::stod(s, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    BRAID_CONFIG_CHECK(end == s.size() && end > 0 && v > lo && v <= hi, "cluster ", origin, ": ", key, " = ", s,
                       " must be a number in (", lo, ", ", hi, "]");
    return v;
  };
  c.name = text("name");
  const double n = number("accelerators_per_node", 0, 1 << 20);
  BRAID_CONFIG_CHECK(n == static_cast<int>(n), "cluster ", origin, ": accelerators_per_node must be a whole number");
  c.accelerators_per_node = static_cast<int>(n);
  c.memory_bytes = number("memory_gib", 0, 1e9) * double(1ull << 30);
  c.memory_bandwidth = number("memory_bandwidth_gbs", 0, 1e9) * 1e9;
  c.matmul_fraction = number("matmul_fraction", 0, 1);
  c.backward_matmul_fraction =
      kv.count("backward_matmul_fraction") ? number("backward_matmul_fraction", 0, 1) : c.matmul_fraction;
  c.kernel_overhead = number("kernel_overhead_us", -1e-300, 1e6) * 1e-6;
  if (kv.count("comm_overlaps_compute")) {
    const std::string b = text("comm_overlaps_compute");
    BRAID_CONFIG_CHECK(b == "true" || b == "false", "cluster ", origin, ": comm_overlaps_compute = ", b,
                       " must be true or false");
    c.comm_overlaps_compute = b == "true";
  }
  c.peak_bf16 = number("peak_tflops.bf16", 0, 1e9) * 1e12;
  c.peak_fp16 = number("peak_tflops.fp16", 0, 1e9) * 1e12;
  c.peak_fp32 = number("peak_tflops.fp32", 0, 1e9) * 1e12;
  c.intra_node = {number("intra_node.bandwidth_gbs", 0, 1e9) * 1e9, number("intra_node.latency_us", 0, 1e9) * 1e-6};
  c.inter_node = {number("inter_node.bandwidth_gbs", 0, 1e9) * 1e9, number("inter_node.latency_us", 0, 1e9) * 1e-6};
  const double links = number("inter_node.links_per_node", 0, 1 << 20);
  BRAID_CONFIG_CHECK(links == static_cast<int>(links), "cluster ", origin, ": inter_node.links_per_node must be a whole number");
  c.links_per_node = static_cast<int>(links);
  for (const auto& [key, value] : kv)
    BRAID_CONFIG_CHECK(used.count(key), "cluster ", origin, " has an unknown field '", key, "'; the fields are ",
                       known_fields(), " (`braid plan --print-cluster this-machine` writes every one)");
  return c;
}

Cluster load_cluster(const std::string& name_or_path) {
  if (name_or_path == "this-machine") return measure_this_machine();
  if (auto it = presets().find(name_or_path); it != presets().end()) {
    std::istringstream in(it->second);
    return parse_cluster(in, name_or_path);
  }
  BRAID_CONFIG_CHECK(std::filesystem::is_regular_file(name_or_path), "--cluster ", name_or_path,
                     " is neither a preset (", preset_names(), ", this-machine) nor a TOML file");
  std::ifstream in(name_or_path);
  BRAID_CONFIG_CHECK(in.good(), "--cluster ", name_or_path, " cannot be read");
  return parse_cluster(in, name_or_path);
}

std::vector<std::string> cluster_presets() {
  std::vector<std::string> out;
  for (const auto& [name, text] : presets()) out.push_back(name);
  return out;
}

std::string format_cluster(const Cluster& c) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "name = \"%s\"\naccelerators_per_node = %d\nmemory_gib = %.6g\nmemory_bandwidth_gbs = %.6g\n"
                "matmul_fraction = %.6g\nbackward_matmul_fraction = %.6g\ncomm_overlaps_compute = %s\nkernel_overhead_us = %.6g\n\n[peak_tflops]\nbf16 = %.6g\nfp16 = %.6g\n"
                "fp32 = %.6g\n\n[intra_node]\nbandwidth_gbs = %.6g\nlatency_us = %.6g\n\n[inter_node]\n"
                "bandwidth_gbs = %.6g\nlatency_us = %.6g\nlinks_per_node = %d\n",
                c.name.c_str(), c.accelerators_per_node, c.memory_bytes / double(1ull << 30), c.memory_bandwidth / 1e9,
                c.matmul_fraction, c.backward_matmul_fraction, c.comm_overlaps_compute ? "true" : "false",
                c.kernel_overhead * 1e6, c.peak_bf16 / 1e12, c.peak_fp16 / 1e12, c.peak_fp32 / 1e12,
                c.intra_node.bandwidth / 1e9, c.intra_node.latency * 1e6, c.inter_node.bandwidth / 1e9,
                c.inter_node.latency * 1e6, c.links_per_node);
  return buf;
}

std::string cluster_preset_text(const std::string& name) {
  if (name == "this-machine") return "# measured by braid on this machine\n" + format_cluster(measure_this_machine());
  auto it = presets().find(name);
  BRAID_CONFIG_CHECK(it != presets().end(), "no cluster preset '", name, "'; the presets are ", preset_names());
  return it->second;
}

}  // namespace braid::plan
