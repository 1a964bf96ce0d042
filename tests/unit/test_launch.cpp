// braid run's pure parts: the launch command split and rewritten, hostfiles,
// the output patterns of a failed job, and the elastic layout choice.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "braid/core/error.h"
#include "braid/launch/elastic.h"
#include "braid/launch/job.h"
#include "braid/launch/launch_command.h"

namespace braid::launch {
namespace {

std::string temp_file(const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / ("braid_hosts_" + std::to_string(::getpid()));
  std::ofstream(p) << text;
  return p.string();
}

TEST(LaunchCommand, SplitsLauncherHostsRanksAndProgram) {
  const std::string hf = temp_file("# two hosts\n10.0.0.1 slots=2 max_slots=2\n10.0.0.2 slots=3\n10.0.0.1\n");
  const LaunchCommand c = parse_launch_command({"mpirun", "--hostfile", hf, "-np", "6", "--bind-to", "none", "--mca",
                                                "btl", "tcp,self", "/opt/bin/braid", "train", "--tp", "2"});
  EXPECT_EQ(c.np, 6);
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[0].name, "10.0.0.1");
  EXPECT_EQ(c.hosts[0].slots, 3);  // a repeated name adds its slots
  EXPECT_EQ(c.hosts[1].slots, 3);
  EXPECT_EQ(c.slots(), 6);
  EXPECT_EQ(c.launcher, (std::vector<std::string>{"mpirun", "--bind-to", "none", "--mca", "btl", "tcp,self"}));
  EXPECT_EQ(c.train_args(), (std::vector<std::string>{"--tp", "2"}));
  EXPECT_EQ(launch_argv(c, "/tmp/h", 4, {"--resume", "auto"}),
            (std::vector<std::string>{"mpirun", "--bind-to", "none", "--mca", "btl", "tcp,self", "--hostfile", "/tmp/h",
                                      "-np", "4", "/opt/bin/braid", "train", "--tp", "2", "--resume", "auto"}));
  std::filesystem::remove(hf);
}

TEST(LaunchCommand, HostListAndEqualsForms) {
  const LaunchCommand c = parse_launch_command({"mpiexec", "--host=a:2,b,b", "--np=3", "braid", "train"});
  ASSERT_EQ(c.hosts.size(), 2u);
  EXPECT_EQ(c.hosts[1].name, "b");
  EXPECT_EQ(c.hosts[1].slots, 2);
  EXPECT_EQ(c.np, 3);
  EXPECT_TRUE(c.train_args().empty());
  EXPECT_EQ(host_of_rank(c.hosts, 3, 0), 0);
  EXPECT_EQ(host_of_rank(c.hosts, 3, 2), 1);
  EXPECT_EQ(host_of_rank(c.hosts, 3, 3), -1);
  EXPECT_EQ(hostfile_text(c.hosts), "a slots=2 max_slots=2\nb slots=2 max_slots=2\n");
}

TEST(LaunchCommand, RanksPlacedBySlotAndOversubscribed) {
  const std::vector<Host> hosts = {{"a", 2}, {"b", 2}, {"c", 1}};
  EXPECT_EQ(ranks_per_host(hosts, 0), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(ranks_per_host(hosts, 3), (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(ranks_per_host(hosts, 7), (std::vector<int>{4, 2, 1}));  // --oversubscribe: round again
  EXPECT_EQ(ranks_per_host({{"localhost", 1}}, 2), (std::vector<int>{2}));
  for (int np : {3, 5, 7})
    for (int r = 0; r < np; ++r) {
      const int h = host_of_rank(hosts, np, r);
      ASSERT_GE(h, 0);
      int before = 0;  // ranks below r on the same host, counted through the placement
      for (int q = 0; q < r; ++q) before += host_of_rank(hosts, np, q) == h;
      EXPECT_LT(before, ranks_per_host(hosts, np)[static_cast<size_t>(h)]) << np << " " << r;
    }
  EXPECT_EQ(ranks_on(hosts, 5, "b"), "2 3");
  EXPECT_EQ(ranks_on(hosts, 3, "c"), "");
}

TEST(LaunchCommand, AWrapperBeforeBraidIsPartOfTheProgram) {
  const LaunchCommand c = parse_launch_command({"mpirun", "--host", "a:2", "-x", "FOO", "env", "FOO=1", "numactl",
                                                "-N", "0", "/bin/braid", "train", "--steps", "3"});
  EXPECT_EQ(c.launcher, (std::vector<std::string>{"mpirun", "-x", "FOO"}));
  EXPECT_EQ(c.program.front(), "env");
  EXPECT_EQ(c.train_args(), (std::vector<std::string>{"--steps", "3"}));
}

TEST(LaunchCommand, HostfileLinesWithoutSlotsAreMarked) {
  const auto hosts = parse_hostfile("a\nb slots=2\na\n", "h");
  EXPECT_FALSE(hosts[0].slots_given);
  EXPECT_TRUE(hosts[1].slots_given);
}

TEST(LaunchCommand, RefusesWhatItCannotRestart) {
  EXPECT_THROW(parse_launch_command({}), ConfigError);
  EXPECT_THROW(parse_launch_command({"srun", "braid", "train"}), ConfigError);
  EXPECT_THROW(parse_launch_command({"mpirun", "-np", "2", "python3", "train.py"}), ConfigError);
  EXPECT_THROW(parse_launch_command({"mpirun", "-np", "x", "braid", "train"}), ConfigError);
  EXPECT_THROW(parse_launch_command({"mpirun", "--hostfile", "/nonexistent/h", "braid", "train"}), ConfigError);
  EXPECT_THROW(parse_hostfile("a slots=0\n", "h"), ConfigError);
  EXPECT_THROW(parse_hostfile("a cpus=2\n", "h"), ConfigError);
  EXPECT_THROW(parse_hostfile("# nothing\n", "h"), ConfigError);
}

TEST(JobScan, FindsFailuresStepsAndResumes) {
  JobReport r;
  scan_line("step     7/20 | loss 5.1", r, 1.0);
  scan_line("resumed from out/step_6 at step 6", r, 1.0);
  EXPECT_EQ(r.last_step, 7);
  EXPECT_EQ(r.resumed_step, 6);
  EXPECT_FALSE(r.failed);
  scan_line("MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD", r, 2.5);
  scan_line("with errorcode 3.", r, 2.6);
  EXPECT_TRUE(r.failed);
  EXPECT_DOUBLE_EQ(r.failure_at_s, 2.5);
  EXPECT_EQ(failure_exit_code(r.failure), 3);
  for (const char* line :
       {"braid: error: rank 0: comm timeout: all_reduce #13 ...",
        "mpirun noticed that process rank 3 with PID 123 on node h1 exited on signal 9 (Killed).",
        "ORTE has lost communication with a remote daemon.", "An ORTE daemon has unexpectedly failed after launch"}) {
    JobReport f;
    scan_line(line, f, 0);
    EXPECT_TRUE(f.failed) << line;
    EXPECT_EQ(failure_exit_code(f.failure), 4) << line;
    EXPECT_EQ(lost_by_launcher(f.failure), line[0] != 'b') << line;
  }
  EXPECT_FALSE(lost_by_launcher(r.failure));  // MPI_ABORT: the rank's own code
  JobReport ok;
  scan_line("braid: error: --tp 3 does not divide n_head", ok, 0);  // a refused flag is MPI_ABORT's to report
  EXPECT_FALSE(ok.failed);
}

train::TrainOptions small_job() {
  train::TrainOptions o;
  o.model = "tiny";
  o.global_batch = 12;
  o.seq_len = 32;
  return o;
}

TEST(ElasticLayout, LargestWorldKeepsTheBatchByAccumulation) {
  train::TrainOptions o = small_job();
  o.micro_batch = 2;  // 6 ranks x 2 = 12: no accumulation
  std::string why;
  auto l = choose_layout(o, 4, 0, &why);  // 4 ranks: 12 / 4 = 3 per rank; 2 does not divide it
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->world, 4);
  EXPECT_EQ(l->micro_batch, 1);
  EXPECT_EQ(l->accumulation, 3);
  l = choose_layout(o, 5, 0, &why);  // 5 does not divide 12: 4 ranks
  ASSERT_TRUE(l);
  EXPECT_EQ(l->world, 4);
}

TEST(ElasticLayout, KeepsTensorParallelism) {
  train::TrainOptions o = small_job();
  o.tp = 2;
  std::string why;
  auto l = choose_layout(o, 5, 0, &why);  // TP 2: 4 ranks (DP 2), never 5 or 3
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->world, 4);
  EXPECT_EQ(l->dp, 2);
  EXPECT_FALSE(choose_layout(o, 1, 0, &why));  // one rank cannot hold TP 2
}

TEST(ElasticLayout, APipelineKeepsAMicroBatchPerStage) {
  train::TrainOptions o = small_job();
  o.pp = 2;
  o.micro_batches = 4;  // 6 ranks: DP 3, micro-batch 1 x 4
  std::string why;
  auto l = choose_layout(o, 4, 0, &why);  // DP 2: 6 each; 4 micro-batches no longer divide it
  ASSERT_TRUE(l) << why;
  EXPECT_EQ(l->dp, 2);
  EXPECT_GE(l->accumulation, 2) << l->describe();  // not 6 x 1: the pipeline would run serially
  EXPECT_EQ(l->micro_batch * l->accumulation * l->dp, 12);
}

TEST(ElasticLayout, GivesUpWhenNothingFitsTheBudget) {
  train::TrainOptions o = small_job();
  o.zero = 3;
  std::string why;
  const auto six = choose_layout(o, 6, 0, &why);
  ASSERT_TRUE(six);
  // A budget the 6-rank layout meets but fewer ranks (bigger shards) cannot.
  const auto fits6 = choose_layout(o, 6, six->peak_bytes, &why);
  ASSERT_TRUE(fits6);
  EXPECT_EQ(fits6->world, 6);
  why.clear();
  const auto four = choose_layout(o, 4, six->peak_bytes / 2, &why);
  EXPECT_FALSE(four);
  EXPECT_NE(why.find("4 ranks"), std::string::npos) << why;
}

}  // namespace
}  // namespace braid::launch
