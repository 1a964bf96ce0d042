#include "braid/comm/comm_base.h"

#include <cstdlib>

#include "braid/core/error.h"

namespace braid::comm {

CommBase::CommBase() {
  if (const char* s = std::getenv("BRAID_COMM_CHUNK_BYTES")) ring_opts_.chunk_bytes = std::strtoull(s, nullptr, 10);
  if (const char* s = std::getenv("BRAID_COMM_DEPTH")) ring_opts_.depth = std::atoi(s);
  auto env_bytes = [](const char* name, size_t& v) {
    if (const char* s = std::getenv(name)) v = std::strtoull(s, nullptr, 10);
  };
  env_bytes("BRAID_COMM_AR_HALVING_MAX", ring_opts_.halving_all_reduce_max_bytes);
  env_bytes("BRAID_COMM_AG_DOUBLING_MAX", ring_opts_.doubling_all_gather_max_bytes);
  env_bytes("BRAID_COMM_AG_DIRECT_MAX", ring_opts_.direct_all_gather_max_bytes);
  env_bytes("BRAID_COMM_BCAST_TREE_MAX", ring_opts_.chain_broadcast_min_bytes);
  env_bytes("BRAID_COMM_BCAST_FLAT_MAX", ring_opts_.flat_broadcast_max_bytes);
  env_bytes("BRAID_COMM_BCAST_SCATTER_MAX", ring_opts_.scatter_broadcast_max_bytes);
  if (const char* s = std::getenv("BRAID_COMM_A2A_DIRECT")) ring_opts_.direct_all_to_all = std::atoi(s) != 0;
  if (ring_opts_.chunk_bytes == 0) ring_opts_.chunk_bytes = size_t{1} << 20;
  if (ring_opts_.depth < 1) ring_opts_.depth = 1;
}

CommBase::~CommBase() { stop_progress(); }

void CommBase::stop_progress(bool detach) {
  {
    std::lock_guard<std::mutex> lk(qmu_);
    stop_ = true;
  }
  qcv_.notify_all();
  if (progress_.joinable()) {
    if (detach)
      progress_.detach();
    else
      progress_.join();
  }
}

bool CommBase::progress_busy() {
  std::lock_guard<std::mutex> lk(qmu_);
  return busy_ || !queue_.empty();
}

void CommBase::progress_loop() {
  std::unique_lock<std::mutex> lk(qmu_);
  for (;;) {
    qcv_.wait(lk, [&] { return (!queue_.empty() && !busy_) || (stop_ && queue_.empty()); });
    if (queue_.empty()) return;  // stopping and drained
    auto item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    std::exception_ptr err;
    try {
      item.first();
    } catch (...) {
      err = std::current_exception();
    }
    lk.lock();
    busy_ = false;
    item.second->complete(err);
    qcv_.notify_all();
  }
}

void CommBase::run_exclusive(const std::function<void()>& fn) {
  {
    std::unique_lock<std::mutex> lk(qmu_);
    qcv_.wait(lk, [&] { return queue_.empty() && !busy_; });
    busy_ = true;
  }
  struct Release {
    CommBase* self;
    ~Release() {
      {
        std::lock_guard<std::mutex> lk(self->qmu_);
        self->busy_ = false;
      }
      self->qcv_.notify_all();
    }
  } release{this};
  fn();
}

WorkPtr CommBase::enqueue(std::function<void()> fn) {
  auto w = std::make_shared<PromiseWork>();
  {
    std::lock_guard<std::mutex> lk(qmu_);
    BRAID_CHECK(!stop_, "collective queued on a communicator being destroyed");
    if (!progress_.joinable()) progress_ = std::thread([this] { progress_loop(); });
    queue_.emplace_back(std::move(fn), w);
  }
  qcv_.notify_all();
  return w;
}

// ---- dispatch ----

void CommBase::do_all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                             Algorithm algo) {
  if (algo == Algorithm::native)
    native_all_reduce(send, recv, count, dtype, op);
  else
    algo::ring_all_reduce(*this, workspace_, ring_opts_, send, recv, count, dtype, op);
}

void CommBase::do_all_gather(const void* send, void* recv, size_t count, DType dtype,
                             Algorithm algo) {
  if (algo == Algorithm::native)
    native_all_gather(send, recv, count, dtype);
  else
    algo::all_gather(*this, ring_opts_, send, recv, count, dtype);
}

void CommBase::do_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op, Algorithm algo) {
  if (algo == Algorithm::native)
    native_reduce_scatter(send, recv, count, dtype, op);
  else
    algo::ring_reduce_scatter(*this, workspace_, ring_opts_, send, recv, count, dtype, op);
}

void CommBase::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          Algorithm algo) {
  run_exclusive([&] { do_all_reduce(send, recv, count, dtype, op, algo); });
}

void CommBase::all_gather(const void* send, void* recv, size_t count, DType dtype,
                          Algorithm algo) {
  run_exclusive([&] { do_all_gather(send, recv, count, dtype, algo); });
}

void CommBase::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                              Algorithm algo) {
  run_exclusive([&] { do_reduce_scatter(send, recv, count, dtype, op, algo); });
}

void CommBase::all_to_all(const void* send, void* recv, size_t count, DType dtype,
                          Algorithm algo) {
  run_exclusive([&] {
    if (algo == Algorithm::native)
      native_all_to_all(send, recv, count, dtype);
    else
      algo::all_to_all(*this, ring_opts_, send, recv, count, dtype);
  });
}

void CommBase::broadcast(void* buf, size_t count, DType dtype, int root, Algorithm algo) {
  run_exclusive([&] {
    if (algo == Algorithm::native)
      native_broadcast(buf, count, dtype, root);
    else
      algo::broadcast(*this, ring_opts_, buf, count, dtype, root);
  });
}

void CommBase::barrier() {
  run_exclusive([&] { native_barrier(); });
}

WorkPtr CommBase::all_reduce_async(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op, Algorithm algo) {
  return enqueue([=, this] { do_all_reduce(send, recv, count, dtype, op, algo); });
}

WorkPtr CommBase::all_gather_async(const void* send, void* recv, size_t count, DType dtype,
                                   Algorithm algo) {
  return enqueue([=, this] { do_all_gather(send, recv, count, dtype, algo); });
}

WorkPtr CommBase::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, Algorithm algo) {
  return enqueue([=, this] { do_reduce_scatter(send, recv, count, dtype, op, algo); });
}

// ---- default "native" = ours ----

void CommBase::native_all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op) {
  algo::ring_all_reduce(*this, workspace_, ring_opts_, send, recv, count, dtype, op);
}
void CommBase::native_all_gather(const void* send, void* recv, size_t count, DType dtype) {
  algo::all_gather(*this, ring_opts_, send, recv, count, dtype);
}
void CommBase::native_reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                     ReduceOp op) {
  algo::ring_reduce_scatter(*this, workspace_, ring_opts_, send, recv, count, dtype, op);
}
void CommBase::native_all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  algo::all_to_all(*this, ring_opts_, send, recv, count, dtype);
}
void CommBase::native_broadcast(void* buf, size_t count, DType dtype, int root) {
  algo::broadcast(*this, ring_opts_, buf, count, dtype, root);
}
void CommBase::native_barrier() { algo::dissemination_barrier(*this); }

}  // namespace braid::comm
