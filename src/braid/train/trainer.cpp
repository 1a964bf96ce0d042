#include "braid/train/trainer.h"

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdio>
#include <limits>

#include "braid/core/error.h"
#include "braid/core/host_memory.h"
#include "braid/core/rng.h"
#include "braid/core/stopwatch.h"
#include "braid/parallel/context/operators.h"
#include "braid/parallel/context/ring_attention.h"
#include "braid/train/checkpoint_dir.h"
#include "braid/train/evaluation.h"
#include "braid/train/input_checks.h"
#include "braid/train/memory_check.h"
#include "braid/train/preemption.h"
#include "braid/train/replica_check.h"
#include "braid/train/resume.h"
#include "braid/train/sampling.h"

namespace braid::train {

Trainer::Trainer(const TrainOptions& options, comm::Communicator& world,
                 data::TokenView train, data::TokenView val)
    : opt_(options), world_(world), train_(train), val_(val), tracer_(std::make_shared<TraceRecorder>(options.trace_out)) {
  const model::GPTConfig cfg = parallel::model_config(opt_);
  opt_.nodes = world.node_map();
  plan_ = parallel::resolve_plan(opt_, world.size(), cfg);
  validate_training(opt_, world.size());
  const TrainOptions& opt = opt_;
  ctx_ = std::make_unique<parallel::ParallelContext>(plan_, world);
  ps_ = plan_.dp.parameter_server();
  tp_size_ = plan_.tp.degree;
  pp_size_ = plan_.pp.stages;
  tp_rank_ = ctx_->tp_rank();
  pp_rank_ = ctx_->pp_rank();
  dp_size_ = plan_.dp.degree;
  dp_rank_ = ctx_->dp_rank();
  cp_size_ = plan_.cp.degree;
  cp_layout_ = parallel::context::chunk_layout(opt.seq_len, cp_size_, ctx_->cp_rank());
  accum_steps_ = plan_.pp.micro_batches;
  check_token_data(opt, cfg, train, val);
  check_memory_before_allocating(opt, world);
  check_checkpoint_flags(opt, world.size());
  if (!opt.save_dir.empty() && world.rank() == 0) prepare_save_dir(opt.save_dir, !opt.resume.empty(), opt.verbose);
  // A checkpoint that cannot continue this run is refused before anything is allocated.
  resume_from_ = opt.resume.empty() ? "" : find_resume_file(opt, world);
  if (!resume_from_.empty())
    check_resume_header(read_any_checkpoint_header(resume_from_), resume_from_, opt, cfg, false);
  compute_ = plan_.compute;
  // The schedule (one stage: each micro-batch's forward then backward) and this rank's layers.
  parallel::ScheduleStats st;
  auto programs = plan_.pp.programs(&st);
  simulated_bubble_ = st.bubble;
  const model::PipelineStage stage = plan_.pp.stage(pp_rank_);
  sync_ = parallel::make_grad_sync(plan_, *ctx_, cfg, stage, &ledger_);
  model_ = std::make_unique<model::GPT>(cfg, opt.micro_batch, opt.seq_len / cp_size_, &ledger_, sync_->storage(),
                                        parallel::context::make_operators(ctx_->tp(), plan_.tp.sequence_parallel,
                                                                          ctx_->cp(), parallel::context::parse_cp_comm(plan_.cp.comm)),
                                        plan_.dropout, stage, plan_.recompute, plan_.precision());
  sync_->attach(*model_);
  executor_ = std::make_unique<parallel::PipelineExecutor>(
      std::move(programs[static_cast<size_t>(pp_rank_)]), plan_.pp.map(), static_cast<int>(accum_steps_),
      ctx_->pp(), boundary_bytes(plan_, cfg), &ledger_);
  scaler_ = std::make_unique<DynamicLossScaler>(opt.loss_scale, compute_ == DType::f16);
  optimizer_ = std::make_unique<AdamW>(AdamWSettings{opt.beta1, opt.beta2, opt.eps, opt.weight_decay}, *sync_,
                                       *model_,
                                       pp_size_ > 1 && pp_rank_ == plan_.pp.last_rank() &&
                                           pp_rank_ != plan_.pp.first_rank() && plan_.pp.tied_head,
                                       &ledger_);
  checkpoint_ = std::make_unique<TrainingCheckpoint>(opt_, *ctx_, *model_, *sync_, *optimizer_, *scaler_);
  const size_t bt = static_cast<size_t>(opt.micro_batch * opt.seq_len);
  tokens_ = Buffer(bt * sizeof(int32_t), MemCategory::activations, &ledger_);
  targets_ = Buffer(bt * sizeof(int32_t), MemCategory::activations, &ledger_);
  sampler_ = std::make_unique<data::DistributedSampler>(train.size(), opt.seq_len, opt.global_batch,
                                                  opt.seed, std::max(dp_rank_, 0), dp_size_);
  sched_ = LrSchedule{opt.lr, opt.min_lr, opt.warmup_steps, opt.steps};
  sync_->init_params(*model_, opt.seed);
  saver_ = std::make_unique<CheckpointSaver>(opt_, world, *checkpoint_, &ledger_);
}

Trainer::~Trainer() = default;

uint64_t Trainer::param_hash() { return sync_->hash_params(); }

float Trainer::clip_coef(float norm) const {
  return opt_.grad_clip > 0 && norm > opt_.grad_clip ? opt_.grad_clip / (norm + 1e-6f) : 1.0f;
}

uint64_t Trainer::bytes_sent() const { return ctx_->bytes_sent(); }

uint64_t Trainer::bytes_received() const { return ctx_->bytes_received(); }

void Trainer::finish_record(StepRecord& r, double seconds, uint64_t sent0, uint64_t recv0) {
  const int64_t T = opt_.seq_len;
  r.ms = seconds * 1e3;
  const double tokens = static_cast<double>(opt_.global_batch * T);
  r.tokens_per_sec = tokens / seconds;
  if (opt_.peak_flops_per_rank > 0) {
    // Only ranks that compute count towards the available FLOP/s.
    r.mfu = static_cast<double>(model_->flops_per_token(T)) * r.tokens_per_sec /
            (opt_.peak_flops_per_rank * dp_size_ * cp_size_ * tp_size_ * pp_size_);
  }
  r.peak_mem_bytes = ledger_.peak_total();
  r.comm_bytes_sent = bytes_sent() - sent0;
  r.comm_bytes_received = bytes_received() - recv0;
  if (opt_.check_replicas && world_.size() > 1) {
    r.param_hash = check_replicas(*ctx_, *model_, *sync_, r.step);
  }
}

void Trainer::update(StepRecord& r) {
  r.lr = sched_.at(r.step);
  // fp16: found-inf is reduced over every rank before any rank touches its
  // scale, so all ranks skip the same steps and keep the same scale.
  if (scaler_->enabled()) r.skipped = scaler_->update(found_inf_all_ranks(world_, sync_->local_grads_nonfinite()));
  if (r.skipped) {
    r.grad_norm = std::numeric_limits<float>::infinity();
  } else {
    // One global norm over the owned gradients (each element once), identical on all ranks.
    const float unscale = 1.0f / r.loss_scale;
    r.grad_norm = static_cast<float>(std::sqrt(optimizer_->global_grad_sumsq(*sync_, unscale, tp_rank_)));
    optimizer_->step(*sync_, r.lr, clip_coef(r.grad_norm) * unscale, r.step + 1);
    parallel::StepScalars sc{r.step, r.loss, r.grad_norm, r.lr};
    sync_->after_update(sc);
    r.loss = sc.loss, r.grad_norm = sc.grad_norm, r.lr = sc.lr;
  }
  // Same value on every rank, so every rank stops together. Steps are
  // numbered from 1 here, as the progress lines print them.
  BRAID_CONFIG_CHECK(std::isfinite(r.loss), "the loss became ", r.loss, " at step ", r.step + 1,
                     "; training diverged: lower --lr (now ", opt_.lr, ") or raise --warmup");
}

namespace {
// Evaluation mode (no dropout) for the life of the guard.
struct EvalMode {
  explicit EvalMode(model::GPT& m) : m(m) { m.set_training(false); }
  ~EvalMode() { m.set_training(true); }
  model::GPT& m;
};
}  // namespace

void Trainer::load_batch(data::TokenView data, const size_t* offsets, int64_t B, int64_t T) {
  int32_t *tokens = tokens_.as<int32_t>(), *targets = targets_.as<int32_t>();
  data::gather_batch(data, offsets, B, T, tokens, targets);
  if (cp_size_ == 1) return;
  parallel::context::keep_local_tokens(tokens, B, cp_layout_);
  parallel::context::keep_local_tokens(targets, B, cp_layout_);
}

float Trainer::batch_loss(data::TokenView tokens, const size_t* offsets, int64_t B, int64_t T) {
  BRAID_CHECK(cp_size_ == 1 || T == opt_.seq_len, "context parallel: windows of ", T, " tokens, the run's are ",
              opt_.seq_len);
  if (model_->is_first_stage() || model_->is_last_stage()) load_batch(tokens, offsets, B, T);
  float l = forward_pass(tokens_.as<int32_t>(), targets_.as<int32_t>(), B, T / cp_size_);
  // Each CP rank's mean over its equal share of the tokens: their mean is the sequence's.
  if (cp_size_ > 1) ctx_->cp()->all_reduce(&l, &l, 1, DType::f32, comm::ReduceOp::avg);
  // The loss lives on the last stage.
  if (pp_size_ > 1) ctx_->pp()->broadcast(&l, 1, DType::f32, plan_.pp.last_rank());
  return l;
}

float Trainer::evaluate() {
  BRAID_CHECK(!val_.empty(), "no validation data");
  EvalMode eval(*model_);
  // Under a parameter server the server evaluates alone; otherwise each DP rank
  // takes its slice and the losses are averaged.
  const int size = ps_ ? 1 : dp_size_, rank = ps_ ? 0 : dp_rank_;
  const ValidationShape shape{opt_.global_batch, opt_.micro_batch, opt_.seq_len, opt_.val_batches};
  return validation_loss(val_, shape, rank, size, std::bind_front(&Trainer::batch_loss, this),
                         size > 1 ? &ctx_->dp() : nullptr);
}

WindowLoss Trainer::evaluate_windows(data::TokenView tokens, int64_t max_windows) {
  BRAID_CONFIG_CHECK(!ps_, "evaluation runs without a parameter server; drop --dp-mode ps");
  BRAID_CONFIG_CHECK(cp_size_ == 1, "evaluation windows run on whole sequences; evaluate without --cp");
  const int64_t T = opt_.seq_len;
  // A window may run alone (the last ones), so its T rows must split over TP.
  BRAID_CONFIG_CHECK(!opt_.sequence_parallel || T % opt_.tp == 0, "--sequence-parallel shards a window's ", T,
                     " token rows over --tp ", opt_.tp, "; evaluate with a --seq-len divisible by ", opt_.tp);
  EvalMode eval(*model_);
  return window_loss(tokens, T, opt_.micro_batch, max_windows, dp_rank_, dp_size_,
                     std::bind_front(&Trainer::batch_loss, this), dp_size_ > 1 ? &ctx_->dp() : nullptr);
}

void Trainer::last_logits(const std::vector<int32_t>& context, int64_t len, float* row) {
  // Under TP each rank holds a slice of the vocabulary's logits: the last
  // stage's TP ranks gather the last position's row and send it back along the
  // pipeline, so every rank sees the full row and picks the same token.
  const int64_t Vp = model_->config().padded_vocab_size, Vpl = Vp / tp_size_;
  forward_pass(context.data(), nullptr, 1, static_cast<int64_t>(context.size()));
  if (model_->is_last_stage()) {
    if (tp_size_ > 1) {
      std::vector<float> mine(static_cast<size_t>(Vpl));
      model_->logits_to_f32(mine.data(), len - 1, 1);
      ctx_->tp()->all_gather(mine.data(), row, static_cast<size_t>(Vpl), DType::f32);
    } else {
      model_->logits_to_f32(row, len - 1, 1);
    }
  }
  if (pp_size_ > 1) ctx_->pp()->broadcast(row, static_cast<size_t>(Vp), DType::f32, plan_.pp.last_rank());
}

std::vector<int32_t> Trainer::sample(const std::vector<int32_t>& prompt, int64_t n, uint64_t seed) {
  BRAID_CONFIG_CHECK(cp_size_ == 1, "sampling runs on whole sequences; sample without --cp");
  EvalMode eval(*model_);
  // Sequence parallelism splits the token rows over TP: the context is rounded
  // up to a multiple of TP with trailing filler tokens.
  const int64_t P = opt_.sequence_parallel ? tp_size_ : 1;
  const Generation g{model_->config().vocab_size, opt_.seq_len / P * P, P, opt_.sample_top_k,
                     opt_.sample_temperature};
  Rng rng(seed);
  return generate(prompt, n, g, static_cast<size_t>(model_->config().padded_vocab_size),
                  std::bind_front(&Trainer::last_logits, this), rng);
}

void Trainer::save(const std::string& path, int64_t next_step) { checkpoint_->save(path, next_step); }

std::string Trainer::save_to_dir(int64_t next_step, bool final) { return saver_->save(next_step, final); }

int64_t Trainer::load(const std::string& path) { return checkpoint_->load(path); }

int64_t Trainer::load_weights(const std::string& path) { return checkpoint_->load_weights(path); }

std::vector<StepRecord> Trainer::run() {
  const bool print = opt_.verbose && world_.rank() == 0;
  RunLog log(opt_, plan_, print, world_.rank() == 0);
  tracer_->start(world_, print);
  trace_into(tracer_->enabled() ? tracer_ : nullptr);
  log.pipeline_summary(simulated_bubble_);
  const auto t_load = SteadyClock::now();
  const RssRise rise;
  if (!resume_from_.empty()) start_step_ = load(resume_from_);
  // Even under --quiet: supervisors (braid run --elastic) read where a run started.
  if (world_.rank() == 0) print_start_point(resume_from_, start_step_, *checkpoint_, opt_);
  if (print && !resume_from_.empty())
    std::printf("loaded in %.2f s (rank 0 read %.1f MiB; its resident memory rose %.1f MiB)\n", seconds_since(t_load),
                static_cast<double>(checkpoint_->loaded_bytes()) / (1 << 20),
                static_cast<double>(rise.peak_rise()) / (1 << 20));
  log.open(start_step_);
  const bool validate = !val_.empty() && opt_.val_every > 0;
  if (validate && start_step_ == 0) validate_now(log, 0);  // the starting point of the curve
  std::vector<StepRecord> out = run_steps(log, validate);
  trace_into(nullptr);
  tracer_->write(world_);
  if (stopped_at_ >= 0) finish_stopped_run();
  return out;
}

void Trainer::trace_into(const std::shared_ptr<TraceRecorder>& sink) {
  ctx_->set_span_sink(sink);
  model_->set_span_sink(sink.get());
  sync_->set_span_sink(sink.get());
}

void Trainer::validate_now(RunLog& log, int64_t step) {
  if (ps_ && world_.rank() != 0) return;  // the server evaluates alone
  log.validation(step, evaluate());
}

std::vector<StepRecord> Trainer::run_steps(RunLog& log, bool validate) {
  std::vector<StepRecord> out;
  if (ps_ && opt_.ps_async) {
    out = run_ps_async();
    for (const auto& r : out) log.step(r);
    if (stopped_at_ >= 0) return out;
    if (validate) validate_now(log, opt_.steps);
    if (!opt_.save_dir.empty()) save_to_dir(opt_.steps, true);
    return out;
  }
  for (int64_t step = start_step_; step < opt_.steps; ++step) {
    const double t_step = TraceRecorder::now_us();
    out.push_back(train_step(step));
    trace("step ", step + 1, "step", t_step, TraceRecorder::now_us());
    log.step(out.back());
    // A stop signal on any rank ends the run here on every rank, after the
    // same step; validation and the periodic save are skipped.
    if (stop_agreed()) {
      stopped_at_ = step + 1;
      break;
    }
    const bool last = step + 1 == opt_.steps;
    if (validate && ((step + 1) % opt_.val_every == 0 || last)) validate_now(log, step + 1);
    if (!opt_.save_dir.empty() && ((opt_.save_every > 0 && (step + 1) % opt_.save_every == 0) || last))
      save_to_dir(step + 1, last);
  }
  return out;
}

bool Trainer::stop_agreed() {
  // Two floats per step over the world: a message this small takes the
  // collectives' latency path (about a microsecond between two processes of
  // one host; see docs/USAGE.md, "Stopping a run"), nothing next to a step.
  // The same message carries whether an asynchronous save's write is still
  // running on any rank: once none is, the save commits here.
  float v[2] = {static_cast<float>(stop_signal()), saver_->writing() ? 1.f : 0.f};
  if (world_.size() > 1) world_.all_reduce(v, v, 2, DType::f32, comm::ReduceOp::max, opt_.algo);
  saver_->boundary(v[1] != 0);
  stop_signal_ = static_cast<int>(v[0]);
  return stop_signal_ != 0;
}

void Trainer::finish_stopped_run() {
  const bool saved = !opt_.save_dir.empty();
  const std::string path = saved ? save_to_dir(stopped_at_, true) : "";
  if (world_.rank() != 0) return;
  std::printf("braid train: %s received: stopped after step %lld of %lld; ", stop_signal_name(stop_signal_),
              static_cast<long long>(stopped_at_), static_cast<long long>(opt_.steps));
  if (saved) {
    std::printf("checkpoint saved to %s (resume with --resume %s)\n", path.c_str(), opt_.save_dir.c_str());
  } else {
    std::printf("no checkpoint (pass --save DIR to write one)\n");
  }
  std::fflush(stdout);
}

}  // namespace braid::train
