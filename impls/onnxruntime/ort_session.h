#pragma once
// What the ONNX Runtime adapters share: the process's ONNX Runtime (the
// library loaded and one OrtEnv created, once), and a cache of sessions,
// one per distinct model, each run on the caller's tensors.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "impls/onnxruntime/onnx_model.h"

namespace attncheck::impls::ort {

/// One tensor handed to a session: a graph input's name, its element type
/// (kOnnx*), shape and bytes (ONNX Runtime reads them in place).
struct OrtTensorData {
  std::string name;
  int type = 1;
  std::vector<std::int64_t> shape;
  std::vector<char> bytes;
};

/// The f32 tensor of `values` under `name`.
OrtTensorData f32_tensor(std::string name, std::vector<std::int64_t> shape,
                         const std::vector<float>& values);

/// "ONNX Runtime 1.30.0 (<origin>)", or the reason it cannot be loaded,
/// for descriptions and errors.
std::string ort_origin();

/// Sessions of one adapter: one per distinct model (its serialized bytes
/// are the key: the op, its attributes and its input and output types),
/// created on first use with `threads` intra-op threads and kept, the most
/// recently used first, up to kMaxSessions (each 4-thread session holds a
/// thread pool). Safe to call from several threads.
class SessionCache {
 public:
  /// Sessions a cache keeps; the least recently used goes beyond it.
  static constexpr std::size_t kMaxSessions = 16;

  explicit SessionCache(int threads) : threads_(threads) {}
  ~SessionCache();
  SessionCache(const SessionCache&) = delete;
  SessionCache& operator=(const SessionCache&) = delete;

  /// Runs `model` on `inputs` and returns its graph output `output` (f32)
  /// in `out`, checked to have `shape`. Returns "" on success, else one
  /// line: ONNX Runtime's own message (a refused model or input shape), or
  /// why the library could not be loaded.
  std::string run(const OnnxModel& model, std::vector<OrtTensorData>& inputs,
                  const std::string& output, const std::vector<std::int64_t>& shape,
                  std::vector<float>& out);

 private:
  struct Session;
  // Finds or creates the session of `bytes`; "" or the reason it failed.
  std::string session_for(const std::string& bytes, std::shared_ptr<Session>& session);

  int threads_;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<Session>>> sessions_;
};

}  // namespace attncheck::impls::ort
