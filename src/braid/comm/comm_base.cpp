#include "braid/comm/comm_base.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>  // environ

#include "braid/core/error.h"

namespace braid::comm {

CommBase::CommBase(std::shared_ptr<Monitor> monitor, std::shared_ptr<CommState> state)
    : monitor_(std::move(monitor)), state_(std::move(state)) {
  if (monitor_ && state_) monitor_->attach(state_);
  algo::apply_env(ring_opts_, [](const char* name) { return std::getenv(name); });
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) names.emplace_back(*e, std::strcspn(*e, "="));
  algo::check_env_names(names);
}

CommBase::~CommBase() { stop_progress(); }

// ---- asynchronous collectives ----

// Shared by the queue and the handle: the outcome, and the signal that makes the
// running op fail when its handle cancels it.
struct CommBase::Async {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // The failure as a message, rethrown as a new exception on the waiting thread:
  // sharing one exception object between threads leaves its lifetime to reference
  // counts inside the C++ runtime, which thread sanitizers cannot follow.
  bool failed = false, config_error = false;
  std::string error;
  std::shared_ptr<OpSignal> sig = std::make_shared<OpSignal>();
  std::atomic<bool> cancelled{false};
  uint64_t id = 0;

  void complete(bool fail, bool config, std::string what) {
    {
      std::lock_guard<std::mutex> lk(mu);
      failed = fail;
      config_error = config;
      error = std::move(what);
      done = true;
    }
    cv.notify_all();
  }
  // Under mu, after done: throws the recorded failure.
  void rethrow_locked() const {
    if (!failed) return;
    if (config_error) throw ConfigError(error);
    throw Error(error);
  }
  void wait_done() {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done; });
  }
  bool is_done() {
    std::lock_guard<std::mutex> lk(mu);
    return done;
  }
};

// The caller's handle of an async collective. Dropped before completion it waits for
// the collective (cancelling it first while an exception unwinds), so the collective
// never outlives the buffers its owner frees next.
class CommBase::AsyncWork final : public Work {
 public:
  explicit AsyncWork(std::shared_ptr<Async> a) : a_(std::move(a)) {}
  ~AsyncWork() override {
    if (a_->is_done()) return;
    if (std::uncaught_exceptions() > 0) {
      a_->cancelled = true;
      a_->sig->raise("cancelled: its owner is unwinding an exception");
    }
    a_->wait_done();
  }
  void wait() override {
    a_->wait_done();
    std::lock_guard<std::mutex> lk(a_->mu);
    a_->rethrow_locked();
  }
  bool test() override {
    std::lock_guard<std::mutex> lk(a_->mu);
    if (a_->done) a_->rethrow_locked();
    return a_->done;
  }
  void cancel() override {
    a_->cancelled = true;
    if (!a_->is_done()) a_->sig->raise("cancelled by its owner");
    a_->wait_done();
  }

 private:
  std::shared_ptr<Async> a_;
};

void CommBase::stop_progress(bool detach) {
  {
    std::lock_guard<std::mutex> lk(pq_->mu);
    pq_->stop = true;
    if (detach) pq_->orphaned = true;  // ~CommBase calls again, without detach
  }
  pq_->cv.notify_all();
  if (progress_.joinable()) {
    if (detach)
      progress_.detach();
    else
      progress_.join();
  }
}

bool CommBase::progress_busy() {
  std::lock_guard<std::mutex> lk(pq_->mu);
  return pq_->busy || !pq_->items.empty();
}

