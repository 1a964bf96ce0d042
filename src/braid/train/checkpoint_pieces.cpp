#include "braid/train/checkpoint_pieces.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "braid/core/error.h"

namespace braid::train {

using formats::TensorBox;

std::vector<TensorBox> tensor_boxes(const model::ParamInfo& p, int tp_rank, int tp) {
  const bool two_d = p.full_shape.size() == 2;
  const int64_t rows = two_d ? p.full_shape[0] : 1, cols = two_d ? p.full_shape[1] : p.full_shape[0];
  if (p.tp_dim < 0 || tp == 1) return {TensorBox{0, 0, rows, cols}};
  const int64_t q = tp_rank, P = tp;
  if (p.tp_dim == 1) return {TensorBox{0, q * (cols / P), rows, cols / P}};
  // Rows split inside each row block (a 1-D tensor's "rows" are its elements).
  std::vector<TensorBox> out;
  const int64_t n = two_d ? rows : cols;
  int64_t block0 = 0;  // the block's first row
  for (int64_t block : p.tp_block_rows.empty() ? std::vector<int64_t>{n} : p.tp_block_rows) {
    const int64_t local = block / P, first = block0 + q * local;
    out.push_back(two_d ? TensorBox{first, 0, local, cols} : TensorBox{0, first, 1, local});
    block0 += block;
  }
  return out;
}

namespace {
// Calls f(p, box, lo, hi, flat) for every box part of table's tensors that flat
// range [o, o + len) covers: elements [lo, hi) of box's flattening, the first at `flat`.
template <typename F>
void for_box_parts(const std::vector<model::ParamInfo>& table, size_t o, size_t len, int tp_rank, int tp, F&& f) {
  auto it = std::upper_bound(table.begin(), table.end(), o,
                             [](size_t x, const model::ParamInfo& p) { return x < p.offset + p.numel; });
  for (; it != table.end() && it->offset < o + len; ++it) {
    const size_t a = std::max(o, it->offset) - it->offset, b = std::min(o + len, it->offset + it->numel) - it->offset;
    const auto boxes = tensor_boxes(*it, tp_rank, tp);
    size_t first = 0;  // the box's first element in the local tensor (boxes may differ in size)
    for (const TensorBox& box : boxes) {
      const size_t bn = static_cast<size_t>(box.rows * box.cols);
      const size_t lo = std::max(a, first), hi = std::min(b, first + bn);
      if (lo < hi)
        f(*it, box, static_cast<int64_t>(lo - first), static_cast<int64_t>(hi - first), it->offset + lo);
      first += bn;
    }
  }
}
}  // namespace

std::vector<HeldPiece> held_pieces(const std::vector<model::ParamInfo>& table,
                                   const std::vector<parallel::OwnedRange>& ranges, int tp_rank, int tp,
                                   bool skip_tied_copy) {
  std::vector<HeldPiece> out;
  for (const auto& r : ranges)
    for_box_parts(table, r.offset, r.len, tp_rank, tp,
                  [&](const model::ParamInfo& p, const TensorBox& box, int64_t lo, int64_t hi, size_t flat) {
                    if (skip_tied_copy && p.layer < 0) return;
                    out.push_back({static_cast<int64_t>(p.global_index), box, lo, hi, flat});
                  });
  return out;
}

std::vector<std::vector<WriteSpan>> assign_writers(const std::vector<std::vector<HeldPiece>>& held) {
  struct Holder {
    int rank;
    size_t piece;
    int64_t begin, end;
  };
  // Boxes of one tensor are equal or disjoint, so a box is known by its corner.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<Holder>> boxes;
  for (size_t r = 0; r < held.size(); ++r)
    for (size_t i = 0; i < held[r].size(); ++i) {
      const HeldPiece& h = held[r][i];
      boxes[{h.tensor, h.box.row0, h.box.col0}].push_back({static_cast<int>(r), i, h.begin, h.end});
    }
  std::vector<int64_t> load(held.size(), 0);
  std::vector<std::vector<WriteSpan>> out(held.size());
  auto give = [&](const Holder& h, int64_t b, int64_t e) {
    auto& spans = out[static_cast<size_t>(h.rank)];
    if (!spans.empty() && spans.back().piece == h.piece && spans.back().end == b)
      spans.back().end = e;
    else
      spans.push_back({h.piece, b, e});
    load[static_cast<size_t>(h.rank)] += e - b;
  };
  for (const auto& [key, holders] : boxes) {
    std::vector<int64_t> cuts;
    for (const auto& h : holders) cuts.insert(cuts.end(), {h.begin, h.end});
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t x = cuts[k], y = cuts[k + 1];
      std::vector<const Holder*> cover;
      for (const auto& h : holders)
        if (h.begin <= x && h.end >= y) cover.push_back(&h);
      if (cover.empty()) continue;
      std::sort(cover.begin(), cover.end(), [&](const Holder* a, const Holder* b) {
        return std::make_pair(load[size_t(a->rank)], a->rank) < std::make_pair(load[size_t(b->rank)], b->rank);
      });
      const int64_t parts =
          y - x > kSplitElems ? std::min<int64_t>(static_cast<int64_t>(cover.size()), (y - x + kSplitElems - 1) / kSplitElems) : 1;
      // The parts' bounds first: give() changes the loads the order was taken from.
      for (int64_t p = 0; p < parts; ++p) give(*cover[size_t(p)], x + (y - x) * p / parts, x + (y - x) * (p + 1) / parts);
    }
  }
  return out;
}

std::vector<int64_t> encode_pieces(const std::vector<HeldPiece>& pieces) {
  std::vector<int64_t> w;
  w.reserve(pieces.size() * kPieceWords);
  for (const auto& p : pieces)
    w.insert(w.end(), {p.tensor, p.box.row0, p.box.col0, p.box.rows, p.box.cols, p.begin, p.end,
                       static_cast<int64_t>(p.flat)});
  return w;
}

std::vector<HeldPiece> decode_pieces(const int64_t* w, size_t n_pieces) {
  std::vector<HeldPiece> out(n_pieces);
  for (size_t i = 0; i < n_pieces; ++i, w += kPieceWords)
    out[i] = {w[0], TensorBox{w[1], w[2], w[3], w[4]}, w[5], w[6], static_cast<size_t>(w[7])};
  return out;
}

parallel::FlatReader sharded_flat_reader(formats::ShardedCheckpointReader& reader,
                                         const std::vector<model::ParamInfo>& table, int tp_rank, int tp, int state) {
  auto tensors = std::make_shared<std::vector<model::ParamInfo>>(table);
  return [&reader, tensors, tp_rank, tp, state](size_t o, size_t len, float* dst) {
    std::fill(dst, dst + len, 0.f);  // alignment gaps
    for_box_parts(*tensors, o, len, tp_rank, tp,
                  [&](const model::ParamInfo& p, const TensorBox& box, int64_t lo, int64_t hi, size_t flat) {
                    reader.read(static_cast<int64_t>(p.global_index), state, box, lo, hi, dst + (flat - o));
                  });
  };
}

}  // namespace braid::train
