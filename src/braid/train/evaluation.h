// Loss of a model on held-out tokens: the periodic validation of a run and the
// window scoring of `braid eval`, over the data-parallel ranks. The forward
// itself comes from the caller (Trainer: through every pipeline stage).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "braid/data/token_view.h"
#include "braid/comm/communicator.h"

namespace braid::train {

/// Mean cross-entropy (nats per token) of the (B, T) micro-batch whose
/// windows start at tokens[offsets[0..B)]: window b predicts
/// tokens[o_b + 1, o_b + T] from tokens[o_b, o_b + T). The same value on every
/// rank that calls it; collective over whatever the forward spans.
using BatchLoss = std::function<float(data::TokenView tokens, const size_t* offsets, int64_t B, int64_t T)>;

/// The batch sizes of a periodic validation: `batches` global batches of
/// `global_batch` sequences of T tokens, in micro-batches of B.
struct ValidationShape {
  int64_t global_batch = 0, micro_batch = 0, seq_len = 0, batches = 0;
};

/// Mean loss over the fixed, evenly spaced windows of `val` (window j starts at
/// j·T mod (size − T)): the same set every time. Rank `rank` of `size`
/// evaluating ranks scores its slice of each global batch; the means are
/// averaged over `group` (nullptr when size is 1). Every rank of the forward
/// calls it.
float validation_loss(data::TokenView val, const ValidationShape& s, int rank, int size,
                      const BatchLoss& loss, comm::Communicator* group);

/// Loss over consecutive windows of a token stream (window_loss).
struct WindowLoss {
  double loss = 0;        // mean cross-entropy per token (nats)
  int64_t windows = 0;    // windows scored
  int64_t tokens = 0;     // predicted tokens (windows x seq_len)
  double seconds = 0;     // wall time of the forwards
};

/// Scores `tokens` as llm.c and nanoGPT evaluate: window w predicts
/// tokens[w·T + 1, w·T + T] from tokens[w·T, w·T + T), for the first
/// min(max_windows, (size − 1) / T) windows (max_windows 0: all). Whole
/// micro-batches of B go round-robin over the `size` ranks of `group`, then the
/// rest one window at a time; a rank with nothing left scores window 0
/// uncounted, so collective forwards stay in step. The result is the same on
/// every rank (the ranks' sums are added in rank order). Throws ConfigError when
/// the stream holds no whole window.
WindowLoss window_loss(data::TokenView tokens, int64_t T, int64_t B, int64_t max_windows, int rank,
                       int size, const BatchLoss& loss, comm::Communicator* group);

}  // namespace braid::train