void CommBase::progress_loop(const std::shared_ptr<ProgressQueue>& pq,
                             const std::shared_ptr<CommState>& st) {
  // A queued collective that will not run: recorded failed, its handle completed.
  const auto fail_unrun = [&](Async& a, const std::string& why) {
    if (st) st->recorder.set_state(a.id, OpState::failed, st->now(), why);
    a.complete(true, false, why);
  };
  std::unique_lock<std::mutex> lk(pq->mu);
  for (;;) {
    pq->cv.wait(lk, [&] {
      return pq->orphaned || (!pq->items.empty() && !pq->busy) || (pq->stop && pq->items.empty());
    });
    if (pq->orphaned) {  // the communicator is gone: what never ran fails
      for (auto& item : pq->items) fail_unrun(*item.second, "communicator destroyed before the collective ran");
      pq->items.clear();
      return;
    }
    if (pq->items.empty()) return;  // stopping and drained
    auto item = std::move(pq->items.front());
    pq->items.pop_front();
    if (item.second->cancelled || !pq->broken.empty()) {
      fail_unrun(*item.second, item.second->cancelled ? "collective cancelled before it started" : pq->broken);
      pq->cv.notify_all();
      continue;
    }
    pq->busy = true;
    lk.unlock();
    bool failed = false, config = false;
    std::string what;
    try {
      if (st)
        run_recorded(*st, item.second->id, item.first, item.second->sig);
      else
        item.first();
    } catch (const ConfigError& e) {
      failed = config = true;
      what = e.what();
    } catch (const std::exception& e) {
      failed = true;
      what = e.what();
    } catch (...) {
      failed = true;
      what = "unknown exception in an asynchronous collective";
    }
    lk.lock();
    pq->busy = false;
    // One that failed midway (a timeout, a lost peer) leaves messages of the group in
    // flight that the collectives queued behind it would take as theirs.
    if (failed && !config && pq->broken.empty())
      pq->broken = "not run: an earlier collective on this group failed (" + what.substr(0, 300) + ")";
    item.second->complete(failed, config, std::move(what));
    pq->cv.notify_all();
  }
}

void CommBase::run_exclusive(const std::function<void()>& fn) {
  {
    std::unique_lock<std::mutex> lk(pq_->mu);
    pq_->cv.wait(lk, [&] { return pq_->items.empty() && !pq_->busy; });
    pq_->busy = true;
  }
  struct Release {
    CommBase* self;
    ~Release() {
      {
        std::lock_guard<std::mutex> lk(self->pq_->mu);
        self->pq_->busy = false;
      }
      self->pq_->cv.notify_all();
    }
  } release{this};
  fn();
}

WorkPtr CommBase::enqueue(OpRecord op, std::function<void()> fn) {
  auto a = std::make_shared<Async>();
  op.async = true;
  fn = traced(op, std::move(fn), true);
  if (state_) a->id = record_collective(op);
  {
    std::lock_guard<std::mutex> lk(pq_->mu);
    BRAID_CHECK(!pq_->stop, "collective queued on a communicator being destroyed");
    if (!progress_.joinable())
      progress_ = std::thread([this, pq = pq_, st = state_] { progress_loop(pq, st); });
    pq_->items.emplace_back(std::move(fn), a);
  }
  pq_->cv.notify_all();
  return std::make_shared<AsyncWork>(a);
}

// ---- recording ----

namespace {

OpRecord describe_collective(const char* name, size_t count, DType dtype, const char* reduce = "",
                             int root = -1) {
  OpRecord r;
  r.op = name;
  r.count = count;
  r.dtype = dtype_name(dtype);
  r.reduce = reduce;
  r.peer = root;
  return r;
}

// What the ranks of a group compare before a collective under --debug-collectives.
struct Fingerprint {
  int64_t seq;
  uint64_t count;
  char op[16];
  char dtype[8];
  char reduce[8];
  int32_t root;
  int32_t pad;
};
static_assert(sizeof(Fingerprint) % 4 == 0);

Fingerprint fingerprint(const OpRecord& r) {
  Fingerprint f{};
  f.seq = r.seq;
  f.count = r.count;
  std::snprintf(f.op, sizeof f.op, "%s", r.op.c_str());
  std::snprintf(f.dtype, sizeof f.dtype, "%s", r.dtype.c_str());
  std::snprintf(f.reduce, sizeof f.reduce, "%s", r.reduce.c_str());
  f.root = r.peer;
  return f;
}

OpRecord from_fingerprint(const Fingerprint& f) {
  OpRecord r;
  r.seq = f.seq;
  r.count = f.count;
  r.op = std::string(f.op, strnlen(f.op, sizeof f.op));
  r.dtype = std::string(f.dtype, strnlen(f.dtype, sizeof f.dtype));
  r.reduce = std::string(f.reduce, strnlen(f.reduce, sizeof f.reduce));
  r.peer = f.root;
  return r;
}

}  // namespace

