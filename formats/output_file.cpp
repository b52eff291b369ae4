#include "formats/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "formats/input_file.h"
#include "attncheck/dtype.h"
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

// check_output_path's rule; the lstat of the existing file, or nullopt
// when there is none. A symbolic link is refused rather than followed: the
// rename would replace the link, and writing through it would not be atomic.
// A second hard link is refused: the rename would split the links.
std::optional<struct stat> checked_output(const std::string& path, const std::string& what) {
  if (path.empty()) cannot(what, path, "the path is empty");
  struct stat st {};
  std::optional<struct stat> existing;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) cannot(what, path, "it is a symbolic link; name the file itself");
    if (S_ISDIR(st.st_mode)) cannot(what, path, "it is a directory");
    if (!S_ISREG(st.st_mode)) cannot(what, path, fmt::format("it is {}, not a regular file", file_kind(st.st_mode)));
    if (st.st_nlink > 1) {
      cannot(what, path, fmt::format("it has {} hard links, and replacing it would split them; "
                                     "name a file with one link",
                                     st.st_nlink));
    }
    if (::access(path.c_str(), W_OK) != 0) cannot(what, path, std::strerror(errno));
    existing = st;
  } else if (errno != ENOENT && errno != ENOTDIR) {
    cannot(what, path, std::strerror(errno));
  }
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    cannot(what, path, fmt::format("no directory '{}'", printable(dir.string())));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    cannot(what, path, fmt::format("directory '{}': {}", printable(dir.string()), std::strerror(errno)));
  }
  return existing;
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what) {
  checked_output(path, what);
  // access() says W_OK to root where nothing can be created (/proc, /sys):
  // a file is made beside the target and removed, as the write will, so
  // such a path is refused now rather than after the work.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::string probe = (dir / ".attncheck-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    cannot(what, path, fmt::format("directory '{}': {}", printable(dir.string()), std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_output_directory(const std::string& path, const std::string& what) {
  if (path.empty()) cannot(what, path, "the path is empty");
  std::error_code ec;
  std::filesystem::path dir(path);
  if (std::filesystem::is_symlink(dir, ec) && !std::filesystem::exists(dir, ec)) {
    cannot(what, path, "it is a symbolic link to nothing");
  }
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
  // Checked again: the path may have become a FIFO or a link since the
  // check before the work. Nothing is opened in place, so nothing blocks.
  const std::optional<struct stat> existing = checked_output(path, what);
  mode_t mode = 0;
  if (existing) {
    mode = existing->st_mode & 0777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  std::string tmp = path + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) cannot(what, path, std::strerror(errno));
  // mkstemp makes the file 0600: the report gets the mode it replaces.
  const bool ok = ::fchmod(fd, mode) == 0 && write_all(fd, text) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    cannot(what, path, std::strerror(saved));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    cannot(what, path, std::strerror(e));
  }
}

}  // namespace attncheck
