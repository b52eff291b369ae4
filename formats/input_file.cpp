#include "formats/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "attncheck/dtype.h"
#include "core/text.h"
#include "formats/json_reader.h"

namespace attncheck {
namespace {

[[noreturn]] void cannot(const std::string& path, const std::string& why) {
  throw InputError(fmt::format("{}: cannot read: {}", printable(path), why));
}


// Closes the descriptor on every way out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

std::string read_input_file(const std::string& path, int64_t max_bytes) {
  if (path.empty()) cannot(path, "the path is empty");
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of
  // waiting (uninterruptibly for SIGTERM's default handler here) for one.
  // A socket cannot be open()ed at all (ENXIO), said as what it is.
  const Fd in{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (in.fd < 0) {
    const int e = errno;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      cannot(path, fmt::format("it is {}, not a regular file", file_kind(st.st_mode)));
    }
    throw InputError(fmt::format("{}: cannot open file: {}", printable(path), std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) cannot(path, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) cannot(path, "it is a directory");
  if (!S_ISREG(st.st_mode)) {
    cannot(path, fmt::format("it is {}, not a regular file", file_kind(st.st_mode)));
  }
  if (st.st_size > max_bytes) {
    cannot(path, fmt::format("{} bytes, more than the limit of {} bytes", st.st_size,
                             formats::power_of_two(max_bytes)));
  }
  // Read to the end, which may move while the file grows: still no more
  // than the limit. One byte more than the size, so that the read that
  // finds the end needs no larger string (growing one of 128 MiB copies it
  // into twice the room, the peak of a large fixture's load).
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t done = 0;
  for (;;) {
    if (done == text.size()) {
      if (static_cast<int64_t>(text.size()) >= max_bytes + 1) {
        cannot(path, fmt::format("more than the limit of {} bytes",
                                 formats::power_of_two(max_bytes)));
      }
      text.resize(std::min<size_t>(text.size() + (1 << 16), static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t k = ::read(in.fd, text.data() + done, text.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) cannot(path, std::strerror(errno));
    if (k == 0) break;
    done += static_cast<size_t>(k);
  }
  text.resize(done);
  if (static_cast<int64_t>(done) > max_bytes) {
    cannot(path, fmt::format("more than the limit of {} bytes", formats::power_of_two(max_bytes)));
  }
  return text;
}

}  // namespace attncheck
