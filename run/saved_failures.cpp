// The failure database (run/saved_failures.h).

#include "run/saved_failures.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <filesystem>
#include <functional>
#include <system_error>

#include "attncheck/dtype.h"
#include "attncheck/fixture.h"
#include "attncheck/run.h"
#include "core/cancel.h"
#include "run/failure_report.h"

namespace attncheck {
namespace {

// A fixture file as this run last read or wrote it: its identity and
// modification time.
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

// What this run has seen of each fixture path (nullopt state: absent), in
// memory shared with the processes it forks (check --jobs): created by
// the session's first read of the folder, before any fork, so that one
// process's write is the run's and never taken for another run's by its
// sibling processes. Keyed by the path's hash; a full table forgets (a
// fixture then goes beside, never over another's).
constexpr size_t kSeenEntries = 8192;
struct SeenEntry {
  uint64_t key;
  uint8_t used, present;
  FileState state;
};
struct SeenTable {
  pthread_mutex_t mutex;  // process-shared and robust
  SeenEntry entries[kSeenEntries];
};

SeenTable* seen_table() {
  static SeenTable* const table = []() -> SeenTable* {
    void* m = ::mmap(nullptr, sizeof(SeenTable), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    auto* t = static_cast<SeenTable*>(m);  // zero-filled: every entry unused
    pthread_mutexattr_t a;
    ::pthread_mutexattr_init(&a);
    ::pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    ::pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    ::pthread_mutex_init(&t->mutex, &a);
    ::pthread_mutexattr_destroy(&a);
    return t;
  }();
  return table;
}

class SeenLock {
 public:
  explicit SeenLock(SeenTable* t) : t_(t) {
    // A process that died holding it (killed mid-save) left nothing half
    // written that matters: an entry is rewritten whole before it is used.
    if (::pthread_mutex_lock(&t_->mutex) == EOWNERDEAD) ::pthread_mutex_consistent(&t_->mutex);
  }
  ~SeenLock() { ::pthread_mutex_unlock(&t_->mutex); }
  SeenLock(const SeenLock&) = delete;
  SeenLock& operator=(const SeenLock&) = delete;

 private:
  SeenTable* t_;
};

// The entry of `path` (its slot, made when `make`), or nullptr.
SeenEntry* seen_entry(SeenTable* t, const std::string& path, bool make) {
  const uint64_t key = std::hash<std::string>{}(path) | 1;  // 0 is never a key
  for (size_t k = 0; k < kSeenEntries; ++k) {
    SeenEntry& e = t->entries[(key + k) % kSeenEntries];
    if (e.used && e.key == key) return &e;
    if (!e.used) {
      if (!make) return nullptr;
      e.used = 1;
      e.key = key;
      return &e;
    }
  }
  return nullptr;
}

void remember(const std::string& path) {
  SeenTable* t = seen_table();
  if (!t) return;
  const auto state = file_state(path);
  const SeenLock lock(t);
  if (SeenEntry* e = seen_entry(t, path, true)) {
    e->present = state.has_value();
    e->state = state.value_or(FileState{});
  }
}

// True when the file at `path` is as this run last saw it (absent
// included); a file never looked at may be written only when absent.
bool unchanged_since_seen(const std::string& path) {
  const auto now = file_state(path);
  SeenTable* t = seen_table();
  if (!t) return !now;
  const SeenLock lock(t);
  const SeenEntry* e = seen_entry(t, path, false);
  if (!e) return !now;
  return e->present ? now && e->state == *now : !now;
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