uint64_t CommBase::record_collective(OpRecord& op) {
  op.seq = state_->next_seq++;
  op.t_queued = state_->now();
  return state_->recorder.add(op);
}

bool CommBase::record_p2p(const char* name, size_t bytes, int peer, int tag, uint64_t& id) {
  if (!state_) return false;
  const OpContext* c = current_op();
  if (c && c->state == state_.get()) return false;  // part of a running collective
  OpRecord r;
  r.op = name;
  r.p2p_seq = state_->next_p2p++;
  r.count = bytes;
  r.peer = peer;
  r.tag = tag;
  r.t_queued = state_->now();
  id = state_->recorder.add(std::move(r));
  return true;
}

void CommBase::run_collective(OpRecord op, const std::function<void()>& fn) {
  const std::function<void()> run = traced(op, fn, false);
  if (!state_) return run_exclusive(run);
  const uint64_t id = record_collective(op);
  run_exclusive([&] { run_recorded(*state_, id, run, nullptr); });
}

std::function<void()> CommBase::traced(OpRecord& op, std::function<void()> fn, bool async) {
  std::shared_ptr<SpanSink> sink;
  std::string group;
  {
    std::lock_guard<std::mutex> lk(meta_mu_);
    op.label = std::move(next_label_);
    next_label_.clear();
    sink = sink_;
    group = name_;
  }
  if (!sink) return fn;
  std::string name = op.label.empty() ? op.op : op.op + " " + op.label;
  const size_t bytes = op.dtype.empty() ? op.count : op.count * dtype_size(parse_dtype(op.dtype));
  std::string detail = detail::concat(op.count, " x ", op.dtype, " (", bytes, " bytes) on group ", group, " of ",
                                      size(), " ranks");
  std::string lane = async ? "comm " + group : "main";
  return [sink = std::move(sink), fn = std::move(fn), name = std::move(name), lane = std::move(lane),
          detail = std::move(detail)] {
    const double t0 = SpanSink::now_us();
    fn();
    sink->span(name, "comm", lane, t0, SpanSink::now_us(), detail);
  };
}

std::shared_ptr<SpanSink> CommBase::span_sink() const {
  std::lock_guard<std::mutex> lk(meta_mu_);
  return sink_;
}

void CommBase::set_name(std::string name) {
  std::lock_guard<std::mutex> lk(meta_mu_);
  name_ = std::move(name);
}

std::string CommBase::name() const {
  std::lock_guard<std::mutex> lk(meta_mu_);
  return name_;
}

void CommBase::set_span_sink(std::shared_ptr<SpanSink> sink) {
  std::lock_guard<std::mutex> lk(meta_mu_);
  sink_ = std::move(sink);
}

void CommBase::set_next_label(std::string label) {
  std::lock_guard<std::mutex> lk(meta_mu_);
  next_label_ = std::move(label);
}

void CommBase::run_recorded(CommState& st, uint64_t id, const std::function<void()>& fn,
                            std::shared_ptr<OpSignal> sig) {
  RunningOp running(st, id, std::move(sig));
  if (monitor_ && monitor_->options().debug_collectives && size() > 1) check_same_call(id);
  fn();
  running.done();
}

// The desync check (torch.distributed's TORCH_DISTRIBUTED_DEBUG=DETAIL does the same):
// the group all-gathers what each rank is about to call and every rank compares.
void CommBase::check_same_call(uint64_t id) {
  OpRecord mine;
  BRAID_CHECK(state_->recorder.find(id, mine), "running collective ", id, " not in the record");
  const Fingerprint f = fingerprint(mine);
  std::vector<Fingerprint> all(static_cast<size_t>(size()));
  // The check's own traffic is a debugging aid, not the job's: left out of the counts.
  const uint64_t sent0 = bytes_sent_.load(), received0 = bytes_received_.load();
  run_ours(algo::Collective::all_gather, {.send = &f, .recv = all.data(), .count = sizeof(Fingerprint) / 4});
  bytes_sent_ -= bytes_sent_.load() - sent0;
  bytes_received_ -= bytes_received_.load() - received0;
  std::vector<std::pair<Fingerprint, std::vector<int>>> calls;
  for (int r = 0; r < size(); ++r) {
    const Fingerprint& g = all[static_cast<size_t>(r)];
    auto it = std::find_if(calls.begin(), calls.end(),
                           [&](const auto& c) { return std::memcmp(&c.first, &g, sizeof g) == 0; });
    if (it == calls.end()) it = calls.insert(calls.end(), {g, {}});
    it->second.push_back(state_->world_rank_of(r));
  }
  if (calls.size() == 1) return;
  std::string msg = "collective mismatch on " + state_->group_text() + ":";
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& ranks = calls[i].second;
    msg += detail::concat(i ? ";" : "", " rank", ranks.size() > 1 ? "s" : "");
    for (int r : ranks) {
      msg += ' ';
      msg += std::to_string(r);
    }
    msg += " called " + from_fingerprint(calls[i].first).describe();
  }
  msg += ". Every rank of a group must call the same collectives in the same order "
         "(a rank that skipped one shows the call after it).";
  throw Error(msg);
}

