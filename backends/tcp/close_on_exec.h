// Every socket of the tcp backend is close-on-exec: a process that a rank starts (system(), a
// data loader's worker that execs) must not inherit the rank's connections. A helper that
// outlived a killed rank would hold them open, and the rank's peers would see no end of stream
// and wait out the op timeout instead of failing at once.
// Asio 1.74 opens and accepts without SOCK_CLOEXEC, so each socket is marked right after it is
// created: a fork+exec on another thread in between can still inherit it.
#pragma once

#include <fcntl.h>

namespace kolo::tcp {

template <typename Socket>
void close_on_exec(Socket& s) {
  ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);
}

}  // namespace kolo::tcp
