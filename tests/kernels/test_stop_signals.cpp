// Stop signals and oneDNN: a signal handled on a thread inside oneDNN 2.x's
// gemm:jit kernel writes its frame over the heap (train/preemption.h), and the
// process later aborts in free(). With StopSignalThread made first, a flood of
// process-directed signals while matmul_backward runs its strided product (the
// path the head's backward takes at B·T >= 1024, on gemm:jit) leaves the heap
// and the result intact: without it, a dozen products abort every time on an
// AVX-512 CPU. Where oneDNN picks another kernel (no AVX2, or oneDNN 3.11.2 and
// later) the heap holds either way, and the check that one thread alone takes
// the stop signals is what guards the rule. Each check runs in a process of
// its own (a death test, re-run from the start), so the signal thread exists
// before any other, as in main.
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

#include "braid/core/threads.h"
#include "braid/kernels/cpu/matmul.h"
#include "braid/train/preemption.h"
#include "kernels/normal_values.h"

using testing_data::normal_values;

namespace {

std::atomic<int64_t> g_handled{0};
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

// Threads of this process that leave any stop signal unblocked.
size_t threads_open_to_stop_signals(const std::vector<uint64_t>& masks) {
  size_t open = 0;
  for (uint64_t m : masks)
    for (int sig : {SIGTERM, SIGINT, SIGUSR1})
      if (!(m >> (sig - 1) & 1)) {
        ++open;
        break;
      }
  return open;
}

// A child process that sends SIGUSR1 to this one every 200 us until killed
// or orphaned (async-signal-safe calls only).
pid_t start_flooder() {
  const pid_t target = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    while (getppid() == target && kill(target, SIGUSR1) == 0) usleep(200);
    _exit(0);
  }
  return pid;
}

// Runs the strided products (the weight's copy: BT >= 1024, a wide layer) with
// heap traffic around their workspace; returns how many differ from the first.
int64_t run_products() {
  constexpr int64_t BT = 1024, C = 256, OC = 8192;
  const auto dout = normal_values(size_t(BT * OC), 11, 1), weight = normal_values(size_t(OC * C), 11, 2);
  std::vector<float> scratch(braid::kernels::matmul_backward_scratch_floats(BT, C, OC));
  std::vector<float> dinp(size_t(BT * C)), first;
  int64_t differing = 0;
  for (int it = 0; it < 12; ++it) {
    std::vector<std::vector<char>> churn;
    for (size_t j = 0; j < 32; ++j) churn.emplace_back(512 + 97 * j, char(j));
    braid::kernels::matmul_backward(dinp.data(), nullptr, nullptr, dout.data(), nullptr, weight.data(), BT, C,
                                    OC, scratch.data());
    if (it == 0) first = dinp;
    else if (std::memcmp(first.data(), dinp.data(), dinp.size() * sizeof(float)) != 0) ++differing;
  }
  return differing;
}

// The child's body: 0 when the heap, the products and the routing held.
int flood_during_gemm() {
  braid::train::StopSignalThread stop_signals;  // first, as in main
  struct sigaction sa = {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  const pid_t flooder = start_flooder();
  braid::set_omp_threads(2);  // a worker thread too, made after the block
  const int64_t differing = run_products();
  const auto masks = thread_masks();
  kill(flooder, SIGKILL);
  waitpid(flooder, nullptr, 0);
  const size_t open = threads_open_to_stop_signals(masks);
  // Main, the signal thread, and OpenMP's worker where the build has OpenMP.
  const size_t expected_threads = braid::omp_threads() >= 2 ? 3 : 2;
  std::fprintf(stderr,
               "signals handled %lld, products differing from the first %lld, threads %zu, open to stop signals %zu\n",
               static_cast<long long>(g_handled.load()), static_cast<long long>(differing), masks.size(), open);
  return differing == 0 && g_handled.load() > 0 && masks.size() >= expected_threads && open == 1 ? 0 : 1;
}

TEST(StopSignalThread, OneDnnGemmSurvivesAFloodOfSignals) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(flood_during_gemm()), testing::ExitedWithCode(0), "");
}

}  // namespace
