#pragma once
// The channel between the harness and a worker process: frames (a uint64
// length, then the payload) on a socketpair, the kinds of request and
// reply, and the byte codec of what they carry (problems, layer calls,
// results, ImplInfo). Both ends are the same binary, so doubles travel bit
// for bit, NaN payloads and strides included.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attncheck/implementation.h"
#include "attncheck/layer.h"

namespace attncheck::host_detail {

/// argv[1] of a worker; argv[2] the harness's pid, argv[3] the mode
/// ("builtin", "plugin", "describe" or a registered loader's), argv[4] the
/// implementation's name (for "describe": the loader, "" for a plugin),
/// argv[5] the file's path.
inline constexpr const char* kWorkerFlag = "--attncheck-worker";
/// The worker's end of the socketpair.
inline constexpr int kWorkerFd = 3;
/// The environment variable that carries a worker's memory limit in MiB
/// (0: none), applied by the worker before it loads anything.
inline constexpr const char* kWorkerMemoryVar = "ATTNCHECK_WORKER_MEMORY_MB";
/// The exit status of a worker that could not read its request or send its
/// reply because its channel's descriptor was closed under it (by the
/// implementation), not by the harness.
inline constexpr int kChannelLostExit = 121;
/// The exit status of a worker whose channel's descriptor was replaced by
/// another file (a dup2 onto it) by the implementation.
inline constexpr int kChannelReplacedExit = 122;
/// True in a sanitizer's build: the memory limit is not applied there (the
/// sanitizer's shadow memory would count).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif
#else
inline constexpr bool kSanitizedBuild = false;
#endif
/// The largest frame either end accepts: a garbage length ends the
/// exchange, never becomes an allocation.
inline constexpr uint64_t kMaxFrameBytes = uint64_t{1} << 36;

/// A request's frame is its length (the payload's bytes plus 8), then the
/// call's id, then the payload; every reply's frame is its length, the
/// sender's process id, the id of the call it answers (0 for what is sent
/// without a request: the relay's message, "ready", a description), then
/// the reply. The id is drawn at random for each call, so a reply that an
/// implementation forges or holds back answers no call the harness made,
/// and is refused, rather than taken for the call in flight and shifting
/// every later reply by one.
inline constexpr size_t kCallIdBytes = sizeof(uint64_t);
/// The bytes before a reply's kind: its length, the sender's pid, the call id.
inline constexpr size_t kReplyHead = sizeof(uint64_t) + sizeof(int32_t) + kCallIdBytes;

/// The first byte of a request.
enum Op : uint8_t { kForward = 1, kBackward = 2, kLayerRun = 3 };

/// The first byte of a reply, after the sender's process id.
enum Reply : uint8_t {
  kForwardResult = 0,
  kBackwardResult = 1,
  kContractError = 2,
  kThrew = 3,
  kLayerResult = 4,
  kForked = 5,      // the implementation forked during the call
  kDescribed = 6,   // a plugin's descriptors (describe mode)
  kInputError = 7,  // the plugin could not be loaded (describe mode)
  kReady = 8,       // the worker has built its implementation
  kReceived = 9,    // the worker has decoded the request; the call starts now
  // The relay's first message, before any code of the implementation is
  // loaded (host/containment.h): the init's pid, the kernel process's pid
  // and the pid it says in its replies (its pid inside the namespace) ...
  kContained = 10,
  // ... or, without a PID namespace, the kernel process's pid and why.
  kUncontained = 11,
};

/// Writes the whole frame; false when the peer is gone (never SIGPIPE).
bool send_frame(int fd, const std::string& payload);

/// Blocking read of n bytes; false at end of file or on an error.
bool read_exact(int fd, char* dst, size_t n);

/// A message that is not what the wire says (cut short, bytes left over, a
/// value no field can hold): the peer, or something in it, wrote to the
/// channel.
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The longest text (an error message) a reply carries.
inline constexpr uint64_t kMaxTextBytes = uint64_t{1} << 20;

/// Appends values to a message.
class Writer {
 public:
  template <typename T>
  void put(const T& x) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&x), sizeof x);
  }
  template <typename T>
  void put_vec(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(v.size());
    const size_t n = v.size() * sizeof(T);
    if (borrow_ && n >= kBorrowedBytes) {
      spans_.push_back({bytes_.size(), reinterpret_cast<const char*>(v.data()), n});
      borrowed_ += n;
      return;
    }
    bytes_.append(reinterpret_cast<const char*>(v.data()), n);
  }
  void put_str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes_.append(s);
  }
  /// Makes room for `n` bytes at once: a large problem's message is then
  /// allocated once, not grown (a doubling copy at the peak) tensor by tensor.
  void reserve(size_t n) { bytes_.reserve(n); }
  /// From now on, arrays of kBorrowedBytes or more are not copied: the
  /// message refers to them where they are (a request, whose problem
  /// outlives its sending), so a real-size problem is not in the
  /// harness's memory twice. Such a message is read through size() and
  /// run_at(), never bytes().
  void borrow_large_arrays() { borrow_ = true; }
  /// The bytes of a message that borrows nothing.
  const std::string& bytes() const {
    if (!spans_.empty()) throw std::logic_error("Writer::bytes() of a message that borrows");
    return bytes_;
  }
  /// The message's length, borrowed arrays included.
  size_t size() const { return bytes_.size() + borrowed_; }
  /// The contiguous bytes of the message from offset `at` (< size()) up to
  /// the next boundary between copied and borrowed bytes.
  std::pair<const char*, size_t> run_at(size_t at) const;

  /// Arrays this large are borrowed by a message that borrows.
  static constexpr size_t kBorrowedBytes = size_t{1} << 20;

 private:
  struct Span {
    size_t at;  ///< where in bytes_ the borrowed bytes belong
    const char* data;
    size_t size;
  };
  std::string bytes_;
  std::vector<Span> spans_;
  size_t borrowed_ = 0;
  bool borrow_ = false;
};

