#include "braid/comm/watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "braid/core/error.h"

namespace braid::comm {
namespace {

thread_local OpContext* tl_op = nullptr;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Wire format of the control communicator. Every rank runs the same binary, so the
// structs travel as raw bytes.
constexpr int kQueryTag = 1;
constexpr int kReplyTagBase = 100;  // + query id mod kReplyTags
constexpr int kReplyTags = 30000;

struct Query {
  uint64_t uid_hash;  // the communicator asked about
  int64_t seq;        // its collective sequence number, -1 for point-to-point
  int32_t from;       // world rank asking
  int32_t qid;        // selects the reply tag
};

enum Reached : int32_t { kUnknownGroup = 0, kNotReached = 1, kInIt = 2, kPassed = 3 };

struct Reply {
  int32_t world_rank;
  int32_t reached;   // Reached, for a collective
  int64_t next_seq;  // collectives this rank has called on that communicator
  double waited_s;   // time spent in the op so far (kInIt)
  int32_t blocked;   // 1: the rank is waiting in some operation right now
  int32_t pad;
  char activity[224];  // what the rank is doing, for the message
};

std::string fmt_s(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s < 10 ? "%.2f s" : "%.1f s", s);
  return b;
}

// A time stamp of the record: seconds since the monitor started, to the millisecond.
std::string fmt_t(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s);
  return b;
}

std::string join_ranks(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(v[i]);
  }
  return s;
}

// What the peers said about one timed-out operation (got[i]: targets[i] answered).
struct PeerAnswers {
  std::vector<int> targets;
  std::vector<Reply> replies;
  std::vector<bool> got;
};

// Sends q to every target over the control communicator and collects the
// replies for answer_s seconds, serving the peers' own questions meanwhile.
PeerAnswers ask_peers(Communicator& control, const Query& q, std::vector<int> targets, double answer_s,
                      const std::function<void()>& serve, const std::function<double()>& now) {
  PeerAnswers a;
  a.targets = std::move(targets);
  const size_t n = a.targets.size();
  a.replies.resize(n);
  a.got.assign(n, false);
  std::vector<WorkPtr> rw(n), qw(n);
  try {
    for (size_t i = 0; i < n; ++i) {
      rw[i] = control.irecv(&a.replies[i], sizeof(Reply), a.targets[i], kReplyTagBase + q.qid % kReplyTags);
      qw[i] = control.isend(&q, sizeof q, a.targets[i], kQueryTag);
    }
    const double until = now() + answer_s;
    for (size_t left = n; left > 0 && now() < until;) {
      serve();  // peers asking us at the same time must get their answers
      for (size_t i = 0; i < n; ++i)
        if (!a.got[i] && rw[i]->test()) {
          a.got[i] = true;
          --left;
        }
      if (left) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const std::exception&) {
    // The control communicator failed (the job is aborting): report what we have.
  }
  for (auto* v : {&rw, &qw})
    for (auto& w : *v)
      if (w) {
        try {
          w->cancel();
        } catch (...) {
        }
      }
  return a;
}

struct TimeoutFacts {
  const OpRecord& op;
  std::string group;
  double timeout_s;
  int me;
  double waited, answer_s;
  std::string record_dir;
  PeerAnswers answers;
  const std::vector<std::string>* hosts = nullptr;  // world rank -> host; null or empty: not named
};

// " on host h1" / " on hosts h1, h2": the hosts of `ranks` when the job spans
// several (on one host the name adds nothing).
std::string host_clause(const std::vector<int>& ranks, const std::vector<std::string>* hosts) {
  if (!hosts || hosts->empty()) return "";
  bool several = false;
  for (const std::string& h : *hosts) several = several || h != hosts->front();
  if (!several) return "";
  std::vector<std::string> named;
  for (int r : ranks)
    if (r >= 0 && static_cast<size_t>(r) < hosts->size() &&
        std::find(named.begin(), named.end(), (*hosts)[static_cast<size_t>(r)]) == named.end())
      named.push_back((*hosts)[static_cast<size_t>(r)]);
  std::string s = named.size() > 1 ? " on hosts " : " on host ";
  for (size_t i = 0; i < named.size(); ++i) s += (i ? ", " : "") + named[i];
  return s;
}

// " Never reached it: ranks 1, 3 on host h1 (detail)." style clause; empty when no rank.
std::string rank_clause(const char* lead, const std::vector<int>& ranks, const std::string& tail,
                        const std::vector<std::string>* hosts = nullptr) {
  if (ranks.empty()) return "";
  std::string s(lead);
  s += ranks.size() > 1 ? ": ranks " : ": rank ";
  s += join_ranks(ranks);
  s += host_clause(ranks, hosts);
  s += tail;
  s += '.';
  return s;
}

// The job's one message for a timed-out operation, from the peers' answers;
// *in_it gets the ranks waiting in it (this one first), *peer_blocked whether
// a point-to-point peer is itself waiting in an operation.
std::string timeout_message(const TimeoutFacts& f, std::vector<int>* in_it, bool* peer_blocked) {
  const OpRecord& op = f.op;
  std::string msg = detail::concat("comm timeout: ", op.describe(), " on ", f.group, " did not complete within ",
                                   f.timeout_s, " s on rank ", f.me, ".");
  std::vector<int> never, silent, passed;
  std::string never_detail, waits = detail::concat("rank ", f.me, " ", fmt_s(f.waited));
  in_it->assign(1, f.me);
  for (size_t i = 0; i < f.answers.targets.size(); ++i) {
    const int who = f.answers.targets[i];
    if (!f.answers.got[i]) {
      silent.push_back(who);
      continue;
    }
    const Reply& r = f.answers.replies[i];
    if (!op.collective()) {
      *peer_blocked = r.blocked != 0;
      msg += detail::concat(" Rank ", who, " is ", r.activity, ".");
    } else if (r.reached == kInIt) {
      in_it->push_back(who);
      waits += detail::concat(", rank ", who, " ", fmt_s(r.waited_s));
    } else if (r.reached == kPassed) {
      passed.push_back(who);
    } else {
      never.push_back(who);
      never_detail += detail::concat(never_detail.empty() ? "" : "; ", "rank ", who, ": ",
                                     r.reached == kUnknownGroup ? "does not have this group"
                                                                : detail::concat("called ", r.next_seq, " collectives on it"),
                                     ", ", r.activity);
    }
  }
  msg += rank_clause(" Never reached it", never, " (" + never_detail + ")", f.hosts);
  msg += rank_clause((" No answer within " + fmt_s(f.answer_s) + " (stopped, or hung outside braid)").c_str(), silent,
                     "", f.hosts);
  msg += rank_clause(" Already past it (mismatched collectives? run with --debug-collectives)", passed, "");
  if (op.collective()) msg += " Waited in it: " + waits + ".";
  if (!f.record_dir.empty()) msg += " Flight records: " + f.record_dir + "/flight_record_rank<R>.json.";
  return msg;
}

}  // namespace

