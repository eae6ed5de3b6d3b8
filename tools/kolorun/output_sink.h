// OutputSink: kolorun's own stdout or stderr, written without ever blocking the supervise loop.
//
// Note [kolorun output never blocks]
// kolorun's one thread also forwards signals, reaps ranks and enforces --grace, so it must
// never sleep in write(2) because whatever reads its output stopped reading (`kolorun ... |
// less`, a stuck `| ssh`, a pipe nobody drains): SIGINT would then wait for the reader. So lines
// are appended to a buffer here, and the loop writes them when poll(2) says the descriptor
// takes more (it polls fd() for POLLOUT while wants_write()). While full(), the loop stops
// reading the ranks' pipes for this stream: the output backs up into the ranks, which block in
// their own writes, and nothing is lost; signals, reaping and the grace timer keep running.
//
// Why not O_NONBLOCK: it belongs to the open file description, which kolorun shares with the
// shell (the terminal) and, with --no-tag-output, with its ranks; setting it would hand them
// EAGAIN. Instead each write() is at most PIPE_BUF bytes and only follows a poll that reported
// POLLOUT: on a pipe, a FIFO or a socket that write then completes without waiting (kolorun
// being their only writer), and a terminal whose output is stopped (Ctrl-S) does not report
// POLLOUT. Regular files and devices that always report POLLOUT take whole buffers. Residual
// case: a terminal with some but under PIPE_BUF bytes of room may hold one write until it
// drains that much.
//
// A write error (EPIPE: the reader is gone) drops this and all later output silently, as
// before: kolorun keeps supervising. Not thread-safe; one per descriptor; the fd is not owned.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kolo::kolorun {

class OutputSink {
 public:
  // Past this many buffered bytes the loop stops feeding the sink (full()). It is a bound on
  // what kolorun reads ahead, not a cut: write() always appends, so the buffer exceeds it by at
  // most one read of a rank's pipe with its prefixes.
  static constexpr size_t kLimit = size_t{1} << 20;

  // fd as it is now: a closed or read-only one drops everything (poll never says a read-only
  // pipe end is writable). kolorun's main puts /dev/null on a closed fd 0, 1 or 2 before
  // anything else, so its sinks never see a closed one.
  explicit OutputSink(int fd);

  int fd() const { return fd_; }
  // Appends data; nothing is written until flush().
  void write(std::string_view data);
  // Writes what the descriptor takes now without waiting; returns the bytes written.
  size_t flush();
  // Bytes waiting (0 once the descriptor failed: they were dropped).
  size_t buffered() const { return buf_.size() - head_; }
  bool wants_write() const { return buffered() > 0; }
  bool full() const { return buffered() >= kLimit; }
  // Forgets what is buffered; returns how many bytes that was.
  size_t drop();

 private:
  int fd_;
  bool always_writable_ = false;  // a regular file or a device: whole buffers at once
  bool broken_ = false;           // a write failed: output is dropped from then on
  std::string buf_;
  size_t head_ = 0;  // buf_[0, head_) is written already
};

// Whether fds a and b are the same file (2>&1, or both the terminal): such descriptors must
// share one OutputSink, or lines written in PIPE_BUF pieces to one could interleave with the
// other's.
bool same_file(int a, int b);

}  // namespace kolo::kolorun
