// The world communicator of test_mpi, set by tests/mpi/main.cpp for the test bodies.
#pragma once
#include "braid/comm/communicator.h"

namespace braid::test_mpi {
using comm::Communicator;
extern Communicator* g_world;
inline Communicator& world() { return *g_world; }
}  // namespace braid::test_mpi
