// Owned, aligned, pre-touched buffers tagged with a memory category, and a
// per-rank ledger that sums live and peak bytes by category. Allocation happens
// at start-up; the step loop allocates nothing (docs/ARCHITECTURE.md).
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <cstdint>
#include <string>

namespace braid {

enum class MemCategory : uint8_t {
  compute_params,  // parameters used by forward/backward
  master_params,   // fp32 master copy under mixed precision
  grads,
  optimizer,       // AdamW first and second moments
  activations,
  comm,            // communication staging buffers
  workspace,
  staging,         // host copy of the state an asynchronous checkpoint save writes
  count_
};
constexpr size_t kNumMemCategories = static_cast<size_t>(MemCategory::count_);
const char* mem_category_name(MemCategory c);

/// Live and peak bytes per category for one rank. Not a process global: each
/// rank (thread or process) owns its ledger and passes it to the buffers.
class MemoryLedger {
 public:
  void add(MemCategory c, size_t bytes);
  void sub(MemCategory c, size_t bytes);
  size_t live(MemCategory c) const { return live_[idx(c)].load(); }
  size_t peak(MemCategory c) const { return peak_[idx(c)].load(); }
  size_t live_total() const { return total_.load(); }
  size_t peak_total() const { return peak_total_.load(); }
  /// One line per category with bytes, e.g. for the end-of-run report.
  std::string report() const;

 private:
  static size_t idx(MemCategory c) { return static_cast<size_t>(c); }
  std::array<std::atomic<size_t>, kNumMemCategories> live_{};
  std::array<std::atomic<size_t>, kNumMemCategories> peak_{};
  std::atomic<size_t> total_{0}, peak_total_{0};
};

/// A 64-byte-aligned, zero-filled (so pre-touched) block of `bytes` bytes, with
/// MADV_HUGEPAGE advised for large blocks. Move-only. Registers itself with the
/// ledger (if any) for its lifetime.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, MemCategory cat, MemoryLedger* ledger = nullptr);
  /// Memory owned elsewhere (a communicator's shared buffer, say), counted in
  /// `ledger` under `cat` like an allocation of `bytes`; `release` runs when the
  /// Buffer lets go of it instead of a free.
  static Buffer adopt(void* p, size_t bytes, MemCategory cat, MemoryLedger* ledger,
                      std::function<void()> release);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return ptr_; }
  const void* data() const { return ptr_; }
  template <typename T> T* as() { return static_cast<T*>(ptr_); }
  template <typename T> const T* as() const { return static_cast<const T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  MemCategory category() const { return cat_; }

 private:
  void release();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  MemCategory cat_ = MemCategory::workspace;
  MemoryLedger* ledger_ = nullptr;
  std::function<void()> external_;  // set: adopted memory, released by this
};

/// Peak resident set size of this process in bytes (from getrusage).
size_t process_peak_rss_bytes();

/// "12.3 MiB"-style formatting.
std::string format_bytes(double bytes);

}  // namespace braid