bool OpSignal::raise(const std::string& message) {
  std::lock_guard<std::mutex> lk(mu_);
  if (raised.load()) return false;
  error = message;
  raised.store(true, std::memory_order_release);
  return true;
}

// ---- CommState ----

CommState::CommState(std::string id, std::vector<int> ranks, int my_rank,
                     std::chrono::steady_clock::time_point t0)
    : uid(std::move(id)), uid_hash(fnv1a(uid)), world_ranks(std::move(ranks)), rank(my_rank), t0_(t0) {}

double CommState::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

std::string CommState::group_text() const { return "world ranks [" + join_ranks(world_ranks) + "]"; }

int CommState::world_rank_of(int group_rank) const {
  if (group_rank < 0 || group_rank >= static_cast<int>(world_ranks.size())) return group_rank;
  return world_ranks[static_cast<size_t>(group_rank)];
}

std::shared_ptr<OpSignal> CommState::signal(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = signals_.find(id);
  return it == signals_.end() ? nullptr : it->second;
}
void CommState::add_signal(uint64_t id, std::shared_ptr<OpSignal> s) {
  std::lock_guard<std::mutex> lk(mu_);
  signals_[id] = std::move(s);
}
void CommState::remove_signal(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  signals_.erase(id);
}

// ---- the running op of this thread ----

OpContext* current_op() { return tl_op; }

void poll_signals() {
  for (OpContext* c = tl_op; c; c = c->prev)
    if (c->signal && c->signal->raised.load(std::memory_order_acquire)) throw RankFailure(c->signal->error);
}

RunningOp::RunningOp(CommState& st, uint64_t id, std::shared_ptr<OpSignal> sig)
    : st_(st), id_(id), sig_(sig ? std::move(sig) : std::make_shared<OpSignal>()) {
  st_.add_signal(id_, sig_);
  st_.recorder.set_state(id_, OpState::started, st_.now());
  ctx_ = {&st_, id_, sig_.get(), tl_op};
  tl_op = &ctx_;
}

