// Host memory: sizes parsed strictly; MemAvailable capped by a cgroup v1 or v2
// limit, read from files laid out as the kernel does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "braid/core/error.h"
#include "braid/core/host_memory.h"

namespace braid {
namespace {

namespace fs = std::filesystem;

TEST(ParseSize, TakesBytesAndBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_size("2000000", "--max-memory"), 2000000u);
  EXPECT_EQ(parse_size("512MiB", "--max-memory"), 512ull << 20);
  EXPECT_EQ(parse_size("512M", "--max-memory"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5G", "--max-memory"), 3ull << 29);
  EXPECT_EQ(parse_size("8GB", "--max-memory"), 8000000000ull);
  EXPECT_EQ(parse_size("3K", "--max-memory"), 3072u);
  for (const char* bad : {"", "-1G", "G", "12 parsecs", "1e30", "nan", "1GiBs", "0x10"}) {
    try {
      parse_size(bad, "--max-memory");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--max-memory '"), std::string::npos) << e.what();
    }
  }
}

class HostMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("braid_hostmem_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "cg" / "memory" / "job");
    fs::create_directories(root_ / "cg" / "jobv2");
    put("meminfo", "MemTotal:       24000000 kB\nMemFree:        1000 kB\nMemAvailable:   20000000 kB\n");
    src_.meminfo = (root_ / "meminfo").string();
    src_.self_cgroup = (root_ / "self_cgroup").string();
    src_.cgroup_root = (root_ / "cg").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  void put(const std::string& rel, const std::string& text) { std::ofstream(root_ / rel) << text; }
  fs::path root_;
  HostMemorySources src_;
};

TEST_F(HostMemoryTest, MemAvailableWithoutALimit) {
  put("self_cgroup", "4:memory:/job\n0::/jobv2\n");
  put("cg/memory/job/memory.limit_in_bytes", "9223372036854771712\n");  // v1: no limit
  put("cg/jobv2/memory.max", "max\n");
  EXPECT_EQ(host_memory_available(src_), 20000000ull * 1024);
}

TEST_F(HostMemoryTest, ACgroupLimitCapsIt) {
  put("self_cgroup", "4:memory:/job\n");
  put("cg/memory/job/memory.limit_in_bytes", "4294967296\n");
  put("cg/memory/job/memory.usage_in_bytes", "1073741824\n");
  EXPECT_EQ(host_memory_available(src_), 3ull << 30);
  put("self_cgroup", "0::/jobv2\n");
  put("cg/jobv2/memory.max", "2147483648\n");
  put("cg/jobv2/memory.current", "536870912\n");
  EXPECT_EQ(host_memory_available(src_), 3ull << 29);
}

TEST_F(HostMemoryTest, UnknownWithoutMeminfo) {
  src_.meminfo = (root_ / "missing").string();
  EXPECT_FALSE(host_memory_available(src_).has_value());
}

}  // namespace
}  // namespace braid
