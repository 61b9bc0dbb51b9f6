#include "support/process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <thread>

namespace tollgate::testing {

Process::Process(std::vector<std::string> argv, std::map<std::string, std::string> env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fd_ = fds[0];
}

Process::~Process() {
  if (!exit_code_) {
    signal(SIGTERM);
    if (!wait_exit(std::chrono::seconds(5))) {
      signal(SIGKILL);
      wait_exit(std::chrono::seconds(5));
    }
  }
  if (fd_ >= 0) close(fd_);
}

void Process::signal(int sig) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, sig);
}

const std::string& Process::read_available() {
  while (read_some(std::chrono::milliseconds(0))) {
  }
  return output_;
}

bool Process::read_some(std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char buf[4096];
  const ssize_t n = read(fd_, buf, sizeof buf);
  if (n <= 0) return false;
  output_.append(buf, static_cast<std::size_t>(n));
  return true;
}

std::optional<std::string> Process::wait_for_line(const std::string& needle, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::size_t nl;
    while ((nl = output_.find('\n', scanned_)) != std::string::npos) {
      std::string line = output_.substr(scanned_, nl - scanned_);
      scanned_ = nl + 1;
      if (line.find(needle) != std::string::npos) return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    if (!read_some(left)) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      if (wait_exit(std::chrono::milliseconds(0))) {
        while (read_some(std::chrono::milliseconds(0))) {}
        if (output_.find('\n', scanned_) == std::string::npos) return std::nullopt;
      }
    }
  }
}

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) {
  if (exit_code_) return exit_code_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      while (read_some(std::chrono::milliseconds(0))) {}
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int port_from_line(const std::string& line) {
  static const std::regex re(R"(listening on [^ ]*:(\d+))");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return -1;
  return std::stoi(m[1]);
}

int unused_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(s);
  return port;
}

ClosedPort::ClosedPort() {
  fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("ClosedPort: cannot bind a loopback port");
  port_ = ntohs(a.sin_port);
}

ClosedPort::~ClosedPort() { release(); }

void ClosedPort::release() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string temp_dir() {
  char tmpl[] = "/tmp/tollgate-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (d == nullptr) throw std::runtime_error("mkdtemp failed");
  return d;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace tollgate::testing
