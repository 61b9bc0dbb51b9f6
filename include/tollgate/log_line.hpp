// One log line, one write. The gateway logs from several threads (request threads, the Redis
// topology watcher, the config poller, the admin thread); a line written piece by piece to stderr
// (std::cerr writes each << at once) can be cut by another thread's line, and a reader that waits
// for "proxy listening on <port>" then gets half a line. A line up to PIPE_BUF bytes written with
// one write() is never interleaved.
#pragma once

#include <unistd.h>

#include <sstream>
#include <string>

namespace tollgate {

template <class... Parts>
void log_line(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  os << '\n';
  const std::string line = os.str();
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(2, line.data() + done, line.size() - done);
    if (n <= 0) break;  // stderr closed: nothing to do about it
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace tollgate
