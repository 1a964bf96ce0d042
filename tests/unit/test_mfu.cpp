// The MFU ceilings: the matmul probe's shape, statistics and errors, the FMA
// peak's sign, and the line that says which path a run's matmuls take.
#include <gtest/gtest.h>

#include "braid/core/error.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/kernels/cpu/probes.h"

namespace t = braid::kernels;

TEST(Mfu, MatmulCeilingIsTheMedianOfItsProbes) {
  const t::MatmulCeiling c = t::measure_matmul_ceiling(64, 32, 128, braid::DType::f32, 3, 0.005);
  EXPECT_EQ(c.M, 64);
  EXPECT_EQ(c.K, 32);
  EXPECT_EQ(c.N, 128);
  EXPECT_EQ(c.probes, 3);
  EXPECT_GT(c.flops, 0.0);
  EXPECT_GE(c.spread, 0.0);
  EXPECT_NE(c.describe().find("f32 (64x32)(32x128)"), std::string::npos) << c.describe();
  EXPECT_NE(c.describe().find("median of 3"), std::string::npos) << c.describe();
  EXPECT_THROW(t::measure_matmul_ceiling(0, 32, 128, braid::DType::f32), braid::Error);
  EXPECT_THROW(t::measure_matmul_ceiling(64, 32, 128, braid::DType::f32, 0), braid::Error);
}

TEST(Mfu, FmaPeakIsPositive) { EXPECT_GT(t::measure_fma_peak_flops(0.01), 0.0); }

TEST(Mfu, MatmulPathNamesWhatRuns) {
  EXPECT_EQ(t::matmul_path(braid::DType::f32, false), "matmuls run in f32");
  EXPECT_EQ(t::matmul_path(braid::DType::bf16, true), "matmuls run in bf16 x bf16 -> f32 (oneDNN)");
  for (braid::DType d : {braid::DType::bf16, braid::DType::f16}) {
    const std::string n = braid::dtype_name(d);
    EXPECT_EQ(t::matmul_path(d, false), "matmuls run in f32 on " + n + "-rounded operands (--matmul-precision fp32)");
    EXPECT_EQ(t::matmul_path(d, true), braid::kernels::half_matmul_supported(d)
                                           ? "matmuls run in " + n + " x " + n + " -> f32 (oneDNN)"
                                           : "matmuls run in f32 on " + n +
                                                 " operands widened exactly (oneDNN has no " + n +
                                                 " matmul on this CPU)");
  }
}