std::shared_ptr<CommState> CommBase::child_state(const std::string& suffix,
                                                 const std::vector<int>& members,
                                                 int new_rank) const {
  if (!state_) return nullptr;
  std::vector<int> world;
  for (int m : members) world.push_back(state_->world_rank_of(m));
  return std::make_shared<CommState>(state_->uid + "/" + suffix, std::move(world), new_rank,
                                     monitor_->origin());
}

// ---- point-to-point ----

// A user's non-blocking operation: started when first waited on or polled (a loop of
// test() is a wait too, so its deadline counts from the first poll), completed when
// done. A poll after the monitor raised its signal throws.
class CommBase::TrackedWork final : public Work {
 public:
  TrackedWork(WorkPtr inner, std::shared_ptr<CommState> st, uint64_t id)
      : inner_(std::move(inner)), st_(std::move(st)), id_(id) {}
  ~TrackedWork() override {
    if (polling_) st_->remove_signal(id_);
    if (!finished_) st_->recorder.set_state(id_, OpState::failed, st_->now(), "handle dropped before completion");
  }
  void wait() override {
    if (finished_) return inner_->wait();
    finished_ = true;
    RunningOp op(*st_, id_, sig_);
    inner_->wait();
    op.done();
  }
  bool test() override {
    if (inner_->test()) {
      if (!finished_) {
        finished_ = true;
        st_->recorder.set_state(id_, OpState::completed, st_->now());
      }
      return true;
    }
    if (!polling_) {
      polling_ = true;
      sig_ = std::make_shared<OpSignal>();
      st_->add_signal(id_, sig_);
      st_->recorder.set_state(id_, OpState::started, st_->now());
    }
    if (sig_->raised.load(std::memory_order_acquire)) throw Error(sig_->error);
    return false;
  }
  void cancel() override {
    inner_->cancel();
    if (!finished_) {
      finished_ = true;
      st_->recorder.set_state(id_, OpState::failed, st_->now(), "cancelled");
    }
  }
  /// Records the op completed if the transport finished it already (a buffered send),
  /// without starting its deadline as a poll would.
  void complete_if_done() {
    if (inner_->test()) {
      finished_ = true;
      st_->recorder.set_state(id_, OpState::completed, st_->now());
    }
  }

 private:
  WorkPtr inner_;
  std::shared_ptr<CommState> st_;
  uint64_t id_;
  std::shared_ptr<OpSignal> sig_;  // set once polled
  bool finished_ = false, polling_ = false;
};

void CommBase::send(const void* buf, size_t bytes, int peer, int tag) {
  uint64_t id;
  if (!record_p2p("send", bytes, peer, tag, id)) return do_send(buf, bytes, peer, tag);
  RunningOp op(*state_, id);
  do_send(buf, bytes, peer, tag);
  op.done();
}

void CommBase::recv(void* buf, size_t bytes, int peer, int tag) {
  uint64_t id;
  if (!record_p2p("recv", bytes, peer, tag, id)) return do_recv(buf, bytes, peer, tag);
  RunningOp op(*state_, id);
  do_recv(buf, bytes, peer, tag);
  op.done();
}

