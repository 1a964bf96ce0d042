// Stop signals and oneDNN: a signal handled on a thread inside oneDNN 2.x's
// gemm:jit kernel writes its frame over the heap (train/preemption.h), and the
// process later aborts in free(). With StopSignalThread made first, a flood of
// process-directed signals while matmul_backward runs its strided product (the
// path the head's backward takes at B·T >= 1024, on gemm:jit) leaves the heap
// and the result intact: without it, a dozen products abort every time on an
// AVX-512 CPU. Each check runs in a process of its own (a death test, re-run
// from the start), so the signal thread exists before any other, as in main.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "braid/core/rng.h"
#include "braid/core/threads.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/train/preemption.h"

namespace {

std::atomic<long> g_handled{0};
extern "C" void count_signal(int) { g_handled.fetch_add(1, std::memory_order_relaxed); }

// Each thread's blocked-signal mask (SigBlk in /proc/self/task/<tid>/status).
std::vector<uint64_t> thread_masks() {
  std::vector<uint64_t> masks;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("SigBlk:", 0) == 0) masks.push_back(std::stoull(line.substr(7), nullptr, 16));
  }
  return masks;
}

bool blocks_all_stop_signals(uint64_t mask) {
  for (int sig : {SIGTERM, SIGINT, SIGUSR1})
    if (!(mask >> (sig - 1) & 1)) return false;
  return true;
}

std::vector<float> normal_values(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = braid::rand_normal(11, stream, i);
  return v;
}

// The child's body: 0 when the heap, the product and the routing held.
int flood_during_gemm() {
  braid::train::StopSignalThread stop_signals;  // first, as in main
  struct sigaction sa = {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  const pid_t self = getpid();
  const pid_t flooder = fork();
  if (flooder == 0) {  // async-signal-safe calls only; ends when its parent does
    while (getppid() == self && kill(self, SIGUSR1) == 0) usleep(200);
    _exit(0);
  }
  braid::set_omp_threads(2);  // a worker thread too, made after the block
  constexpr int64_t BT = 1024, C = 256, OC = 8192;
  const auto dout = normal_values(size_t(BT * OC), 1), weight = normal_values(size_t(OC * C), 2);
  std::vector<float> scratch(braid::kernels::matmul_backward_scratch_floats(BT, C, OC));
  std::vector<float> dinp(size_t(BT * C)), first;
  int differing = 0;
  for (int it = 0; it < 12; ++it) {
    std::vector<std::vector<char>> churn;  // heap chunks around the kernel's workspace
    for (size_t j = 0; j < 32; ++j) churn.emplace_back(512 + 97 * j, char(j));
    braid::kernels::matmul_backward(dinp.data(), nullptr, nullptr, dout.data(), nullptr, weight.data(), BT, C,
                                    OC, scratch.data());
    if (it == 0) first = dinp;
    else if (std::memcmp(first.data(), dinp.data(), dinp.size() * sizeof(float)) != 0) ++differing;
  }
  const auto masks = thread_masks();
  kill(flooder, SIGKILL);
  waitpid(flooder, nullptr, 0);
  size_t open = 0;
  for (uint64_t m : masks) open += blocks_all_stop_signals(m) ? 0 : 1;
  std::fprintf(stderr, "signals handled %ld, products differing from the first %d, threads %zu, open to stop signals %zu\n",
               g_handled.load(), differing, masks.size(), open);
  return differing == 0 && g_handled.load() > 0 && masks.size() >= 3 && open == 1 ? 0 : 1;
}

TEST(StopSignalThread, OneDnnGemmSurvivesAFloodOfSignals) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(flood_during_gemm()), testing::ExitedWithCode(0), "");
}

}  // namespace
