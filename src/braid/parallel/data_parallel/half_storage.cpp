#include "braid/parallel/data_parallel/half_storage.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "braid/core/error.h"
#include "braid/kernels/cpu/convert.h"
#include "braid/kernels/cpu/elementwise.h"

namespace braid::parallel {

namespace {
// Elements of unit 0 and of the largest other unit.
std::array<size_t, 2> work_elems(const std::vector<size_t>& bounds) {
  std::array<size_t, 2> w{bounds.size() > 1 ? bounds[1] - bounds[0] : 0, 0};
  for (size_t u = 1; u + 1 < bounds.size(); ++u) w[1] = std::max(w[1], bounds[u + 1] - bounds[u]);
  return w;
}
}  // namespace

std::array<size_t, kNumMemCategories> HalfPrecisionStorage::plan(const std::vector<size_t>& bounds, DType compute,
                                                                 DType reduce, size_t state_elems) {
  std::array<size_t, kNumMemCategories> b{};
  const size_t n = bounds.back();
  const auto w = work_elems(bounds);
  b[static_cast<size_t>(MemCategory::compute_params)] = n * dtype_size(compute);
  b[static_cast<size_t>(MemCategory::grads)] = n * dtype_size(reduce);
  b[static_cast<size_t>(MemCategory::master_params)] = state_elems * sizeof(float);
  // Widened parameters, and f32 unit gradients when the accumulator is in half precision.
  const size_t work_sets = reduce == DType::f32 ? 1 : 2;
  b[static_cast<size_t>(MemCategory::comm)] = work_sets * (w[0] + w[1]) * sizeof(float);
  return b;
}

HalfPrecisionStorage::HalfPrecisionStorage(std::vector<size_t> bounds, DType compute, DType reduce,
                                           size_t state_elems, MemoryLedger* ledger)
    : bounds_(std::move(bounds)), dtype_(compute), grad_dtype_(reduce), esz_(dtype_size(compute)) {
  BRAID_CONFIG_CHECK(compute != DType::f32, "half-precision storage needs bf16 or fp16 compute");
  BRAID_CONFIG_CHECK(reduce == DType::f32 || reduce == compute, "gradients of a ", dtype_name(compute),
                     " model are reduced in fp32 or in ", dtype_name(compute), ", not ", dtype_name(reduce));
  const size_t n = bounds_.back();
  compute_ = Buffer(n * esz_, MemCategory::compute_params, ledger);
  grads_ = Buffer(n * dtype_size(reduce), MemCategory::grads, ledger);
  master_ = Buffer(state_elems * sizeof(float), MemCategory::master_params, ledger);
  for (int u = 0; u < num_units(); ++u) widen_.push_back({{unit_begin(u), unit_begin(u) + unit_len(u)}});
  const auto w = work_elems(bounds_);
  for (size_t i = 0; i < 2; ++i) {
    params_[i].data = Buffer(w[i] * sizeof(float), MemCategory::comm, ledger);
    if (reduce != DType::f32) grad_work_[i].data = Buffer(w[i] * sizeof(float), MemCategory::comm, ledger);
  }
}

const float* HalfPrecisionStorage::acquire_params(int u) {
  Work& s = param_slot(u);
  BRAID_CHECK(!s.in_use || s.unit == u, "half-precision storage: unit ", u, " acquired while unit ", s.unit,
              " is still in use");
  if (!s.valid || s.unit != u) {
    const size_t u0 = unit_begin(u);
    for (const auto& [lo, hi] : widen_[static_cast<size_t>(u)])
      kernels::copy_cast(s.data.as<float>() + (lo - u0), DType::f32, compute_.as<char>() + lo * esz_, dtype_, hi - lo);
    s.unit = u;
    s.valid = true;
  }
  s.in_use = true;
  return s.data.as<float>();
}

void HalfPrecisionStorage::set_compute_only(const std::vector<std::pair<size_t, size_t>>& ranges) {
  std::vector<std::pair<size_t, size_t>> skip = ranges;
  std::sort(skip.begin(), skip.end());
  for (int u = 0; u < num_units(); ++u) {
    auto& w = widen_[static_cast<size_t>(u)];
    w.clear();
    model::for_each_gap(skip, unit_begin(u), unit_begin(u) + unit_len(u),
                        [&w](size_t lo, size_t hi) { w.push_back({lo, hi}); });
  }
  params_changed();
}

void HalfPrecisionStorage::release_params(int u) {
  Work& s = param_slot(u);
  if (s.unit == u) s.in_use = false;
}

float* HalfPrecisionStorage::acquire_grads(int u) {
  Work& g = grad_slot(u);
  BRAID_CHECK(!g.in_use, "half-precision storage: gradient of unit ", u, " acquired while unit ", g.unit,
              " is unfinished");
  g.unit = u;
  g.in_use = true;
  // An f32 accumulator takes backward's sums in place, as an f32 model's own
  // gradients do: no zeroed unit buffer, no second pass to add it.
  if (accumulates_in_place()) return grads_.as<float>() + unit_begin(u);
  kernels::fill_zero(g.data.data(), unit_len(u) * sizeof(float));
  return g.data.as<float>();
}

void HalfPrecisionStorage::grads_ready(int u) {
  Work& g = grad_slot(u);
  BRAID_CHECK(g.in_use && g.unit == u, "grads_ready: unit ", u, " has no acquired gradient buffer");
  float* unit_grads = accumulates_in_place() ? grads_.as<float>() + unit_begin(u) : g.data.as<float>();
  if (inject_inf_) {
    unit_grads[0] = std::numeric_limits<float>::infinity();
    inject_inf_ = false;
  }
  if (!accumulates_in_place())
    kernels::accumulate_cast(grads_.as<char>() + unit_begin(u) * dtype_size(grad_dtype_), grad_dtype_, unit_grads,
                             DType::f32, unit_len(u));
  g.in_use = false;
  if (ready_) ready_(unit_begin(u), unit_begin(u) + unit_len(u));
}

void HalfPrecisionStorage::zero_grads() { kernels::fill_zero(grads_.data(), grads_.bytes()); }

void HalfPrecisionStorage::params_changed() {
  for (auto& s : params_) s.valid = false, s.unit = -1;
}

}  // namespace braid::parallel
