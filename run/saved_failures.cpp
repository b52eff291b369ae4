// The failure database (run/saved_failures.h).

#include "run/saved_failures.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "attncheck/run.h"
#include "core/cancel.h"
#include "run/failure_report.h"

namespace attncheck {
namespace {

// A fixture file as this process last read or wrote it: its identity and
// modification time (nullopt: there was none). Forked children (--jobs)
// inherit what the session read before forking.
struct FileState {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  timespec mtime{};
  bool operator==(const FileState& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
           mtime.tv_nsec == o.mtime.tv_nsec;
  }
};

std::optional<FileState> file_state(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileState{st.st_dev, st.st_ino, st.st_size, st.st_mtim};
}

std::mutex seen_mutex;
std::map<std::string, std::optional<FileState>>& seen_files() {
  static std::map<std::string, std::optional<FileState>> seen;
  return seen;
}

void remember(const std::string& path) {
  const auto state = file_state(path);
  const std::lock_guard lock(seen_mutex);
  seen_files()[path] = state;
}

// True when the file at `path` is as this process last saw it (absent
// included); a file never looked at may be written only when absent.
bool unchanged_since_seen(const std::string& path) {
  const auto now = file_state(path);
  const std::lock_guard lock(seen_mutex);
  const auto it = seen_files().find(path);
  if (it == seen_files().end()) return !now;
  return it->second == now;
}

// An exclusive lock on the save folder, for one check-and-write. Without
// one (a folder that refuses the lock file) the write goes on unlocked.
class FolderLock {
 public:
  explicit FolderLock(const std::string& dir) {
    fd_ = ::open((std::filesystem::path(dir) / ".attncheck-save.lock").c_str(),
                 O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0666);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FolderLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string save_failure_fixture(const std::string& dir, const std::string& path,
                                 const Fixture& f) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);  // save_fixture names the error, if any
  const FolderLock lock(dir);
  std::string to = path;
  if (!unchanged_since_seen(path)) {
    const fs::path p(path);
    for (int n = 2;; ++n) {
      to = (p.parent_path() / fmt::format("{}-{}.json", p.stem().string(), n)).string();
      if (!fs::exists(to, ec)) break;
    }
  }
  save_fixture(to, f);
  remember(to);
  return to;
}

std::optional<SavedFixture> find_saved_failure(const PropertyInfo& prop, const std::string& impl,
                                               DType dtype, const RunConfig& config) {
  namespace fs = std::filesystem;
  if (config.save_failures_dir.empty()) return std::nullopt;
  SavedFixture saved;
  saved.path = fixture_path(config.save_failures_dir, impl, dtype, prop.name);
  // What this run may replace when it saves this item's failure.
  remember(saved.path);
  if (!config.replay_saved) return std::nullopt;
  std::error_code ec;
  if (!fs::is_regular_file(saved.path, ec)) return std::nullopt;
  try {
    saved.fixture = load_fixture(saved.path);
    const FixtureMeta& meta = saved.fixture->meta;
    if (meta.impl.value_or(impl) != impl || meta.property.value_or("") != prop.name ||
        saved.fixture->problem.dtype != dtype) {
      throw InputError("its meta names another implementation, property or dtype");
    }
  } catch (const std::exception& e) {
    saved.fixture.reset();
    saved.error = e.what();
  }
  return saved;
}

SavedReplay replay_saved_failure(const SavedFixture& saved, const Implementation& impl,
                                 const RunConfig& config) {
  namespace fs = std::filesystem;
  SavedReplay r;
  r.saved.fixture = saved.path;
  try {
    if (!saved.fixture) throw InputError(saved.error);
    RunConfig replay = replay_config(*saved.fixture);
    replay.known_findings = config.known_findings;
    r.replayed = replay_fixture(*saved.fixture, impl, replay);
  } catch (const Cancelled&) {
    throw;  // the run is stopping
  } catch (const std::exception& e) {
    r.saved.result = SavedFailure::Result::unreadable;
    r.saved.note = e.what();
    return r;
  }
  switch (r.replayed.status) {
    case PropertyStatus::failed:
      r.saved.result = SavedFailure::Result::still_fails;
      break;
    case PropertyStatus::xfail:
      r.saved.result = SavedFailure::Result::known;
      break;
    case PropertyStatus::passed: {
      r.saved.result = SavedFailure::Result::now_passes;
      std::error_code ec;
      if (config.prune_fixed) {
        fs::remove(saved.path, ec);
      } else {
        // Kept beside the folder's live fixtures, out of the next run's
        // way (already there: an item --jobs ran twice moved it).
        const fs::path fixed = fs::path(config.save_failures_dir) / "fixed";
        fs::create_directories(fixed, ec);
        const fs::path to = fixed / fs::path(saved.path).filename();
        fs::rename(saved.path, to, ec);
        std::error_code there;
        if (ec && !fs::exists(saved.path, there) && fs::exists(to, there)) ec.clear();
        r.saved.note = ec ? fmt::format("not moved: {}", ec.message()) : to.string();
      }
      remember(saved.path);  // gone by this run's hand: its place is free again
      break;
    }
    default:
      r.saved.result = SavedFailure::Result::unreadable;
      r.saved.note = r.replayed.message;
  }
  return r;
}

void settle_saved_failure(const SavedReplay& replay, PropertyOutcome& out) {
  out.saved = replay.saved;
  if (replay.saved.result != SavedFailure::Result::still_fails) return;
  if (out.status != PropertyStatus::passed && out.status != PropertyStatus::xfail &&
      out.status != PropertyStatus::unsupported) {
    return;  // the search failed too (its own report, and fixture, stand)
  }
  const PropertyOutcome& r = replay.replayed;
  out.status = PropertyStatus::failed;
  out.expected.reset();
  out.counterexample = r.counterexample;
  out.diagnosis = r.diagnosis;
  out.also_explained = r.also_explained;
  out.fixture = replay.saved.fixture;
  out.message = fmt::format(
      "FAILED {} on {}: the failure saved in {} still fails, though this run's search did not "
      "meet it ({}); its replay:\n{}",
      out.property, out.impl, replay.saved.fixture,
      out.message.empty() ? std::string("the search passed")
                          : out.message.substr(0, out.message.find('\n')),
      r.message);
}

std::string saved_failures_summary(const std::vector<PropertyOutcome>& outcomes) {
  int n = 0, still = 0, fixed = 0, unreadable = 0;
  std::string moved_to;
  for (const PropertyOutcome& o : outcomes) {
    if (!o.saved) continue;
    ++n;
    switch (o.saved->result) {
      case SavedFailure::Result::still_fails:
      case SavedFailure::Result::known:
        ++still;
        break;
      case SavedFailure::Result::now_passes:
        ++fixed;
        if (moved_to.empty() && !o.saved->note.empty())
          moved_to = std::filesystem::path(o.saved->note).parent_path().string();
        break;
      case SavedFailure::Result::unreadable:
        ++unreadable;
    }
  }
  if (n == 0) return {};
  std::string s = fmt::format("replayed {} saved failure{}: {} still fail, {} now pass", n,
                              n == 1 ? "" : "s", still, fixed);
  if (fixed > 0) s += moved_to.empty() ? " (removed)" : fmt::format(" (moved to {}/)", moved_to);
  if (unreadable > 0) s += fmt::format(", {} no longer replay (left where they are)", unreadable);
  return s;
}

}  // namespace attncheck
