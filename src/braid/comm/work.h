// The Work handle shared by the backends: an already-finished one.
#pragma once

#include "braid/comm/communicator.h"

namespace braid::comm {

/// A Work that is already complete (e.g. a buffered local send).
class DoneWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace braid::comm