void RunningOp::done() {
  st_.recorder.set_state(id_, OpState::completed, st_.now());
  finished_ = true;
}

RunningOp::~RunningOp() {
  tl_op = ctx_.prev;
  st_.remove_signal(id_);
  // Left without done(): an exception (a peer failed, a deadline passed) ended it.
  if (!finished_)
    st_.recorder.set_state(id_, OpState::failed, st_.now(),
                           sig_->raised.load() ? sig_->error.substr(0, 200) : "exception");
}

// ---- Monitor ----

struct Monitor::Pending {
  std::weak_ptr<CommState> state;
  uint64_t id;
  std::shared_ptr<OpSignal> sig;
  std::string message;
  double raise_at;  // deliver the error to the waiter then
  double abort_at;  // still waiting then: end the job
  bool raised = false;
};

// Answers questions from every peer: one receive posted per peer on the control
// communicator, replies sent as they are computed.
struct Monitor::Server {
  std::vector<Query> q;
  std::vector<WorkPtr> qw;
  std::vector<Reply> r;
  std::vector<WorkPtr> rw;
  bool broken = false;  // the control communicator failed (job aborting): stop serving
};

Monitor::Monitor(CommOptions opt, int world_rank, int world_size,
                 std::unique_ptr<Communicator> control,
                 std::function<void(const std::string&)> hard_abort, bool separate_processes)
    : opt_(std::move(opt)), world_rank_(world_rank), world_size_(world_size),
      control_(std::move(control)), hard_abort_(std::move(hard_abort)),
      separate_processes_(separate_processes), t0_(std::chrono::steady_clock::now()),
      server_(std::make_unique<Server>()) {
  opt_.validate();
  const size_t n = static_cast<size_t>(world_size_);
  server_->q.resize(n);
  server_->qw.resize(n);
  server_->r.resize(n);
  server_->rw.resize(n);
  thread_ = std::thread([this] { loop(); });
}

Monitor::~Monitor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  // No posted receive may outlive the server's buffers.
  for (auto* v : {&server_->qw, &server_->rw})
    for (auto& w : *v)
      if (w) {
        try {
          w->cancel();
        } catch (...) {
        }
        w.reset();
      }
}

double Monitor::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void Monitor::attach(const std::shared_ptr<CommState>& s) {
  std::lock_guard<std::mutex> lk(mu_);
  states_.erase(std::remove_if(states_.begin(), states_.end(), [](auto& w) { return w.expired(); }),
                states_.end());
  states_.push_back(s);
}

std::vector<std::shared_ptr<CommState>> Monitor::states() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::shared_ptr<CommState>> out;
  for (const auto& w : states_)
    if (auto s = w.lock()) out.push_back(std::move(s));
  return out;
}

