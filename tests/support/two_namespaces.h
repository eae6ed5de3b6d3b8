// TwoNamespaces: two network namespaces joined by a veth pair, for the tests that run a job as
// two "hosts" that reach each other only through the veth addresses. Header-only; used by the
// tests under tests/ only.
#pragma once

#include <unistd.h>

#include <string>

#include "tests/support/run_command.h"

namespace kolo::testing {

// Network namespaces <prefix><pid>a and ...b for one test, deleted when it ends. Creating them
// needs root (CAP_SYS_ADMIN); ok() is false otherwise, and why() says why.
class TwoNamespaces {
 public:
  explicit TwoNamespaces(const std::string& prefix) : ns_(prefix + std::to_string(::getpid())) {
    auto setup = run_command("ip netns add " + ns_ + "a && ip netns add " + ns_ + "b");
    ok_ = setup.exit_code == 0;
    why_ = "cannot create network namespaces (needs root/CAP_SYS_ADMIN): " + setup.output;
    if (!ok_) remove();
  }
  ~TwoNamespaces() { remove(); }
  TwoNamespaces(const TwoNamespaces&) = delete;
  TwoNamespaces& operator=(const TwoNamespaces&) = delete;
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& name() const { return ns_; }
  // The prefixes that run a command in namespace a or b.
  std::string a() const { return "ip netns exec " + ns_ + "a "; }
  std::string b() const { return "ip netns exec " + ns_ + "b "; }
  // The commands that address devices <ns>x (in a) and <ns>y (in b) as <subnet>.1/24 and .2/24
  // and bring them and both loopbacks up.
  std::string address_and_up(const std::string& subnet) const {
    return a() + "ip addr add " + subnet + ".1/24 dev " + ns_ + "x && " + b() + "ip addr add " +
           subnet + ".2/24 dev " + ns_ + "y && " + a() + "ip link set " + ns_ + "x up && " + b() +
           "ip link set " + ns_ + "y up && " + a() + "ip link set lo up && " + b() +
           "ip link set lo up";
  }
  // Joins a and b by the veth pair <ns>x / <ns>y with address_and_up(subnet).
  ProcessRun link(const std::string& subnet) const {
    return run_command("ip link add " + ns_ + "x netns " + ns_ + "a type veth peer name " + ns_ +
                       "y netns " + ns_ + "b && " + address_and_up(subnet));
  }

 private:
  void remove() { run_command("ip netns del " + ns_ + "a; ip netns del " + ns_ + "b"); }
  const std::string ns_;
  bool ok_ = false;
  std::string why_;
};

}  // namespace kolo::testing
