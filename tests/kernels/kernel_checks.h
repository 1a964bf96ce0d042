// Shared by the kernel tests: the finite-difference gradient check and the
// relative L2 distance.
//
// Finite differences: the objective is L(x) = sum_i r_i * out_i(x) with fixed
// random r, so the backward pass fed dout = r must return dL/dx. The kernels run
// in fp32, so the numeric derivative is a central difference (L(x+h) - L(x-h)) /
// 2h with L summed in double and h = 1e-2 on O(1) inputs. Error budget:
// truncation h^2/6 * |L'''| ~ 2e-5 for these smooth functions; rounding ~ 6e-8 *
// sqrt(n) * |out| / (2h) ~ 3e-5 for n ~ 100 outputs. Hence |num - ana| <= 5e-4 +
// 5e-3 |ana|: ~10x above the noise, and far below the O(0.1..1) errors a wrong
// formula makes.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kernel_checks {

inline constexpr double kH = 1e-2, kAtol = 5e-4, kRtol = 5e-3;

inline double dot(const std::vector<float>& r, const float* out) {
  double s = 0;
  for (size_t i = 0; i < r.size(); ++i) s += double(r[i]) * double(out[i]);
  return s;
}

// Checks analytic[i] against the central difference of loss() in x[i], for all i.
inline void fd_check(const std::string& what, std::vector<float>& x, const std::vector<float>& analytic,
              const std::function<double()>& loss) {
  ASSERT_EQ(x.size(), analytic.size());
  double max_err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    x[i] = float(x0 + kH);
    const double lp = loss();
    x[i] = float(x0 - kH);
    const double lm = loss();
    x[i] = x0;
    const double num = (lp - lm) / (2 * kH);
    const double err = std::abs(num - analytic[i]);
    max_err = std::max(max_err, err);
    ASSERT_LE(err, kAtol + kRtol * std::abs(analytic[i]))
        << what << "[" << i << "]: numeric " << num << " analytic " << analytic[i];
  }
  ::testing::Test::RecordProperty(what + "_max_abs_err", std::to_string(max_err));
  std::printf("  %-22s max |num - ana| = %.2e over %zu elements\n", what.c_str(), max_err,
              x.size());
}


/// ||a - b|| / ||b|| in double (1 when b is zero).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace kernel_checks
