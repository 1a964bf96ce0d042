// A cluster as `braid plan` sees it: nodes of accelerators, their peak and
// achievable arithmetic, memory, and the links inside and between nodes. Read
// from a TOML file (see cluster_preset_text for the fields) or taken from a
// preset: one TOML file each in plan/clusters/ (vendors' figures, sources in each).
#pragma once
#include <istream>
#include <map>
#include <string>
#include <vector>

#include "braid/comm/topology.h"
#include "braid/core/dtype.h"

namespace braid::plan {

/// One kind of link, costed by the Hockney (alpha-beta) model: a message of n
/// bytes takes latency + n / bandwidth seconds.
struct Link {
  double bandwidth = 0;  // bytes/s one accelerator sends (and receives) at once
  double latency = 0;    // seconds per message
  /// Seconds for one message of `bytes`.
  double time(double bytes) const { return latency + bytes / bandwidth; }
};

struct Cluster {
  std::string name;
  int accelerators_per_node = 1;
  double memory_bytes = 0;            // per accelerator
  double memory_bandwidth = 0;        // bytes/s per accelerator: element-wise kernels, the optimizer
  double peak_bf16 = 0, peak_fp16 = 0, peak_fp32 = 0;  // dense FLOP/s per accelerator
  double matmul_fraction = 1;         // share of the peak large matmuls reach (forward)
  double backward_matmul_fraction = 1;  // the same for backward's (input and weight gradients)
  double kernel_overhead = 0;         // seconds each launched kernel costs beyond its work
  Link intra_node;                    // between accelerators of a node (per accelerator)
  Link inter_node;                    // one inter-node link (one NIC)
  int links_per_node = 1;             // inter-node links (NICs) of a node
  /// Whether communication runs beside compute (GPUs: copy engines and NICs) so
  /// that overlap hides it; false where the ranks' progress threads share the
  /// cores that compute (this-machine), so a collective costs its time even
  /// when it overlaps.
  bool comm_overlaps_compute = true;

  /// Peak dense FLOP/s of one accelerator in `dtype`.
  double peak_flops(DType dtype) const;
  /// What large matmuls reach: peak_flops(dtype) x matmul_fraction.
  double matmul_flops(DType dtype) const { return peak_flops(dtype) * matmul_fraction; }
  /// What backward's matmuls reach: peak_flops(dtype) x backward_matmul_fraction.
  double backward_matmul_flops(DType dtype) const { return peak_flops(dtype) * backward_matmul_fraction; }
  /// The inter-node link one accelerator has when every accelerator of its node
  /// sends at once: the node's links shared among them.
  Link inter_node_per_accelerator() const;
};

/// A TOML text's values by dotted key ("section.key" -> its text, quotes removed),
/// as CLI11's TOML reader gives them. Throws ConfigError naming `origin` when it
/// does not parse, or when a key has more than one value (a list, or repeated).
std::map<std::string, std::string> read_toml_values(std::istream& in, const std::string& origin);

/// The node map of `ranks` ranks filling the cluster's nodes in order,
/// accelerators_per_node each (the last node may hold fewer).
comm::NodeMap cluster_nodes(const Cluster& c, int ranks);

/// Parses a cluster description (TOML: name, accelerators_per_node, memory_gib,
/// memory_bandwidth_gbs, matmul_fraction, kernel_overhead_us; [peak_tflops] bf16, fp16, fp32;
/// [intra_node] bandwidth_gbs, latency_us; [inter_node] bandwidth_gbs,
/// latency_us, links_per_node; GB = 1e9 bytes, TFLOP = 1e12). Every field is
/// required but backward_matmul_fraction (default: matmul_fraction) and
/// comm_overlaps_compute (true or false; default true), and every value must be
/// positive (the fractions in (0, 1], kernel_overhead_us may be 0).
/// Throws ConfigError naming `origin`, the field and the fix.
Cluster parse_cluster(std::istream& in, const std::string& origin);
/// A preset by name, "this-machine" (measured now: measure_this_machine), else
/// the TOML file at that path. Throws ConfigError naming the presets when it is
/// none of them.
Cluster load_cluster(const std::string& name_or_path);
/// The presets' names.
std::vector<std::string> cluster_presets();
/// "a100-80gb, h100-80gb, h200": the presets' names, for help texts and errors.
std::string cluster_preset_names();
/// A preset's TOML text (a starting point for a file of one's own; for
/// "this-machine", the measured figures); throws ConfigError naming the presets
/// for an unknown name.
std::string cluster_preset_text(const std::string& name);
/// `c` as a cluster file (parse_cluster reads it back).
std::string format_cluster(const Cluster& c);

}  // namespace braid::plan
