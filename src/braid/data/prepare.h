// The pipeline of `braid prepare-data`: documents in, token files out, in
// memory bounded by one batch of text whatever the corpus size.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "braid/data/text_input.h"
#include "braid/data/token_file.h"
#include "braid/data/tokenizer.h"

namespace braid::data {

struct PrepareSettings {
  int threads = 2;  // encoding threads
  /// Document i (from 0) goes to validation when i % val_every == val_every - 1; 0: none.
  uint64_t val_every = 20;
  /// With fewer than val_every documents (one text file, say) or val_every 0:
  /// the last tail_fraction of the token stream goes to validation instead.
  double tail_fraction = 0;
  /// Text per batch (its ids are held until written); 0: 1 MiB per thread.
  size_t batch_bytes = 0;
};

struct PrepareStats {
  uint64_t documents = 0, train_documents = 0, val_documents = 0;
  uint64_t text_bytes = 0;   // bytes of document text encoded
  uint64_t input_bytes = 0;  // bytes of input read (JSON and Brown tags included)
  bool tail_split = false;   // validation is the tail of the token stream
};

/// Counters for a progress display on another thread.
struct PrepareProgress {
  std::atomic<uint64_t> input_bytes{0};  // input read, a batch ahead of the encoding
  std::atomic<uint64_t> tokens{0};       // ids encoded so far
};

/// Reads `in` to its end in batches of about batch_bytes of text, encodes each
/// batch's pieces on `threads` threads (the ids equal a sequential encoding:
/// pieces are cut at safe splits) and appends each document, its end-of-text
/// id then its ids, to `train` or `val` by the split rule of `s`. The calling
/// thread reads the next batch and writes the last one while a batch is
/// encoded, so memory holds three batches of text and ids besides the
/// tokenizer. Does not finish the writers. Throws what the reader, the
/// tokenizer and the writers throw.
PrepareStats encode_documents(DocumentReader& in, const Gpt2Tokenizer& tok, const PrepareSettings& s,
                              TokenFileWriter& train, TokenFileWriter& val, PrepareProgress* progress = nullptr);

}  // namespace braid::data