void Monitor::loop() {
  while (!stop_.load()) {
    serve();
    try {
      check_deadlines();
      report_interrupted_wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "braid: rank %d: watchdog: %s\n", world_rank_, e.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// What this rank is doing, in a phrase: its oldest running operation, or its last one.
std::string Monitor::activity(bool* waiting, double* waited) const {
  const double t = now();
  std::optional<std::pair<OpRecord, std::string>> oldest, last;
  for (const auto& s : states()) {
    for (const auto& r : s->recorder.unfinished())
      if (r.state == OpState::started && (!oldest || r.t_started < oldest->first.t_started))
        oldest = {r, s->group_text()};
    auto rec = s->recorder.recent();
    for (auto it = rec.rbegin(); it != rec.rend(); ++it)
      if (it->state == OpState::completed) {
        if (!last || it->t_completed > last->first.t_completed) last = {*it, s->group_text()};
        break;
      }
  }
  if (waiting) *waiting = oldest.has_value();
  if (waited) *waited = oldest ? t - oldest->first.t_started : 0.0;
  if (oldest)
    return "waiting " + fmt_s(t - oldest->first.t_started) + " in " + oldest->first.describe() +
           " on " + oldest->second;
  if (last)
    return "not in a communication call (last: " + last->first.describe() + " on " + last->second +
           ", finished " + fmt_s(t - last->first.t_completed) + " ago)";
  return "not in a communication call (none made yet)";
}

void Monitor::warn_long_wait(double t) {
  if (opt_.timeout_s < 4) return;  // shorter deadlines speak soon enough themselves
  std::optional<OpRecord> oldest;
  std::string group;
  std::pair<uint64_t, uint64_t> key;
  for (const auto& s : states())
    for (const auto& op : s->recorder.unfinished())
      if (op.state == OpState::started && (!oldest || op.t_started < oldest->t_started)) {
        oldest = op;
        group = s->group_text();
        key = {s->uid_hash, op.id};
      }
  if (!oldest || t - oldest->t_started < opt_.timeout_s / 2 || key == warned_) return;
  warned_ = key;
  std::fprintf(stderr, "braid: rank %d%s: still waiting after %s (half of --comm-timeout %g s) in %s on %s\n",
               world_rank_, host_clause({world_rank_}, &hosts_).c_str(), fmt_s(t - oldest->t_started).c_str(),
               opt_.timeout_s, oldest->describe().c_str(), group.c_str());
  std::fflush(stderr);
}

void Monitor::report_interrupted_wait() {
  if (interrupt_reported_ || !opt_.stop_signal) return;
  const int sig = opt_.stop_signal();
  if (sig == 0) return;
  bool waiting = false;
  double waited = 0;
  const std::string what = activity(&waiting, &waited);
  if (!waiting || waited < 1.0) return;
  interrupt_reported_ = true;
  const std::string host = host_clause({world_rank_}, &hosts_);
  std::fprintf(stderr, "braid: rank %d%s: signal %d (%s) arrived while it was %s\n", world_rank_, host.c_str(), sig,
               strsignal(sig), what.c_str());
  std::fflush(stderr);
}

void Monitor::serve() {
  Server& sv = *server_;
  if (sv.broken || world_size_ < 2) return;
  std::lock_guard<std::mutex> fence(fence_);
  try {
    for (int p = 0; p < world_size_; ++p) {
      if (p == world_rank_) continue;
      const size_t i = static_cast<size_t>(p);
      if (sv.rw[i] && sv.rw[i]->test()) sv.rw[i].reset();
      if (!sv.qw[i]) sv.qw[i] = control_->irecv(&sv.q[i], sizeof(Query), p, kQueryTag);
      if (sv.rw[i] || !sv.qw[i]->test()) continue;  // previous reply still in flight: later
      sv.qw[i].reset();
      const Query q = sv.q[i];
      Reply& r = sv.r[i];
      std::memset(&r, 0, sizeof r);
      r.world_rank = world_rank_;
      r.reached = kUnknownGroup;
      for (const auto& s : states()) {
        if (s->uid_hash != q.uid_hash) continue;
        r.next_seq = s->next_seq.load();
        if (q.seq < 0) break;
        r.reached = r.next_seq <= q.seq ? kNotReached : kPassed;
        for (const auto& op : s->recorder.unfinished())
          if (op.seq == q.seq) {
            r.reached = kInIt;
            r.waited_s = op.t_started >= 0 ? now() - op.t_started : 0;
          }
      }
      bool waiting = false;
      const std::string a = activity(&waiting);
      r.blocked = waiting;
      std::snprintf(r.activity, sizeof r.activity, "%s", a.c_str());
      sv.rw[i] = control_->isend(&r, sizeof r, p, kReplyTagBase + q.qid % kReplyTags);
      if (!dumped_) {
        dumped_ = true;  // the asking rank timed out: keep this rank's side of the story
        dump_record(detail::concat("asked by rank ", q.from, " after its deadline passed"), false);
      }
    }
  } catch (const std::exception&) {
    sv.broken = true;  // the job is being aborted; nobody needs answers any more
  }
}

void Monitor::check_deadlines() {
  const double t = now();
  for (auto& p : pending_) {
    if (!p->raised && t >= p->raise_at) {
      p->sig->raise(p->message);
      p->raised = true;
    }
    auto st = p->state.lock();
    OpRecord r;
    if (p->raised && t >= p->abort_at && st && st->recorder.find(p->id, r) &&
        r.state == OpState::started) {
      // The waiter cannot be interrupted (a transport's own blocking call): end the job.
      hard_abort_(p->message);
      p->abort_at = 1e300;
    }
  }
  warn_long_wait(t);
  for (const auto& s : states())
    for (const auto& op : s->recorder.unfinished()) {
      if (op.state != OpState::started || t - op.t_started < opt_.timeout_s) continue;
      auto sig = s->signal(op.id);
      if (!sig || sig->handled.exchange(true)) continue;
      handle_timeout(s, op, sig);
    }
}

void Monitor::handle_timeout(const std::shared_ptr<CommState>& st, const OpRecord& op,
                             const std::shared_ptr<OpSignal>& sig) {
  // Whom to ask: the whole group for a collective, the peer for point-to-point.
  std::vector<int> targets;
  if (op.collective()) {
    for (int r : st->world_ranks)
      if (r != world_rank_) targets.push_back(r);
  } else {
    targets.push_back(st->world_rank_of(op.peer));
  }
  const int32_t qid = next_query_++ + world_rank_ * 1000;
  const Query q{st->uid_hash, op.seq, world_rank_, qid};
  TimeoutFacts f{op, st->group_text(), opt_.timeout_s, world_rank_, 0.0,
                 std::clamp(opt_.timeout_s, 1.0, 5.0), opt_.record_dir, {}};
  f.hosts = &hosts_;
  f.answers = ask_peers(*control_, q, std::move(targets), f.answer_s, [this] { serve(); }, [this] { return now(); });
  f.waited = now() - op.t_started;
  std::vector<int> in_it;
  bool peer_blocked = false;
  const std::string msg = timeout_message(f, &in_it, &peer_blocked);
  // One message per job: for a collective the lowest rank waiting in it reports; for
  // point-to-point the rank whose peer is not itself waiting on someone else.
  const bool reporter = op.collective() ? *std::min_element(in_it.begin(), in_it.end()) == world_rank_
                                        : !peer_blocked;
  dump_record(msg, true);
  deliver_timeout(st, op, sig, msg, reporter);
}

void Monitor::deliver_timeout(const std::shared_ptr<CommState>& st, const OpRecord& op,
                              const std::shared_ptr<OpSignal>& sig, const std::string& msg, bool reporter) {
  auto p = std::make_unique<Pending>();
  p->state = st;
  p->id = op.id;
  p->sig = sig;
  p->message = msg;
  p->raise_at = now();
  if (!reporter) {
    // The reporter's failure normally ends this wait first (the job's abort, or
    // MPI_Abort killing this process); this is the fallback.
    p->raise_at += separate_processes_ ? 3.0 : 1.0;
    if (!separate_processes_)
      p->message = detail::concat("aborted: rank ", world_rank_, " timed out as well (",
                                  op.describe(), ")");
  }
  p->abort_at = p->raise_at + 2.0;
  pending_.push_back(std::move(p));
  check_deadlines();  // delivers now when due
}

std::string Monitor::record_json(const std::string& reason) const {
  nlohmann::json j;
  j["rank"] = world_rank_;
  j["world_size"] = world_size_;
  j["timeout_s"] = opt_.timeout_s;
  j["reason"] = reason;
  j["time_s"] = now();
  nlohmann::json comms = nlohmann::json::array();
  for (const auto& s : states()) {
    auto ops = s->recorder.recent();
    const uint64_t first = ops.empty() ? 0 : ops.front().id;
    for (const auto& r : s->recorder.unfinished())
      if (r.id < first) ops.insert(ops.begin(), r);
    comms.push_back({{"uid", s->uid},
                     {"world_ranks", s->world_ranks},
                     {"collectives_called", s->next_seq.load()},
                     {"ops", to_json(ops)}});
  }
  j["communicators"] = std::move(comms);
  return j.dump(1);
}

void Monitor::dump_record(const std::string& reason, bool to_stderr) const {
  if (to_stderr) {
    std::string out = detail::concat("braid: rank ", world_rank_, " flight record (now ", fmt_t(now()),
                                     " s since start; the last operations of each group):\n");
    for (const auto& s : states()) {
      out += "  " + s->group_text() + ":\n";
      for (const auto& r : s->recorder.recent()) {
        out += detail::concat("    ", r.describe(), " ", op_state_name(r.state), " queued ", fmt_t(r.t_queued));
        if (r.t_started >= 0) out += " started " + fmt_t(r.t_started);
        if (r.t_completed >= 0) out += " ended " + fmt_t(r.t_completed);
        if (!r.error.empty()) out += " error: " + r.error.substr(0, 120);
        out += "\n";
      }
    }
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
  }
  if (opt_.record_dir.empty()) return;
  namespace fs = std::filesystem;
  const fs::path path = fs::path(opt_.record_dir) / detail::concat("flight_record_rank", world_rank_, ".json");
  const fs::path tmp = path.string() + ".tmp";
  std::error_code ec;
  fs::create_directories(opt_.record_dir, ec);
  {
    std::ofstream f(tmp);
    f << record_json(reason) << "\n";
    if (!f) return;
  }
  fs::rename(tmp, path, ec);
}

}  // namespace braid::comm
