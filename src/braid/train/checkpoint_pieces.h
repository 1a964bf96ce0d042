// Which pieces of the training state a rank writes to a sharded checkpoint
// (formats/sharded_checkpoint.h) and how it reads its own back.
//
// A rank holds, for each flat range it owns (GradSync::owned), parts of its
// TP slice of its stage's tensors: in the whole model's coordinates, a box of
// each tensor (one per TP row block: c_attn's q, k and v are three) and a
// range of the box's flattening. Replicas (DP, CP, the TP copies of
// replicated tensors, the last stage's copy of the tied embedding) hold the
// same elements; every element is written once, the writing spread over the
// ranks that hold it (Megatron-LM's fully parallel save).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "braid/formats/sharded_checkpoint.h"
#include "braid/model/param_layout.h"
#include "braid/parallel/data_parallel/grad_sync.h"

namespace braid::train {

/// Part of a box of a global tensor held by a rank.
struct HeldPiece {
  int64_t tensor = 0;          // index in the whole model's table (ParamInfo::global_index)
  formats::TensorBox box;
  int64_t begin = 0, end = 0;  // range of the box's flattening
  size_t flat = 0;             // flat index (this rank's layout) of element `begin`
};

/// The boxes of local tensor p (its TP blocks) on TP rank tp_rank of tp, in
/// the order its elements lie in the flat buffer.
std::vector<formats::TensorBox> tensor_boxes(const model::ParamInfo& p, int tp_rank, int tp);

/// The pieces the flat ranges `ranges` (increasing, disjoint) cover in `table`
/// (this rank's), alignment gaps skipped. skip_tied_copy: the table's unit 0
/// (wte, wpe) is a pipeline's last-stage copy, held and written by the first stage.
std::vector<HeldPiece> held_pieces(const std::vector<model::ParamInfo>& table,
                                   const std::vector<parallel::OwnedRange>& ranges, int tp_rank, int tp,
                                   bool skip_tied_copy);

/// A range of one held piece that one rank writes.
struct WriteSpan {
  size_t piece;  // index into that rank's held pieces
  int64_t begin, end;
};

using formats::kSplitElems;

/// Every rank's spans to write, from every rank's held pieces (held[r]):
/// each element held anywhere is written by exactly one of its holders; an
/// element range held by several goes to the holder with the fewest elements
/// so far (the lowest rank on ties), split evenly among them when longer than
/// kSplitElems. Deterministic: every rank computes the same answer.
std::vector<std::vector<WriteSpan>> assign_writers(const std::vector<std::vector<HeldPiece>>& held);

/// Serialises held pieces to int64 words and back (to exchange them).
std::vector<int64_t> encode_pieces(const std::vector<HeldPiece>& pieces);
std::vector<HeldPiece> decode_pieces(const int64_t* words, size_t n_pieces);
inline constexpr size_t kPieceWords = 8;

/// Reads state `state` (formats::kPieceStates index) of this rank's flat
/// layout (`table`) from a sharded checkpoint: a FlatReader for GradSync and
/// AdamW. The checkpoint's tensors must be the model's (check_resume_header
/// compares the sizes; the metadata's tensors are its header's model's).
parallel::FlatReader sharded_flat_reader(formats::ShardedCheckpointReader& reader,
                                         const std::vector<model::ParamInfo>& table, int tp_rank, int tp, int state);

}  // namespace braid::train
