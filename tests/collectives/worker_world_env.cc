#include "tests/collectives/worker_world.h"

namespace kolo::testing {
Result<World> worker_world() { return world_from_env(); }
}  // namespace kolo::testing
