#include "braid/comm/communicator.h"

#include <algorithm>

#include "braid/core/error.h"

namespace braid::comm {

void CommOptions::validate() const {
  BRAID_CONFIG_CHECK(timeout_s > 0 && timeout_s < 1e9, "--comm-timeout ", timeout_s,
                     " must be a positive number of seconds (default 600)");
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& s) {
  if (s == "sum") return ReduceOp::sum;
  if (s == "avg" || s == "mean") return ReduceOp::avg;
  if (s == "max") return ReduceOp::max;
  if (s == "min") return ReduceOp::min;
  throw ConfigError("unknown reduce op '" + s + "'; use sum, avg, max or min");
}

Algorithm parse_algorithm(const std::string& s) {
  if (s == "ring") return Algorithm::ring;
  if (s == "native") return Algorithm::native;
  throw ConfigError("unknown collective algorithm '" + s + "'; use ring or native");
}

void broadcast_string(Communicator& comm, std::string& s, int root) {
  // Raw bytes travel as f32 words: a broadcast copies bits.
  uint64_t n = s.size();
  comm.broadcast(&n, 2, DType::f32, root);
  std::string buf((n + 3) / 4 * 4, '\0');
  std::copy(s.begin(), s.end(), buf.begin());
  if (n > 0) comm.broadcast(buf.data(), buf.size() / 4, DType::f32, root);
  s = buf.substr(0, n);
}

}  // namespace braid::comm
