// kolo::built() and kolo::built_backend_names() against what CMake configured for this build.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace kolo {
namespace {

// The registry's order (backends/registry.cc), from the facts CMake passes to this test.
std::vector<std::string> expected_backends() {
  std::vector<std::string> names;
#ifdef __linux__
  names.push_back("shm");
#endif
  names.push_back("tcp");
  if (KOLO_TEST_BUILT_MPI) names.push_back("mpi");
  if (KOLO_TEST_BUILT_NCCL) names.push_back("nccl");
  return names;
}

TEST(BuildQueriesTest, NamesAreTheRegistrysInOrder) {
  EXPECT_EQ(built_backend_names(), expected_backends());
}

TEST(BuildQueriesTest, BuiltAnswersByName) {
  for (const std::string& name : expected_backends()) EXPECT_TRUE(built(name)) << name;
  EXPECT_EQ(built("mpi"), static_cast<bool>(KOLO_TEST_BUILT_MPI));
  EXPECT_EQ(built("nccl"), static_cast<bool>(KOLO_TEST_BUILT_NCCL));
  EXPECT_EQ(mpi_threads_supported(), static_cast<bool>(KOLO_TEST_BUILT_MPI));
}

TEST(BuildQueriesTest, AnUnknownNameIsNotBuilt) {
  for (const char* name : {"", "gloo", "TCP", "tcp ", "hierarchical", "local", "thread"})
    EXPECT_FALSE(built(name)) << "'" << name << "'";
}

}  // namespace
}  // namespace kolo
