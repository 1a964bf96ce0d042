// TrainingCheckpoint's sharded form: every rank writes the pieces assigned to
// it (checkpoint_pieces.h) and reads only what it holds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "braid/core/error.h"
#include "braid/core/file_io.h"
#include "braid/train/checkpoint_pieces.h"
#include "braid/train/training_checkpoint.h"

namespace braid::train {

namespace {
constexpr int kTagPieceList = 7301;

// Rank 0 gets every rank's string (its own first); the others an empty vector.
std::vector<std::string> gather_strings(comm::Communicator& w, const std::string& mine) {
  std::vector<std::string> out;
  if (w.rank() != 0) {
    const uint64_t n = mine.size();
    w.send(&n, sizeof n, 0, kTagPieceList);
    if (n > 0) w.send(mine.data(), n, 0, kTagPieceList);
    return out;
  }
  out.push_back(mine);
  for (int r = 1; r < w.size(); ++r) {
    uint64_t n = 0;
    w.recv(&n, sizeof n, r, kTagPieceList);
    std::string s(n, '\0');
    if (n > 0) w.recv(s.data(), n, r, kTagPieceList);
    out.push_back(std::move(s));
  }
  return out;
}

std::string piece_file_name(int rank, const std::string& token) {
  return detail::concat("r", rank, ".", token, ".bin");
}

std::string new_token() {
  std::random_device rd;
  const uint64_t t = (uint64_t{rd()} << 32) ^ rd() ^
                     static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                     (static_cast<uint64_t>(::getpid()) << 20);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(t));
  return buf;
}

nlohmann::json pieces_json(uint64_t bytes, const std::vector<formats::PieceMeta>& mine, const std::string& error) {
  nlohmann::json j = {{"bytes", bytes}, {"error", error}, {"pieces", nlohmann::json::array()}};
  for (const auto& p : mine)
    j["pieces"].push_back({p.tensor, p.state, p.box.row0, p.box.col0, p.box.rows, p.box.cols, p.begin, p.end,
                           p.offset, p.crc32});
  return j;
}

// Rank 0: adds rank r's file and pieces (as pieces_json wrote them) to m.
void add_rank_pieces(formats::ShardedMetadata& m, int r, const nlohmann::json& j, const std::string& token) {
  if (j["pieces"].empty()) return;
  const int64_t file = static_cast<int64_t>(m.files.size());
  m.files.push_back({piece_file_name(r, token), r, j["bytes"].get<uint64_t>()});
  for (const auto& a : j["pieces"]) {
    formats::PieceMeta p;
    p.tensor = a[0].get<int64_t>(), p.state = a[1].get<int>();
    p.box = {a[2].get<int64_t>(), a[3].get<int64_t>(), a[4].get<int64_t>(), a[5].get<int64_t>()};
    p.begin = a[6].get<int64_t>(), p.end = a[7].get<int64_t>();
    p.file = file, p.offset = a[8].get<uint64_t>();
    p.crc32 = a[9].get<std::vector<uint32_t>>();
    m.pieces.push_back(std::move(p));
  }
}
}  // namespace

struct TrainingCheckpoint::SavePlan {
  std::vector<HeldPiece> held;   // what this rank holds
  std::vector<WriteSpan> spans;  // what it writes
};

TrainingCheckpoint::TrainingCheckpoint(const TrainOptions& opt, parallel::ParallelContext& ctx, model::GPT& model,
                                       parallel::GradSync& sync, AdamW& optimizer, DynamicLossScaler& scaler)
    : opt_(opt),
      ctx_(ctx),
      model_(model),
      sync_(sync),
      optimizer_(optimizer),
      scaler_(scaler),
      tp_(ctx.tp() ? ctx.tp()->size() : 1),
      pp_(ctx.pp() ? ctx.pp()->size() : 1) {}

TrainingCheckpoint::~TrainingCheckpoint() = default;

const TrainingCheckpoint::SavePlan& TrainingCheckpoint::save_plan() {
  if (save_plan_) return *save_plan_;
  auto plan = std::make_unique<SavePlan>();
  comm::Communicator& w = ctx_.world();
  plan->held = held_pieces(model_.param_table(), sync_.owned(), ctx_.tp_rank(), tp_, pp_ > 1 && ctx_.pp_rank() > 0);
  // Every rank's held pieces, so that every rank computes the same assignment.
  const size_t W = static_cast<size_t>(w.size());
  std::vector<int64_t> counts(W);
  int64_t mine = static_cast<int64_t>(plan->held.size());
  w.all_gather(&mine, counts.data(), 2, DType::f32);
  const size_t most = static_cast<size_t>(*std::max_element(counts.begin(), counts.end()));
  std::vector<int64_t> send = encode_pieces(plan->held), all(W * most * kPieceWords);
  send.resize(most * kPieceWords, 0);
  if (most > 0) w.all_gather(send.data(), all.data(), most * kPieceWords * 2, DType::f32);
  std::vector<std::vector<HeldPiece>> held(W);
  for (size_t r = 0; r < W; ++r)
    held[r] = decode_pieces(all.data() + r * most * kPieceWords, static_cast<size_t>(counts[r]));
  plan->spans = assign_writers(held)[static_cast<size_t>(w.rank())];
  save_plan_ = std::move(plan);
  return *save_plan_;
}

std::string TrainingCheckpoint::begin_sharded_save(const std::string& dir) {
  comm::Communicator& w = ctx_.world();
  const SavePlan& plan = save_plan();
  std::string token;
  if (w.rank() == 0) {
    make_writable_directory(dir, "--save");
    token = new_token();
  }
  comm::broadcast_string(w, token, 0);  // also orders every rank's writes after the directory exists
  token_ = token;
  return plan.spans.empty() ? "" : piece_file_name(w.rank(), token);
}

