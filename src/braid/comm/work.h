// Work handles shared by the backends: an already-finished one and a promise-like one
// completed by the progress thread.
#pragma once
#include <condition_variable>
#include <exception>
#include <mutex>

#include "braid/comm/communicator.h"

namespace braid::comm {

/// A Work that is already complete (e.g. a buffered local send).
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

/// Completed once by another thread with success or an exception; wait() rethrows
/// the exception on every call.
class PromiseWork final : public Work {
 public:
  void complete(std::exception_ptr err = nullptr) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      err_ = err;
      done_ = true;
    }
    cv_.notify_all();
  }
  void wait() override {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return done_; });
    if (err_) std::rethrow_exception(err_);
  }
  bool test() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_ && err_) std::rethrow_exception(err_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr err_;
};

}  // namespace braid::comm