void CommBase::sendrecv(const void* sbuf, size_t sbytes, int dst, void* rbuf, size_t rbytes,
                        int src, int tag) {
  uint64_t id;
  if (!record_p2p("sendrecv", rbytes, src, tag, id))
    return do_sendrecv(sbuf, sbytes, dst, rbuf, rbytes, src, tag);
  RunningOp op(*state_, id);
  do_sendrecv(sbuf, sbytes, dst, rbuf, rbytes, src, tag);
  op.done();
}

WorkPtr CommBase::isend(const void* buf, size_t bytes, int peer, int tag) {
  uint64_t id;
  if (!record_p2p("isend", bytes, peer, tag, id)) return do_isend(buf, bytes, peer, tag);
  auto w = std::make_shared<TrackedWork>(do_isend(buf, bytes, peer, tag), state_, id);
  w->complete_if_done();
  return w;
}

WorkPtr CommBase::irecv(void* buf, size_t bytes, int peer, int tag) {
  uint64_t id;
  if (!record_p2p("irecv", bytes, peer, tag, id)) return do_irecv(buf, bytes, peer, tag);
  return std::make_shared<TrackedWork>(do_irecv(buf, bytes, peer, tag), state_, id);
}

// ---- dispatch ----

// ---- zero-copy shared buffers ----

SharedBuffer CommBase::alloc_shared(size_t bytes) {
  OpRecord rec;
  rec.op = "alloc_shared";
  rec.count = bytes;  // no dtype: a count of bytes
  auto a = std::make_unique<SharedAllocation>(rank(), size(), bytes);
  run_collective(rec, [&] {
    // Every rank must ask for the same size: the blocks are laid out alike.
    std::vector<uint64_t> all(static_cast<size_t>(size()));
    const uint64_t mine = bytes;
    run_ours(algo::Collective::all_gather, {.send = &mine, .recv = all.data(), .count = 2});
    for (int q = 0; q < size(); ++q)
      BRAID_CHECK(all[static_cast<size_t>(q)] == bytes, "alloc_shared: rank ", rank(), " asked for ", bytes,
                  " bytes, rank ", q, " for ", all[static_cast<size_t>(q)], "; every rank must pass the same size");
    if (bytes == 0) return;
    const size_t block = kSharedHeaderBytes + (bytes + kSharedPage - 1) / kSharedPage * kSharedPage;
    a->map = map_shared(block);
    if (!a->map) {
      a->priv = Buffer(bytes, MemCategory::comm);
      return;
    }
    new (&a->control(rank())) SharedControl();
    algo::dissemination_barrier(*this);  // no rank reads control lines not yet made
    a->id = shared_->made++;  // the same on every rank: allocations are collective
    a->check_peers = [this] { check_peers(); };  // only called inside this communicator's collectives
    a->on_free = [reg = shared_](SharedAllocation* p) {
      std::lock_guard<std::mutex> g(reg->mu);
      reg->live.erase(std::remove(reg->live.begin(), reg->live.end(), p), reg->live.end());
    };
    std::lock_guard<std::mutex> g(shared_->mu);
    shared_->live.push_back(a.get());
  });
  return SharedBuffer(std::move(a));
}

std::unique_ptr<SharedMapping> CommBase::map_shared(size_t) { return nullptr; }

namespace {
// Every rank's block, each kept alive by every rank's mapping: a rank that leaves a
// collective first may free its buffer while a peer still reads its control lines.
class InProcessMapping final : public SharedMapping {
 public:
  std::vector<std::shared_ptr<Buffer>> keep;
};
}  // namespace

std::unique_ptr<SharedMapping> CommBase::map_in_process(size_t block_bytes) {
  auto mem = std::make_shared<Buffer>(block_bytes + kSharedPage, MemCategory::comm);
  const std::shared_ptr<Buffer>* mine = &mem;
  std::vector<const std::shared_ptr<Buffer>*> all(static_cast<size_t>(size()));
  static_assert(sizeof(mine) == 8);
  run_ours(algo::Collective::all_gather, {.send = &mine, .recv = all.data(), .count = 2});
  auto m = std::make_unique<InProcessMapping>();
  for (const auto* p : all) {
    m->keep.push_back(*p);
    m->block.push_back(page_aligned(m->keep.back()->data()));
  }
  algo::dissemination_barrier(*this);  // `mem` outlives every peer's copy of it
  return m;
}

