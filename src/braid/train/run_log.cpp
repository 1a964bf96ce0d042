#include "braid/train/run_log.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "braid/core/error.h"
#include "braid/core/memory.h"

namespace braid::train {

namespace {
// Drops the metrics rows after start_step (atomically: rename).
void truncate_metrics(const std::string& path, int64_t start_step) {
  std::ifstream in(path);
  if (!in.good()) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() > start_step) continue;
    kept += line + "\n";
  }
  in.close();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::ofstream(tmp) << kept;
  std::filesystem::rename(tmp, path);
}
}  // namespace

void Eta::tick(double now_s) {
  ticks_.push_back(now_s);
  if (ticks_.size() > kWindow + 1) ticks_.pop_front();
}

double Eta::seconds_left(int64_t remaining) const {
  if (ticks_.size() < 2) return -1;
  const double per_step = (ticks_.back() - ticks_.front()) / static_cast<double>(ticks_.size() - 1);
  return per_step * static_cast<double>(remaining);
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(s / 86400), static_cast<long long>(s % 86400 / 3600));
  }
  return buf;
}

RunLog::RunLog(const TrainOptions& opt, const parallel::ParallelPlan& plan, bool print, bool metrics)
    : opt_(opt), plan_(plan), print_(print), write_(metrics && !opt.metrics_out.empty()) {}

void RunLog::open(int64_t start_step) {
  t_open_ = std::chrono::steady_clock::now();
  if (!write_) return;
  if (start_step > 0) truncate_metrics(opt_.metrics_out, start_step);
  metrics_.open(opt_.metrics_out, start_step > 0 ? std::ios::app : std::ios::trunc);
  BRAID_CONFIG_CHECK(metrics_.good(), "cannot open --metrics-out ", opt_.metrics_out);
  if (!opt_.run_record.empty()) {
    // The run's configuration first (a resumed run appends its own, with the step it starts at).
    nlohmann::json r = nlohmann::json::parse(opt_.run_record);
    r["start_step"] = start_step;
    metrics_ << r.dump() << "\n" << std::flush;
  }
}

void RunLog::step(const StepRecord& r) {
  const bool ps = plan_.dp.parameter_server(), async = ps && plan_.dp.ps_async;
  const bool scaled = plan_.compute == DType::f16, pipeline = plan_.pp.stages > 1;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_open_).count();
  eta_.tick(elapsed);
  const double left = eta_.seconds_left(opt_.steps - (r.step + 1));
  if (print_) {
    std::printf("step %5lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.0f tok/s | %7.1f ms | MFU %5.1f%% | mem %s",
                static_cast<long long>(r.step + 1), static_cast<long long>(opt_.steps), r.loss, r.lr, r.grad_norm,
                r.tokens_per_sec, r.ms, r.mfu * 100, format_bytes(static_cast<double>(r.peak_mem_bytes)).c_str());
    if (ps)
      std::printf(" | server sent %s recv %s", format_bytes(static_cast<double>(r.comm_bytes_sent)).c_str(),
                  format_bytes(static_cast<double>(r.comm_bytes_received)).c_str());
    if (async) std::printf(" | staleness <= %lld", static_cast<long long>(r.staleness_max));
    if (scaled) std::printf(" | scale %g%s", r.loss_scale, r.skipped ? " (overflow: step skipped)" : "");
    if (pipeline) std::printf(" | bubble %.1f%%", 100 * r.bubble);
    std::printf(" | elapsed %s", format_duration(elapsed).c_str());
    if (left >= 0) std::printf(", ETA %s", format_duration(left).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  if (!metrics_.is_open()) return;
  nlohmann::json j = {{"step", r.step + 1},       {"loss", r.loss},     {"lr", r.lr},
                      {"grad_norm", r.grad_norm}, {"tokens_per_sec", r.tokens_per_sec},
                      {"ms", r.ms},               {"mfu", r.mfu},      {"peak_mem_bytes", r.peak_mem_bytes},
                      {"comm_bytes_sent", r.comm_bytes_sent}, {"comm_bytes_received", r.comm_bytes_received}};
  j["elapsed_s"] = elapsed;
  if (left >= 0) j["eta_s"] = left;
  if (async) j["staleness_max"] = r.staleness_max;
  if (pipeline) j["bubble"] = r.bubble;
  if (scaled) {
    j["loss_scale"] = r.loss_scale;
    j["skipped"] = r.skipped;
  }
  metrics_ << j.dump() << "\n" << std::flush;
}

void RunLog::validation(int64_t step, float loss) {
  if (print_) {
    std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(step), loss);
    std::fflush(stdout);
  }
  if (metrics_.is_open()) metrics_ << nlohmann::json{{"step", step}, {"val_loss", loss}}.dump() << "\n" << std::flush;
}

void RunLog::pipeline_summary(double simulated_bubble) {
  const int P = plan_.pp.stages, m = plan_.pp.micro_batches, v = plan_.pp.virtual_stages;
  if (!print_ || P == 1) return;
  const parallel::ScheduleDef& def = *plan_.pp.schedule;
  const std::string caveat = parallel::theory_assumption(def, P, m, v);
  std::printf("pipeline: %s, P=%d, m=%d, v=%d (stages, micro-batches, chunks per stage): simulated bubble "
              "%.1f%% (theory %.1f%%%s)",
              opt_.schedule.c_str(), P, m, v, 100 * simulated_bubble, 100 * parallel::theoretical_bubble(def, P, m, v),
              caveat.empty() ? "" : ("; " + caveat).c_str());
  if (m < P) std::printf("; fewer micro-batches than stages leave most stages idle: raise --batch or use --micro-batches");
  if (def.chunks == 0 && m % P != 0) {  // chunks chosen by --virtual-stages: Megatron's groups of P
    const auto f = parallel::check_schedule(parallel::build_schedule("1f1b", P, m), P, m);
    std::printf("; the last group of micro-batches is short (1f1b: %.1f%%)", 100 * f.bubble);
  }
  std::printf("\n");
}

}  // namespace braid::train