std::vector<SaveItem> TrainingCheckpoint::save_items() {
  const SavePlan& plan = save_plan();
  const auto& owned = sync_.owned();
  std::vector<SaveItem> out;
  for (const auto& s : plan.spans) {
    const HeldPiece& h = plan.held[s.piece];
    const size_t flat = h.flat + static_cast<size_t>(s.begin - h.begin);
    const auto r = std::upper_bound(owned.begin(), owned.end(), flat,
                                    [](size_t x, const parallel::OwnedRange& o) { return x < o.offset + o.len; });
    BRAID_CHECK(r != owned.end() && r->offset <= flat, "checkpoint piece at flat ", flat, " is not owned");
    const size_t at = flat - r->offset;
    const float* src[3] = {sync_.master(*r) + at, optimizer_.m() + r->state + at, optimizer_.v() + r->state + at};
    for (int st = 0; st < 3; ++st) out.push_back({h.tensor, st, h.box, s.begin, s.end, src[st]});
  }
  return out;
}

formats::ShardedMetadata TrainingCheckpoint::save_metadata(int64_t next_step) const {
  formats::ShardedMetadata m;
  const auto full = model::param_table(model_.config(), 1);
  m.header = header(next_step, model::unit_bounds(model_.config(), 1).back());
  m.layout = {{"world", ctx_.world().size()}, {"tp", tp_},           {"pp", pp_},
              {"cp", opt_.cp},                {"dp_mode", opt_.dp_mode}, {"zero", opt_.zero},
              {"fsdp_shard_size", opt_.fsdp_shard_size}, {"precision", opt_.precision}};
  for (const auto& p : full) m.tensors.push_back({p.name, p.full_shape});
  return m;
}

bool TrainingCheckpoint::fault_armed(const formats::SaveFault& fault) const {
  return fault.phase != formats::SavePhase::none && fault.rank == ctx_.world().rank();
}

std::vector<formats::PieceMeta> write_save_items(const std::string& dir, const std::string& file,
                                                 const std::vector<SaveItem>& items, const formats::SaveFault& fault,
                                                 bool armed, uint64_t& bytes) {
  std::vector<formats::PieceMeta> out;
  formats::PieceFileWriter w(dir, file, fault, armed);
  for (const auto& it : items) {
    formats::PieceMeta p;
    p.tensor = it.tensor, p.state = it.state, p.box = it.box, p.begin = it.begin, p.end = it.end;
    p.offset = w.append(it.data, static_cast<size_t>(it.end - it.begin), p.crc32);
    out.push_back(std::move(p));
  }
  w.finish();
  bytes = w.bytes();
  return out;
}

void TrainingCheckpoint::commit_sharded_save(const std::string& dir, formats::ShardedMetadata meta, uint64_t bytes,
                                             const std::vector<formats::PieceMeta>& mine, const std::string& error,
                                             const formats::SaveFault& fault) {
  comm::Communicator& w = ctx_.world();
  const auto lists = gather_strings(w, pieces_json(bytes, mine, error).dump());
  std::string status;  // rank 0's verdict: "" or the first failure
  if (w.rank() == 0) {
    try {
      for (size_t r = 0; r < lists.size() && status.empty(); ++r) {
        const auto j = nlohmann::json::parse(lists[r]);
        if (!j["error"].get<std::string>().empty())
          status = detail::concat("rank ", r, " could not write its checkpoint pieces: ", j["error"].get<std::string>());
        else
          add_rank_pieces(meta, static_cast<int>(r), j, token_);
      }
      if (status.empty()) {
        sync_directory(dir);  // every piece file's rename is durable before the commit
        if (fault.phase == formats::SavePhase::before_metadata) formats::die_here();
        write_sharded_metadata(dir, meta, fault);
        for (const auto& f : formats::unreferenced_files(dir)) std::filesystem::remove(f);
      }
    } catch (const std::exception& e) {
      status = detail::concat("rank 0 could not commit checkpoint ", dir, ": ", e.what());
    }
  }
  comm::broadcast_string(w, status, 0);
  BRAID_CONFIG_CHECK(status.empty(), status);
}

void TrainingCheckpoint::save_sharded(const std::string& dir, int64_t next_step, const formats::SaveFault& fault) {
  const std::string file = begin_sharded_save(dir);
  const auto items = save_items();
  uint64_t bytes = 0;
  std::string error;
  std::vector<formats::PieceMeta> mine;
  try {
    if (!file.empty()) mine = write_save_items(dir, file, items, fault, fault_armed(fault), bytes);
  } catch (const std::exception& e) {
    error = e.what();
  }
  commit_sharded_save(dir, save_metadata(next_step), bytes, mine, error, fault);
}

int64_t TrainingCheckpoint::load_sharded(const std::string& dir, bool weights_only) {
  formats::ShardedCheckpointReader reader(dir);
  const formats::ShardedMetadata& m = reader.metadata();
  check_resume_header(m.header, dir, opt_, model_.config(), weights_only);
  const auto& table = model_.param_table();
  auto state = [&](int s) { return sharded_flat_reader(reader, table, ctx_.tp_rank(), tp_, s); };
  if (!weights_only) optimizer_.load_state(state(1), state(2));
  sync_.load_params(state(0));
  loaded_bytes_ = reader.bytes_read();
  return apply_header(m.header, weights_only);
}

}  // namespace braid::train