SharedAllocation* CommBase::find_shared(const void* p, size_t bytes, Algorithm algo, size_t& off) const {
  if (algo != Algorithm::ring || bytes == 0) return nullptr;
  const auto* b = static_cast<const std::byte*>(p);
  std::lock_guard<std::mutex> g(shared_->mu);
  for (SharedAllocation* a : shared_->live) {
    const std::byte* lo = a->data(a->rank);
    if (b >= lo && b + bytes <= lo + a->bytes) {
      off = static_cast<size_t>(b - lo);
      return a;
    }
  }
  return nullptr;
}

void CommBase::count_zero_copy(size_t bytes_each_way) {
  count_sent(bytes_each_way);
  count_received(bytes_each_way);
}

void CommBase::do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                             Algorithm algo) {
  const size_t bytes = count * dtype_size(dtype);
  size_t off = 0;
  if (SharedAllocation* a = find_shared(recv, bytes, algo, off)) {
    // Out of place, the peers read the input where it lies when it is shared too.
    size_t in_off = off;
    const SharedAllocation* in = send == recv ? a : find_shared(send, bytes, algo, in_off);
    if (!in) {
      std::memcpy(recv, send, bytes);
      in = a;
      in_off = off;
    }
    zero_copy::all_reduce(*a, off, *in, in_off, count, dtype, op);
    return count_zero_copy(2 * bytes / static_cast<size_t>(size()) * static_cast<size_t>(size() - 1));
  }
  if (algo == Algorithm::native)
    native_all_reduce(send, recv, count, dtype, op);
  else
    run_ours(algo::Collective::all_reduce, {send, recv, count, dtype, op});
}

void CommBase::do_all_gather(const void* send, void* recv, size_t count, DType dtype,
                             Algorithm algo) {
  const size_t blk = count * dtype_size(dtype);
  size_t off = 0;
  if (SharedAllocation* a = find_shared(recv, blk * static_cast<size_t>(size()), algo, off)) {
    zero_copy::all_gather(*a, off, send, count, dtype);
    return count_zero_copy(blk * static_cast<size_t>(size() - 1));
  }
  if (algo == Algorithm::native)
    native_all_gather(send, recv, count, dtype);
  else
    run_ours(algo::Collective::all_gather, {send, recv, count, dtype});
}

void CommBase::do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op, Algorithm algo) {
  const size_t blk = count * dtype_size(dtype);
  size_t off = 0;
  if (SharedAllocation* a = find_shared(send, blk * static_cast<size_t>(size()), algo, off)) {
    zero_copy::reduce_scatter(*a, off, recv, count, dtype, op);
    return count_zero_copy(blk * static_cast<size_t>(size() - 1));
  }
  if (algo == Algorithm::native)
    native_reduce_scatter(send, recv, count, dtype, op);
  else
    run_ours(algo::Collective::reduce_scatter, {send, recv, count, dtype, op});
}

OpRecord CommBase::split_record() {
  OpRecord r;
  r.op = "split";
  r.count = 2;
  r.dtype = "i32";
  return r;
}

void CommBase::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          Algorithm algo) {
  run_collective(describe_collective("all_reduce", count, dtype, reduce_op_name(op)),
                 [&] { do_all_reduce(send, recv, count, dtype, op, algo); });
}

void CommBase::all_gather(const void* send, void* recv, size_t count, DType dtype,
                          Algorithm algo) {
  run_collective(describe_collective("all_gather", count, dtype),
                 [&] { do_all_gather(send, recv, count, dtype, algo); });
}

void CommBase::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                              Algorithm algo) {
  run_collective(describe_collective("reduce_scatter", count, dtype, reduce_op_name(op)),
                 [&] { do_reduce_scatter(send, recv, count, dtype, op, algo); });
}

void CommBase::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                          Algorithm algo) {
  run_collective(describe_collective("all_to_all", count, dtype),
                 [&] { do_all_to_all(send, recv, count, dtype, algo); });
}

