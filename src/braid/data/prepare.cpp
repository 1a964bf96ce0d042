#include "braid/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>
#include <vector>

namespace braid::data {
namespace {

struct Batch {
  std::vector<TextPiece> pieces;
  std::vector<std::vector<int32_t>> ids;  // ids[i]: pieces[i] encoded
};

// Encodes a batch on `threads` threads, taking pieces by an atomic index: the
// caller's, once it has done its I/O (join()), and threads - 1 of the job's own
// meanwhile; no more threads than cores, as a preempted thread holding a lock
// of the tokenizer's cache would stall the others. The destructor stops and
// joins them (after an error in the caller too); join() rethrows an error.
class EncodeJob {
 public:
  EncodeJob(Batch& b, const Gpt2Tokenizer& tok, int threads, PrepareProgress* progress) : b_(b) {
    b.ids.assign(b.pieces.size(), {});
    const size_t n = std::min(static_cast<size_t>(std::max(threads, 1) - 1), b.pieces.size());
    try {
      for (size_t t = 0; t < n; ++t) pool_.emplace_back([this, &tok, progress] { work(tok, progress); });
    } catch (...) {  // no thread to be had: stop those started (no destructor runs for this one)
      stop();
      throw;
    }
  }
  ~EncodeJob() { stop(); }
  void join(const Gpt2Tokenizer& tok, PrepareProgress* progress) {
    work(tok, progress);
    for (auto& th : pool_) th.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void stop() {
    failed_ = true;
    for (auto& th : pool_)
      if (th.joinable()) th.join();
  }
  void work(const Gpt2Tokenizer& tok, PrepareProgress* progress) {
    try {
      for (size_t i; !failed_ && (i = next_.fetch_add(1)) < b_.pieces.size();) {
        b_.ids[i] = tok.encode(b_.pieces[i].text);
        if (progress) progress->tokens += b_.ids[i].size() + (b_.pieces[i].starts_document ? 1 : 0);
      }
    } catch (...) {
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
  }
  Batch& b_;
  std::atomic<size_t> next_{0};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // written by the first worker that fails, read after join
  std::vector<std::thread> pool_;
};

}  // namespace

PrepareStats encode_documents(DocumentReader& in, const Gpt2Tokenizer& tok, const PrepareSettings& s,
                              TokenFileWriter& train, TokenFileWriter& val, PrepareProgress* progress) {
  const int threads = std::max(s.threads, 1);
  const size_t batch_bytes = s.batch_bytes ? s.batch_bytes : static_cast<size_t>(threads) * (size_t{1} << 20);
  const int32_t eot = tok.eot();
  PrepareStats st;
  TokenFileWriter* dest = &train;
  bool more = true;
  auto read = [&](Batch& b) {
    for (size_t bytes = 0; more && bytes < batch_bytes;) {
      TextPiece p;
      if (!(more = in.next(p))) break;
      bytes += p.text.size();
      b.pieces.push_back(std::move(p));
    }
    if (progress) progress->input_bytes = in.bytes_read();
  };
  auto write = [&](Batch& b) {
    for (size_t i = 0; i < b.pieces.size(); ++i) {
      if (b.pieces[i].starts_document) {  // every document starts with <|endoftext|>
        const uint64_t d = st.documents++;
        const bool to_val = s.val_every > 0 && d % s.val_every == s.val_every - 1;
        dest = to_val ? &val : &train;
        ++(to_val ? st.val_documents : st.train_documents);
        dest->append(&eot, 1);
      }
      dest->append(b.ids[i]);
      st.text_bytes += b.pieces[i].text.size();
    }
    b = Batch();
  };
  // Three batches at most: one encoded, the one before it written, the next read.
  Batch done, cur;
  read(cur);
  while (!cur.pieces.empty()) {
    Batch next;
    {
      EncodeJob job(cur, tok, threads, progress);
      write(done);
      read(next);
      job.join(tok, progress);
    }
    done = std::move(cur);
    cur = std::move(next);
  }
  write(done);
  st.input_bytes = in.bytes_read();
  if ((s.val_every == 0 || st.documents < s.val_every) && s.tail_fraction > 0) {
    // Nothing went to validation: hold out the stream's tail instead.
    const auto n = static_cast<uint64_t>(std::llround(static_cast<double>(train.size()) * s.tail_fraction));
    train.move_tail(std::min(n, train.size()), val);
    st.tail_split = true;
  }
  return st;
}

}  // namespace braid::data
