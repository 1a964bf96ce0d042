#include "braid/core/memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "braid/core/error.h"

namespace braid {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::compute_params: return "params";
    case MemCategory::master_params: return "master_params";
    case MemCategory::grads: return "grads";
    case MemCategory::optimizer: return "optimizer";
    case MemCategory::activations: return "activations";
    case MemCategory::comm: return "comm";
    case MemCategory::workspace: return "workspace";
    case MemCategory::staging: return "staging";
    case MemCategory::count_: break;
  }
  return "?";
}

void MemoryLedger::add(MemCategory c, size_t bytes) {
  size_t v = live_[idx(c)].fetch_add(bytes) + bytes;
  size_t p = peak_[idx(c)].load();
  while (v > p && !peak_[idx(c)].compare_exchange_weak(p, v)) {
  }
  size_t t = total_.fetch_add(bytes) + bytes;
  size_t pt = peak_total_.load();
  while (t > pt && !peak_total_.compare_exchange_weak(pt, t)) {
  }
}

void MemoryLedger::sub(MemCategory c, size_t bytes) {
  live_[idx(c)].fetch_sub(bytes);
  total_.fetch_sub(bytes);
}

std::string MemoryLedger::report() const {
  std::ostringstream os;
  for (size_t i = 0; i < kNumMemCategories; ++i) {
    auto c = static_cast<MemCategory>(i);
    os << mem_category_name(c) << "=" << format_bytes(static_cast<double>(peak(c)));
    if (i + 1 < kNumMemCategories) os << " ";
  }
  os << " total=" << format_bytes(static_cast<double>(peak_total()));
  return os.str();
}

Buffer::Buffer(size_t bytes, MemCategory cat, MemoryLedger* ledger)
    : bytes_(bytes), cat_(cat), ledger_(ledger) {
  if (bytes == 0) return;
  constexpr size_t kAlign = 64;
  const size_t huge = size_t{2} << 20;
  // Large blocks are aligned to 2 MiB so transparent huge pages can back them.
  const size_t align = bytes >= huge ? huge : kAlign;
  const size_t rounded = (bytes + align - 1) / align * align;
  ptr_ = std::aligned_alloc(align, rounded);
  if (!ptr_) throw std::bad_alloc();
  if (bytes >= huge) madvise(ptr_, rounded, MADV_HUGEPAGE);
  std::memset(ptr_, 0, bytes);  // first touch now, not in the step loop
  if (ledger_) ledger_->add(cat_, bytes_);
}

Buffer Buffer::adopt(void* p, size_t bytes, MemCategory cat, MemoryLedger* ledger,
                     std::function<void()> release) {
  Buffer b;
  b.ptr_ = p;
  b.bytes_ = bytes;
  b.cat_ = cat;
  b.ledger_ = ledger;
  b.external_ = std::move(release);
  if (ledger && p) ledger->add(cat, bytes);
  return b;
}

Buffer::~Buffer() { release(); }

void Buffer::release() {
  if (ptr_) {
    if (external_)
      external_();
    else
      std::free(ptr_);
    if (ledger_) ledger_->sub(cat_, bytes_);
  }
  external_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

Buffer::Buffer(Buffer&& o) noexcept
    : ptr_(o.ptr_), bytes_(o.bytes_), cat_(o.cat_), ledger_(o.ledger_), external_(std::move(o.external_)) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
  o.external_ = nullptr;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    cat_ = o.cat_;
    ledger_ = o.ledger_;
    external_ = std::move(o.external_);
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.external_ = nullptr;
  }
  return *this;
}

size_t process_peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char s[32];
  std::snprintf(s, sizeof s, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return s;
}

}  // namespace braid
