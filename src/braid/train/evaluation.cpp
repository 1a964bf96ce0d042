#include "braid/train/evaluation.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "braid/core/error.h"

namespace braid::train {

float validation_loss(data::TokenView val, const ValidationShape& s, int rank, int size,
                      const BatchLoss& loss, comm::Communicator* group) {
  const int64_t B = s.micro_batch, T = s.seq_len;
  const size_t windows = val.size() - static_cast<size_t>(T);
  const int64_t per_rank = s.global_batch / size;
  double sum = 0;
  int64_t count = 0;
  std::vector<size_t> offs(static_cast<size_t>(B));
  for (int64_t vb = 0; vb < s.batches; ++vb) {
    for (int64_t micro = 0; micro < per_rank / B; ++micro) {
      for (int64_t b = 0; b < B; ++b) {
        const int64_t j = vb * s.global_batch + rank * per_rank + micro * B + b;
        offs[static_cast<size_t>(b)] = static_cast<size_t>(j * T) % windows;
      }
      sum += loss(val, offs.data(), B, T);
      ++count;
    }
  }
  float mean = static_cast<float>(sum / static_cast<double>(count));
  if (size > 1) group->all_reduce(&mean, &mean, 1, DType::f32, comm::ReduceOp::avg);
  return mean;
}

WindowLoss window_loss(data::TokenView tokens, int64_t T, int64_t B, int64_t max_windows, int rank,
                       int size, const BatchLoss& loss, comm::Communicator* group) {
  int64_t W = tokens.size() > 0 ? static_cast<int64_t>((tokens.size() - 1) / static_cast<size_t>(T)) : 0;
  if (max_windows > 0) W = std::min(W, max_windows);
  BRAID_CONFIG_CHECK(W >= 1, "the token file holds ", tokens.size(), " tokens: not one window of --seq-len ", T,
                     " + 1; use a shorter --seq-len or a longer file");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<size_t> offs(static_cast<size_t>(B));
  double sum = 0;  // this rank's sum of per-window mean losses
  // Windows [first, first + b) in one forward.
  auto score = [&](int64_t first, int64_t b, bool counted) {
    for (int64_t i = 0; i < b; ++i) offs[static_cast<size_t>(i)] = static_cast<size_t>((first + i) * T);
    const float l = loss(tokens, offs.data(), b, T);
    if (counted) sum += static_cast<double>(l) * static_cast<double>(b);
  };
  const int64_t D = size, r = rank, full = W / B, rest = W - full * B;
  for (int64_t k = 0; k < (full + D - 1) / D; ++k) {
    const int64_t j = k * D + r;
    score(j < full ? j * B : 0, B, j < full);
  }
  for (int64_t k = 0; k < (rest + D - 1) / D; ++k) {
    const int64_t j = k * D + r;
    score(j < rest ? full * B + j : 0, 1, j < rest);
  }
  // Each rank's double travels as raw bits (an all-gather copies without
  // arithmetic); every rank adds them in rank order, so all agree exactly.
  double total = sum;
  if (D > 1) {
    std::vector<double> all(static_cast<size_t>(D));
    group->all_gather(&sum, all.data(), 2, DType::f32);
    total = 0;
    for (double x : all) total += x;
  }
  WindowLoss out;
  out.loss = total / static_cast<double>(W);
  out.windows = W;
  out.tokens = W * T;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace braid::train
