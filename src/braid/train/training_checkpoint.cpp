#include "braid/train/training_checkpoint.h"

#include "braid/formats/model_header.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "braid/core/error.h"
#include "braid/formats/checkpoint.h"
#include "braid/formats/model_header.h"

namespace braid::train {

void TrainingCheckpoint::to_full(const float* local, std::vector<float>& full) {
  const auto& lt = model_.param_table();
  const auto ft = model::param_table(model_.config(), 1);
  const size_t nl = model_.num_params();
  std::vector<float> all;
  const float* ranks_data = local;
  if (tp_ > 1) {
    all.resize(nl * static_cast<size_t>(tp_));
    ctx_.tp()->all_gather(local, all.data(), nl, DType::f32);
    ranks_data = all.data();
  }
  full.assign(model::unit_bounds(model_.config(), 1).back(), 0.f);
  for (int q = 0; q < tp_; ++q) {
    const float* src = ranks_data + static_cast<size_t>(q) * nl;
    for (const auto& p : lt) {
      // The last stage's copy of the tied embedding unit (wte, wpe) equals the first stage's.
      if (pp_ > 1 && ctx_.pp_rank() > 0 && p.layer < 0) continue;
      const size_t o = ft[p.global_index].offset;
      for (size_t i = 0; i < p.numel; ++i) full[o + model::full_index(p, i, q, tp_)] = src[p.offset + i];
    }
  }
  // Pipeline: each stage filled its own tensors; the sum has one non-zero term per element (exact).
  if (pp_ > 1) ctx_.pp()->all_reduce(full.data(), full.data(), full.size(), DType::f32, comm::ReduceOp::sum);
}

void TrainingCheckpoint::from_full(const float* full, float* local) const {
  const auto& lt = model_.param_table();
  const auto ft = model::param_table(model_.config(), 1);
  std::fill(local, local + model_.num_params(), 0.f);
  for (const auto& p : lt) {
    const size_t o = ft[p.global_index].offset;
    for (size_t i = 0; i < p.numel; ++i)
      local[p.offset + i] = full[o + model::full_index(p, i, ctx_.tp_rank(), tp_)];
  }
}

void TrainingCheckpoint::save(const std::string& path, int64_t next_step, const formats::SaveFault& fault) {
  // Checkpoints hold the full AdamW state whatever the sharding, so any layout
  // can resume any other. Under ZeRO the shards are assembled by a sum in
  // which every element has exactly one non-zero contributor (exact).
  const size_t n = model_.num_params();
  std::vector<float> full, m(n), v(n);
  const float* params = sync_.full_params(full);
  sync_.assemble_state(optimizer_.m(), m.data());
  sync_.assemble_state(optimizer_.v(), v.data());
  const float* mp = m.data();
  const float* vp = v.data();
  // Tensor and pipeline parallelism: assemble the whole model (the TP = PP = 1
  // layout), so the checkpoint does not depend on those degrees either.
  std::vector<float> pf, mf, vf;
  size_t n_out = n;
  if (tp_ > 1 || pp_ > 1) {
    to_full(params, pf);
    to_full(mp, mf);
    to_full(vp, vf);
    params = pf.data(), mp = mf.data(), vp = vf.data();
    n_out = pf.size();
  }
  if (ctx_.world().rank() != 0) return;  // DP replicas hold identical parameters; rank 0 writes
  formats::CheckpointView ck;
  ck.header = header(next_step, n_out);
  ck.params = params;
  ck.m = mp;
  ck.v = vp;
  formats::save_checkpoint(path, ck, fault);
}

nlohmann::json TrainingCheckpoint::header(int64_t next_step, size_t n_params) const {
  const auto& c = model_.config();
  nlohmann::json h = {{"format", "braid-checkpoint"}, {"model", opt_.model},     {"step", next_step},
                      {"n_params", n_params},          {"seed", opt_.seed},       {"global_batch", opt_.global_batch},
                      {"seq_len", opt_.seq_len},       {"n_layer", c.n_layer},    {"n_head", c.n_head},
                      {"n_embd", c.n_embd},            {"vocab_size", c.vocab_size}, {"block_size", c.block_size},
                      {"total_steps", opt_.steps},     {"block", formats::block_header(c)}};
  if (scaler_.enabled()) {
    const LossScalerState st = scaler_.state();
    h["loss_scale"] = {{"scale", st.scale}, {"growth_tracker", st.growth_tracker},
                       {"hysteresis_left", st.hysteresis_left}};
  }
  return h;
}

nlohmann::json read_any_checkpoint_header(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return formats::read_sharded_metadata(path).header;
  return formats::read_checkpoint_header(path).header;
}

int64_t TrainingCheckpoint::load_weights(const std::string& path) { return load(path, true); }

int64_t TrainingCheckpoint::load(const std::string& path) { return load(path, false); }

namespace {
// The block parts in which a checkpoint's header and cfg differ, appended as
// the flags (or parts) that set them. Key/value heads and the MLP width that
// follow the sizes already named (n_head, 4 n_embd) are not repeated.
void note_block_differences(const nlohmann::json& hdr, const model::GPTConfig& cfg, std::string& then,
                            std::string& now) {
  model::GPTConfig saved = cfg;
  saved.n_head = hdr.at("n_head").get<int64_t>(), saved.n_embd = hdr.at("n_embd").get<int64_t>();
  formats::read_block_header(hdr, saved);
  const nlohmann::json a = formats::block_header(saved), b = formats::block_header(cfg);
  const bool mha = saved.kv_heads() == saved.n_head && cfg.kv_heads() == cfg.n_head;
  const bool mlp4 = saved.hidden() == 4 * saved.n_embd && cfg.hidden() == 4 * cfg.n_embd;
  for (const auto& [key, value] : a.items()) {
    if (b.at(key) == value || (key == "n_kv_head" && mha) || (key == "mlp_hidden" && mlp4)) continue;
    // Parts no flag sets come with the model preset (an imported model's may match none).
    const std::string flag = key == "n_kv_head" ? "--n-kv-head" : key == "mlp_hidden" ? "--mlp-hidden"
                             : key == "rope_theta" ? "--rope-theta" : "block part (set by --model) " + key;
    then += " " + flag + " " + value.dump();
    now += " " + flag + " " + b.at(key).dump();
  }
}
}  // namespace

void check_resume_header(const nlohmann::json& hdr, const std::string& path, const TrainOptions& opt,
                         const model::GPTConfig& cfg, bool weights_only) {
  // Every flag that differs is named at once, so one correction suffices.
  std::string then, now;
  auto same = [&](const char* key, int64_t value, const char* flag) {
    const int64_t saved = hdr.at(key).get<int64_t>();
    if (saved == value) return;
    then += detail::concat(" ", flag, " ", saved);
    now += detail::concat(" ", flag, " ", value);
  };
  same("n_layer", cfg.n_layer, "--n-layer");
  same("n_head", cfg.n_head, "--n-head");
  same("n_embd", cfg.n_embd, "--n-embd");
  same("vocab_size", cfg.vocab_size, "--vocab-size");
  if (hdr.contains("block_size")) same("block_size", cfg.block_size, "--block-size");
  note_block_differences(hdr, cfg, then, now);
  // The data order depends on (seed, global batch, seq len): a resumed run only
  // continues the saved one if they match. An imported model starts a run of its
  // own (fresh optimizer, step 0): no earlier data order has to be continued.
  if (!weights_only && !hdr.contains("source")) {
    same("seed", static_cast<int64_t>(opt.seed), "--seed");
    same("global_batch", opt.global_batch, "--batch");
    same("seq_len", opt.seq_len, "--seq-len");
  }
  BRAID_CONFIG_CHECK(then.empty(), "checkpoint ", path, " was saved with", then, " but this run has", now,
                     "; resume with the saved values");
  if (weights_only) return;
  const int64_t step = hdr.at("step").get<int64_t>();
  BRAID_CONFIG_CHECK(step < opt.steps, "checkpoint ", path, " is at step ", step, " and --steps ", opt.steps,
                     " leaves nothing to train; pass a larger --steps");
}

int64_t TrainingCheckpoint::load(const std::string& path, bool weights_only) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) ? load_sharded(path, weights_only) : load_file(path, weights_only);
}