/// Reads values back in the order they were written; a message that ends
/// early throws std::runtime_error.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T x;
    take(&x, sizeof x);
    return x;
  }
  template <typename T>
  std::vector<T> get_vec() {
    const auto n = get<uint64_t>();
    if (n > (bytes_.size() - pos_) / sizeof(T))
      throw WireError("truncated message");
    std::vector<T> v;
    if (discard_ && n * sizeof(T) >= kSliceBytes) {
      // Into room reserved, not zeroed, a slice at a time, each slice of
      // the message given back once copied: the array is in memory about
      // once while it is decoded.
      v.reserve(n);
      std::vector<T> slice(kSliceBytes / sizeof(T));
      for (uint64_t done = 0; done < n;) {
        const uint64_t k = std::min<uint64_t>(slice.size(), n - done);
        take(slice.data(), k * sizeof(T));
        v.insert(v.end(), slice.begin(), slice.begin() + static_cast<std::ptrdiff_t>(k));
        done += k;
      }
      return v;
    }
    v.resize(n);
    take(v.data(), n * sizeof(T));
    return v;
  }
  std::string get_str() {
    const std::vector<char> v = get_vec<char>();
    return {v.begin(), v.end()};
  }
  /// Gives the pages of each large array back to the system once it is
  /// copied out (madvise DONTNEED): for a message its owner discards after
  /// decoding (the worker's request), so that a real-size problem is in
  /// memory about once while it is decoded, not twice.
  void discard_as_read() { discard_ = true; }
  /// Bytes not yet read.
  size_t remaining() const { return bytes_.size() - pos_; }
  /// Throws WireError when bytes are left: a message is read whole.
  void expect_end() const {
    if (pos_ != bytes_.size()) throw WireError("bytes after the message's end");
  }

 private:
  void take(void* dst, size_t n) {
    if (n > bytes_.size() - pos_) throw WireError("truncated message");
    if (n) std::memcpy(dst, bytes_.data() + pos_, n);  // dst is null for an empty vector
    if (discard_ && n >= kSliceBytes / 2) release(pos_, n);
    pos_ += n;
  }
  void release(size_t at, size_t n) const;
  static constexpr size_t kSliceBytes = size_t{1} << 24;
  const std::string& bytes_;
  size_t pos_ = 0;
  bool discard_ = false;
};

/// Every field of a problem.
void put_problem(Writer& w, const Problem& p);

Problem get_problem(Reader& r);

/// A layer's run: its weights and input.
void put_layer_call(Writer& w, const LayerWeights& lw, const LayerInput& x);
std::pair<LayerWeights, LayerInput> get_layer_call(Reader& r);

/// Every field of an implementation's declaration.
void put_info(Writer& w, const ImplInfo& i);
ImplInfo get_info(Reader& r);

/// A forward result and the implementation's score_elements_computed().
void put_forward_result(Writer& w, const ForwardResult& f, std::optional<int64_t> score);
ForwardResult get_forward_result(Reader& r, std::optional<int64_t>& score);

void put_backward_result(Writer& w, const BackwardResult& b);
BackwardResult get_backward_result(Reader& r);

void put_layer_result(Writer& w, const LayerResult& y);
LayerResult get_layer_result(Reader& r);

}  // namespace attncheck::host_detail