void CommBase::do_all_to_all(const void* send, void* recv, size_t count, DType dtype, Algorithm algo) {
  const size_t blk = count * dtype_size(dtype), all = blk * static_cast<size_t>(size());
  size_t off = 0;
  SharedAllocation* out = find_shared(recv, all, algo, off);
  SharedAllocation* in = out ? nullptr : find_shared(send, all, algo, off);
  if (out || in) {
    const auto* i = static_cast<const std::byte*>(send);
    const auto* o = static_cast<const std::byte*>(recv);
    BRAID_CHECK(o + all <= i || i + all <= o, "all_to_all: send and recv overlap (", all,
                " bytes each); it is out-of-place only");
    // With a shared output each rank pushes its blocks (what it writes no one else
    // touches); with only a shared input each pulls its block from every rank's.
    if (out)
      zero_copy::all_to_all(*out, off, send, count, dtype);
    else
      zero_copy::all_to_all(*in, off, recv, count, dtype);
    return count_zero_copy(blk * static_cast<size_t>(size() - 1));
  }
  if (algo == Algorithm::native)
    native_all_to_all(send, recv, count, dtype);
  else
    run_ours(algo::Collective::all_to_all, {send, recv, count, dtype});
}

void CommBase::broadcast(void* buf, size_t count, DType dtype, int root, Algorithm algo) {
  run_collective(describe_collective("broadcast", count, dtype, "", root), [&] {
    size_t off = 0;
    if (SharedAllocation* a = find_shared(buf, count * dtype_size(dtype), algo, off)) {
      zero_copy::broadcast(*a, off, count, dtype, root);
      if (rank() == root) count_sent(count * dtype_size(dtype) * static_cast<size_t>(size() - 1));
      else count_received(count * dtype_size(dtype));
      return;
    }
    if (algo == Algorithm::native)
      native_broadcast(buf, count, dtype, root);
    else
      run_ours(algo::Collective::broadcast, {.recv = buf, .count = count, .dtype = dtype, .root = root});
  });
}

void CommBase::barrier() {
  OpRecord op;
  op.op = "barrier";
  run_collective(op, [&] { native_barrier(); });
}

WorkPtr CommBase::all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, Algorithm algo) {
  return enqueue(describe_collective("all_reduce", count, dtype, reduce_op_name(op)),
                 [=, this] { do_all_reduce(send, recv, count, dtype, op, algo); });
}

WorkPtr CommBase::all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                                   Algorithm algo) {
  return enqueue(describe_collective("all_gather", count, dtype),
                 [=, this] { do_all_gather(send, recv, count, dtype, algo); });
}

WorkPtr CommBase::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, Algorithm algo) {
  return enqueue(describe_collective("reduce_scatter", count, dtype, reduce_op_name(op)),
                 [=, this] { do_reduce_scatter(send, recv, count, dtype, op, algo); });
}

// ---- ours: the algorithm the selector picks ----

void CommBase::set_node_map(NodeMap m) {
  BRAID_CHECK(m.world() == size(), "node map of ", m.world(), " ranks for a group of ", size());
  node_map_ = std::move(m);
  node_shape_ = {node_map_.nodes(), node_map_.even(), node_map_.min_local()};
}

void CommBase::run_ours(algo::Collective op, const algo::CollectiveArgs& a) {
  const algo::CollectiveShape shape{op, a.count, dtype_size(a.dtype), size(), node_shape_};
  algo::select_algorithm(shape, ring_opts_).run(*this, workspace_, ring_opts_, a);
}

// ---- default "native" = ours ----

void CommBase::native_all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op) {
  run_ours(algo::Collective::all_reduce, {send, recv, count, dtype, op});
}
void CommBase::native_all_gather(const void* send, void* recv, size_t count, DType dtype) {
  run_ours(algo::Collective::all_gather, {send, recv, count, dtype});
}
void CommBase::native_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op) {
  run_ours(algo::Collective::reduce_scatter, {send, recv, count, dtype, op});
}
void CommBase::native_all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  run_ours(algo::Collective::all_to_all, {send, recv, count, dtype});
}
void CommBase::native_broadcast(void* buf, size_t count, DType dtype, int root) {
  run_ours(algo::Collective::broadcast, {.recv = buf, .count = count, .dtype = dtype, .root = root});
}
void CommBase::native_barrier() { run_ours(algo::Collective::barrier, {}); }

}  // namespace braid::comm
