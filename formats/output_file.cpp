#include "formats/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "attncheck/error.h"
#include "core/text.h"

namespace attncheck {
namespace {

[[noreturn]] void cannot(const std::string& what, const std::string& path, const std::string& why) {
  throw InputError(fmt::format("{}: cannot write '{}': {}", what, printable(path), why));
}

// Writes all of `text` to `fd`; false on an error.
bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t k = ::write(fd, text.data() + done, text.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<size_t>(k);
  }
  return true;
}

// The file a path names: a symbolic link's target (the link stays a link).
std::string resolved(const std::string& path) {
  std::error_code ec;
  const auto target = std::filesystem::canonical(path, ec);
  return ec ? path : target.string();
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what) {
  if (path.empty()) cannot(what, path, "the path is empty");
  const std::string target = resolved(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) cannot(what, path, "it is a directory");
    if (::access(target.c_str(), W_OK) != 0) cannot(what, path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return;  // a device or FIFO: written in place
  }
  auto dir = std::filesystem::path(target).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    cannot(what, path, fmt::format("no directory '{}'", printable(dir.string())));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    cannot(what, path, fmt::format("directory '{}': {}", printable(dir.string()), std::strerror(errno)));
  }
}

void check_output_directory(const std::string& path, const std::string& what) {
  if (path.empty()) cannot(what, path, "the path is empty");
  std::error_code ec;
  std::filesystem::path dir(path);
  if (std::filesystem::exists(dir, ec)) {
    if (!std::filesystem::is_directory(dir, ec)) cannot(what, path, "it is not a directory");
    if (::access(dir.c_str(), W_OK) != 0) cannot(what, path, std::strerror(errno));
    return;
  }
  // Created on the first failure: the nearest existing ancestor must take it.
  std::filesystem::path up = std::filesystem::absolute(dir, ec).parent_path();
  while (!up.empty() && !std::filesystem::exists(up, ec) && up != up.root_path()) up = up.parent_path();
  if (!std::filesystem::is_directory(up, ec)) {
    cannot(what, path, fmt::format("'{}' is not a directory", printable(up.string())));
  }
  if (::access(up.c_str(), W_OK) != 0) {
    cannot(what, path, fmt::format("directory '{}': {}", printable(up.string()), std::strerror(errno)));
  }
}

void write_output_file(const std::string& path, const std::string& text, const std::string& what) {
  check_output_path(path, what);
  const std::string target = resolved(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) cannot(what, path, std::strerror(errno));
    const bool ok = write_all(fd, text);
    const int saved = errno;
    ::close(fd);
    if (!ok) cannot(what, path, std::strerror(saved));
    return;
  }
  std::string tmp = target + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) cannot(what, path, std::strerror(errno));
  const bool ok = write_all(fd, text) && ::fsync(fd) == 0;
  const int saved = errno;
  // mkstemp makes the file 0600; a report is as readable as any new file.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    cannot(what, path, std::strerror(saved));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    cannot(what, path, std::strerror(e));
  }
}

}  // namespace attncheck
