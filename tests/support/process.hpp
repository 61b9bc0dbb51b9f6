// Runs a real program for end-to-end tests: stdout and stderr captured through a pipe, lines read
// with a deadline, terminated (SIGTERM, then SIGKILL) when the object goes away.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tollgate::testing {

class Process {
 public:
  Process(std::vector<std::string> argv, std::map<std::string, std::string> env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Reads output until a line containing `needle` arrives; returns that line.
  std::optional<std::string> wait_for_line(const std::string& needle, std::chrono::milliseconds timeout);
  // Waits for the process to exit; returns its exit code (or 128+signal), nullopt on timeout.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  void signal(int sig);
  const std::string& output() const { return output_; }  // everything read so far
  // Reads what the process has written so far, without waiting (wait_for_line still sees it all).
  const std::string& read_available();
  pid_t pid() const { return pid_; }

 private:
  bool read_some(std::chrono::milliseconds timeout);
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
  std::size_t scanned_ = 0;
  std::optional<int> exit_code_;
};

// The port in a line like "... listening on 127.0.0.1:PORT ...".
int port_from_line(const std::string& line);

// A loopback TCP port nobody listens on (bound, then closed). Another bind of port 0 may be
// given it next, a gateway's own listener included: for a port that must stay dead, ClosedPort.
int unused_port();

// A loopback TCP port held bound without listening for this object's life: a connection to it
// is refused, and no other socket (a gateway's listener, a test server) can be given it, so a
// gateway told to forward there never reaches itself or another test's server.
class ClosedPort {
 public:
  ClosedPort();
  ~ClosedPort();
  ClosedPort(const ClosedPort&) = delete;
  ClosedPort& operator=(const ClosedPort&) = delete;
  int port() const { return port_; }
  // Gives the port up (a test that then starts a server on it).
  void release();

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A fresh temporary directory; files written with write_file.
std::string temp_dir();
void write_file(const std::string& path, const std::string& text);

}  // namespace tollgate::testing
