// Which algorithm runs a collective: the policy, written here once. A
// communicator asks select_algorithm for every "ours" collective and runs what
// it returns (comm_base.cpp); the algorithms themselves (one file each in this
// folder) never choose another one.
//
// The policy (n = ranks of the group, bytes as CollectiveShape::bytes defines them):
// A group that spans nodes (its node map has k > 1 nodes; topology.h) takes the
// hierarchical path first, unless it is switched off (hierarchical = false):
//   all-reduce      count >= fewest ranks on a node: hierarchical (uneven nodes too)
//   reduce-scatter,
//   all-gather      every node holds the same number of the group's ranks: hierarchical;
//                   uneven nodes (2 + 1) take the flat algorithms below
//   broadcast       bytes > 0: hierarchical (uneven nodes too)
// and everything else, and every group on one node, the flat policy:
//   all-reduce      n = 1 or count = 0: ring_all_reduce (which only copies)
//                   n a power of two and bytes <= doubling max (n = 2: the 2-rank max):
//                     recursive doubling
//                   n a power of two > 2, bytes <= halving max and count >= n: Rabenseifner
//                   otherwise the pipelined ring
//   reduce-scatter  the pipelined ring
//   all-gather      n = 2: direct (one exchange, the local copy overlapping it)
//                   n > 2, count > 0, n a power of two, output bytes <= doubling max:
//                     recursive doubling; else output bytes <= direct max: direct
//                   otherwise the pipelined ring (n = 1, count = 0 included)
//   all-to-all      n = 2, or n > 2 with one round on: direct; otherwise pairwise
//   broadcast       n = 1 or bytes = 0: nothing to send
//                   n > 2 and bytes <= flat max (inclusive): flat tree
//                   bytes < chain min or n = 2: binomial tree
//                   bytes < scatter max: scatter + all-gather (van de Geijn)
//                   otherwise the pipelined chain
//   barrier         dissemination
//
// The thresholds are RingOptions' defaults. The all-reduce ones were measured on
// the 2-core development machines (OpenMPI 4.1, vader/CMA shared memory;
// docs/BENCHMARKS.md, "Messages on private buffers"):
//   - 2 ranks: one whole-buffer exchange beats the ring's two phases up to 8 MiB on
//     a host whose memcpy runs at ~19 GB/s (0.80-0.82 of memcpy at 2-4 MiB against
//     the ring's 0.45; 0.67 against 0.45 at 8 MiB; the ring wins from 16 MiB), while
//     an earlier host at ~5.5 GB/s had it 20-30 % behind the ring at 2-4 MiB;
//   - 4 ranks: recursive doubling wins up to ~64 KiB, Rabenseifner to ~1 MiB, the
//     ring above.
// All-gather: doubling / direct up to 32 MiB of output. Broadcast: the flat tree up
// to 4 MiB (single-copy transports, CMA/XPMEM, let every receiver copy at once, so
// it beats the binomial tree at mid sizes), the binomial tree below 256 KiB
// otherwise, scatter + all-gather below 32 MiB, the chain above.
// Every threshold can be set per job by a BRAID_COMM_* variable (apply_env).
//
// Sources: Thakur, Rabenseifner & Gropp 2005 (doubling, halving-doubling, their
// switch points); Patarasuk & Yuan 2009 (ring); van de Geijn et al. 1997 (scatter +
// all-gather broadcast).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace braid::comm::algo {

/// The collectives a communicator runs over point-to-point calls.
enum class Collective : uint8_t { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, barrier };
const char* collective_name(Collective c);

