#include "braid/train/async_save.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "braid/core/stopwatch.h"

namespace braid::train {

namespace {
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
}  // namespace

struct AsyncSaver::Pending {
  std::string dir;
  int64_t step = 0;
  formats::ShardedMetadata meta;  // taken at start(): the loss scale and step of the saved state
  formats::SaveFault fault;
  // Written by the thread, read after join().
  std::vector<formats::PieceMeta> pieces;
  uint64_t bytes = 0;
  std::string error;
  double write_s = 0, write_cpu_s = 0;
  std::atomic<bool> done{false};
  std::thread thread;
};

AsyncSaver::AsyncSaver(TrainingCheckpoint& ckpt, MemoryLedger* ledger) : ckpt_(ckpt), ledger_(ledger) {}

AsyncSaver::~AsyncSaver() {
  if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

bool AsyncSaver::written() const { return pending_ && pending_->done.load(std::memory_order_acquire); }

void AsyncSaver::prepare() {
  size_t floats = 0;
  for (const auto& it : ckpt_.save_items()) floats += static_cast<size_t>(it.end - it.begin);
  if (staging_.bytes() < floats * sizeof(float)) staging_ = Buffer(floats * sizeof(float), MemCategory::staging, ledger_);
}

void AsyncSaver::start(const std::string& dir, int64_t next_step, const formats::SaveFault& fault) {
  commit();  // at most one in flight
  const auto t0 = SteadyClock::now();
  auto p = std::make_unique<Pending>();
  p->dir = dir, p->step = next_step, p->fault = fault;
  const std::string file = ckpt_.begin_sharded_save(dir);
  std::vector<SaveItem> items = ckpt_.save_items();
  prepare();
  float* at = staging_.as<float>();
  for (auto& it : items) {
    const size_t n = static_cast<size_t>(it.end - it.begin);
    std::memcpy(at, it.data, n * sizeof(float));
    it.data = at;
    at += n;
  }
  p->meta = ckpt_.save_metadata(next_step);
  const bool armed = ckpt_.fault_armed(fault);
  Pending* raw = p.get();
  p->thread = std::thread([raw, items = std::move(items), file, armed] {
    // The lowest priority: the write takes the cores training leaves idle
    // (waits in communication) rather than slowing the step.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
    const auto w0 = SteadyClock::now();
    const double c0 = thread_cpu_seconds();
    try {
      if (!file.empty()) raw->pieces = write_save_items(raw->dir, file, items, raw->fault, armed, raw->bytes);
    } catch (const std::exception& e) {
      raw->error = e.what();
    }
    raw->write_s = seconds_since(w0);
    raw->write_cpu_s = thread_cpu_seconds() - c0;
    raw->done.store(true, std::memory_order_release);
  });
  pending_ = std::move(p);
  blocked_s_ = seconds_since(t0);
  last_dir_ = dir;
}

int64_t AsyncSaver::commit() {
  if (!pending_) return -1;
  std::unique_ptr<Pending> p = std::move(pending_);
  p->thread.join();
  write_s_ = p->write_s;
  write_cpu_s_ = p->write_cpu_s;
  ckpt_.commit_sharded_save(p->dir, std::move(p->meta), p->bytes, p->pieces, p->error, p->fault);
  return p->step;
}

}  // namespace braid::train
