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

// The presets: src/braid/plan/clusters/NAME.toml, embedded at build time
// (cmake/cluster_presets.cmake).
const std::map<std::string, std::string>& presets() {
  static const std::map<std::string, std::string> p = {
#include "braid/plan/cluster_presets.inc"
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
                     " is neither a preset (", cluster_preset_names(), ", this-machine) nor a TOML file");
  std::ifstream in(name_or_path);
  BRAID_CONFIG_CHECK(in.good(), "--cluster ", name_or_path, " cannot be read");
  return parse_cluster(in, name_or_path);
}

std::vector<std::string> cluster_presets() {
  std::vector<std::string> out;
  for (const auto& [name, text] : presets()) out.push_back(name);
  return out;
}

std::string cluster_preset_names() {
  std::string s;
  for (const auto& [name, text] : presets()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

std::string format_cluster(const Cluster& c) {
  std::ostringstream out;
  out.precision(6);  // %.6g: what parse_cluster reads back within 1e-6
  out << std::boolalpha;
  auto field = [&out](const char* key, auto value) { out << key << " = " << value << '\n'; };
  field("name", '"' + c.name + '"');
  field("accelerators_per_node", c.accelerators_per_node);
  field("memory_gib", c.memory_bytes / double(1ull << 30));
  field("memory_bandwidth_gbs", c.memory_bandwidth / 1e9);
  field("matmul_fraction", c.matmul_fraction);
  field("backward_matmul_fraction", c.backward_matmul_fraction);
  field("comm_overlaps_compute", c.comm_overlaps_compute);
  field("kernel_overhead_us", c.kernel_overhead * 1e6);
  out << "\n[peak_tflops]\n";
  field("bf16", c.peak_bf16 / 1e12);
  field("fp16", c.peak_fp16 / 1e12);
  field("fp32", c.peak_fp32 / 1e12);
  out << "\n[intra_node]\n";
  field("bandwidth_gbs", c.intra_node.bandwidth / 1e9);
  field("latency_us", c.intra_node.latency * 1e6);
  out << "\n[inter_node]\n";
  field("bandwidth_gbs", c.inter_node.bandwidth / 1e9);
  field("latency_us", c.inter_node.latency * 1e6);
  field("links_per_node", c.links_per_node);
  return out.str();
}

std::string cluster_preset_text(const std::string& name) {
  if (name == "this-machine") return "# measured by braid on this machine\n" + format_cluster(measure_this_machine());
  auto it = presets().find(name);
  BRAID_CONFIG_CHECK(it != presets().end(), "no cluster preset '", name, "'; the presets are ", cluster_preset_names());
  return it->second;
}

comm::NodeMap cluster_nodes(const Cluster& c, int ranks) {
  const int per = std::max(1, c.accelerators_per_node);
  std::vector<int> blocks;
  for (int left = ranks; left > 0; left -= per) blocks.push_back(std::min(per, left));
  return comm::NodeMap::blocks(blocks);
}

}  // namespace braid::plan