/// Tuning of the algorithms and the selector's thresholds, all in bytes unless said.
/// Defaults: the measurements above; environment overrides: apply_env.
struct RingOptions {
  size_t chunk_bytes = size_t{1} << 20;  // pipelining unit of the rings and the chain
  int depth = 4;                         // ring receives posted ahead of the one being reduced
  // Broadcast with more than 2 ranks below this: binomial tree; the larger ones
  // scatter + all-gather or chain.
  size_t chain_broadcast_min_bytes = size_t{256} << 10;
  // All-reduce on a power-of-two group up to this: recursive doubling (log2 n rounds
  // instead of the ring's 2(n-1)); the 2-rank group has its own.
  size_t doubling_all_reduce_max_bytes = size_t{128} << 10;
  size_t doubling_all_reduce_max_bytes_2ranks = size_t{8} << 20;
  // Above the doubling max and up to this, power-of-two groups of more than 2 ranks
  // use Rabenseifner's algorithm (2 log2 n steps instead of the ring's 2(n-1)).
  size_t halving_all_reduce_max_bytes = size_t{1} << 20;
  // All-gather with more than 2 ranks, output bytes (n * count * elem): recursive
  // doubling (power-of-two n) up to the first, direct up to the second.
  size_t doubling_all_gather_max_bytes = size_t{32} << 20;
  size_t direct_all_gather_max_bytes = size_t{32} << 20;
  // All-to-all with more than 2 ranks: every receive and send posted at once (one
  // round) instead of n-1 pairwise sendrecv rounds.
  bool direct_all_to_all = true;
  // Broadcast with more than 2 ranks, at least chain_broadcast_min_bytes and below
  // this: scatter + all-gather; the pipelined chain from here on.
  size_t scatter_broadcast_max_bytes = size_t{32} << 20;
  // Broadcast with more than 2 ranks up to this (inclusive): flat tree.
  size_t flat_broadcast_max_bytes = size_t{4} << 20;
  // Groups that span nodes run the hierarchical algorithms (false: the flat policy,
  // as if the group were one node; for comparison).
  bool hierarchical = true;
};

/// What the policy reads of a group's node map (topology.h): the nodes it spans,
/// whether they hold equal numbers of its ranks, and the fewest on one node.
struct NodeShape {
  int nodes = 1;
  bool even = true;
  int min_local = 1;
};

/// One call as the selector sees it.
struct CollectiveShape {
  Collective op = Collective::barrier;
  size_t count = 0;       // elements, per the collective's contract (all-gather: per rank)
  size_t elem_bytes = 0;  // bytes of one element
  int world = 1;          // ranks of the group
  NodeShape placement;
  /// The bytes the thresholds compare: the buffer of all-reduce and broadcast, the
  /// output of all-gather (world * count * elem), one block of the others.
  size_t bytes() const;
};

struct CollectiveAlgorithm;

/// The algorithm the policy above picks for `call` under `opts` (never null; for
/// a broadcast with nothing to send, kNoBroadcast).
const CollectiveAlgorithm& select_algorithm(const CollectiveShape& call, const RingOptions& opts);

/// Overrides `opts` from the environment as read by `getenv` (std::getenv in a
/// communicator; a map in tests). Each variable names the member it sets:
/// BRAID_COMM_RING_CHUNK_BYTES, BRAID_COMM_RING_RECVS_AHEAD (1..64),
/// BRAID_COMM_{ALLREDUCE,ALLGATHER,BROADCAST}_*_MAX_BYTES, BRAID_COMM_ALLTOALL_ONE_ROUND
/// and BRAID_COMM_HIERARCHICAL (0/1); env_names() lists them all. Byte values are plain digits.
/// Throws ConfigError naming the variable, its value and the fix when a value does
/// not parse, or when a variable is set under the name it had before (so that a
/// setting is never silently ignored).
void apply_env(RingOptions& opts, const std::function<const char*(const char*)>& getenv);
/// Throws ConfigError naming the variable and the known ones when a name in `set`
/// (the environment's variable names) starts with BRAID_COMM_ but is not one of them.
void check_env_names(const std::vector<std::string>& set);
/// Every variable apply_env reads, in docs/CONFIGURATION.md's order.
std::vector<std::string> env_names();

}  // namespace braid::comm::algo