int64_t TrainingCheckpoint::load_file(const std::string& path, bool weights_only) {
  const size_t n = model_.num_params();
  std::vector<float> m(n), v(n), full(n);
  float* params = full.data();
  formats::CheckpointInfo info;
  if (tp_ > 1 || pp_ > 1) {
    // The file holds the whole model: take this stage's tensors, this TP rank's slices.
    const size_t nf = model::unit_bounds(model_.config(), 1).back();
    std::vector<float> pf(nf), mf(nf), vf(nf);
    info = formats::load_checkpoint(path, nf, pf.data(), mf.data(), vf.data());
    from_full(pf.data(), params);
    from_full(mf.data(), m.data());
    from_full(vf.data(), v.data());
  } else {
    info = formats::load_checkpoint(path, n, params, m.data(), v.data());
  }
  if (info.version < 2 && ctx_.world().rank() == 0)
    std::fprintf(stderr, "braid train: checkpoint %s predates checksums (version 1): loaded unverified\n",
                 path.c_str());
  check_resume_header(info.header, path, opt_, model_.config(), weights_only);
  auto from = [](const std::vector<float>& a) {
    return [&a](size_t o, size_t len, float* dst) { std::copy_n(a.data() + o, len, dst); };
  };
  if (!weights_only) optimizer_.load_state(from(m), from(v));
  sync_.load_params(from(full));
  std::error_code ec;
  loaded_bytes_ = std::filesystem::file_size(path, ec);
  return apply_header(info.header, weights_only);
}

int64_t TrainingCheckpoint::apply_header(const nlohmann::json& hdr, bool weights_only) {
  const int64_t step = hdr.at("step").get<int64_t>();
  saved_total_steps_ = hdr.contains("total_steps") && hdr["total_steps"].is_number_integer()
                           ? hdr["total_steps"].get<int64_t>() : -1;
  source_ = hdr.contains("source") ? hdr["source"].get<std::string>() : "";
  if (!weights_only && scaler_.enabled() && hdr.contains("loss_scale")) {
    const auto& ls = hdr["loss_scale"];
    scaler_.set_state({ls.at("scale").get<float>(), ls.at("growth_tracker").get<int64_t>(),
                        ls.at("hysteresis_left").get<int64_t>()});
  }
  return step;
}

}  // namespace braid::train
