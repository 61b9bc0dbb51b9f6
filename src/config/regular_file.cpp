#include "tollgate/config/regular_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tollgate::config {

RegularFile::RegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    error = path + ": " + std::strerror(errno);
    return;
  }
  if (::fstat(fd, &st) != 0) {
    error = path + ": " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = path + " is not a regular file";
  } else {
    return;
  }
  ::close(fd);
  fd = -1;
}

RegularFile::~RegularFile() {
  if (fd >= 0) ::close(fd);
}

}  // namespace tollgate::config
