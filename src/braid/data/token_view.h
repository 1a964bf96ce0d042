// A read-only view of token ids stored as uint16 (GPT-2-sized vocabularies)
// or uint32 (larger ones, such as Llama 3's 128,256 tokens): what the data
// loader, the sampler and evaluation read, whichever width a token file holds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace braid::data {

class TokenView {
 public:
  TokenView() = default;
  TokenView(std::span<const uint16_t> s) : data_(s.data()), size_(s.size()), wide_(false) {}
  TokenView(std::span<const uint32_t> s) : data_(s.data()), size_(s.size()), wide_(true) {}
  TokenView(const std::vector<uint16_t>& v) : TokenView(std::span<const uint16_t>(v)) {}
  TokenView(const std::vector<uint32_t>& v) : TokenView(std::span<const uint32_t>(v)) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// True for uint32 ids.
  bool wide() const { return wide_; }
  uint32_t operator[](size_t i) const {
    return wide_ ? static_cast<const uint32_t*>(data_)[i] : static_cast<const uint16_t*>(data_)[i];
  }
  /// ids [offset, offset + n) (n clipped to the end).
  TokenView subview(size_t offset, size_t n) const {
    TokenView v = *this;
    const size_t esz = wide_ ? 4 : 2;
    v.data_ = static_cast<const char*>(data_) + offset * esz;
    v.size_ = offset >= size_ ? 0 : (n < size_ - offset ? n : size_ - offset);
    return v;
  }
  /// The largest id (0 when empty); the loop vectorises for either width.
  uint32_t max() const {
    uint32_t m = 0;
    if (wide_) {
      const uint32_t* p = static_cast<const uint32_t*>(data_);
      for (size_t i = 0; i < size_; ++i) m = p[i] > m ? p[i] : m;
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(data_);
      uint16_t m16 = 0;
      for (size_t i = 0; i < size_; ++i) m16 = p[i] > m16 ? p[i] : m16;
      m = m16;
    }
    return m;
  }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  bool wide_ = false;
};

}  // namespace braid::data
