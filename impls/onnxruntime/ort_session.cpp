#include "impls/onnxruntime/ort_session.h"

#include <cstring>

#include "impls/onnxruntime/ort_api.h"
#include "ort_library.h"  // generated: ATTNCHECK_ONNXRUNTIME_LIBRARY, _ORIGIN

namespace attncheck::impls::ort {
namespace {

// The process's ONNX Runtime: the library, one OrtEnv and the CPU memory
// info every input tensor names. Made on first use and never destroyed:
// ONNX Runtime's thread pools may outlive static destructors (ort_api.h:
// the library is never unloaded either).
struct Runtime {
  std::unique_ptr<OrtRuntime> ort;
  OrtEnv* env = nullptr;
  OrtMemoryInfo* memory = nullptr;
  std::string error;  ///< why there is none; "" when loaded
};

const Runtime& runtime() {
  static const Runtime* r = [] {
    auto* made = new Runtime;
    made->ort = load_onnxruntime(ATTNCHECK_ONNXRUNTIME_LIBRARY, made->error);
    if (!made->ort) return made;
    const OrtApi& api = *made->ort->api;
    // Fatal only: a refused problem comes back through its status, which
    // the adapter reports; ONNX Runtime would print it on stderr too.
    std::string e = take_status(api, api.CreateEnv(kOrtLoggingLevelFatal, "attncheck", &made->env));
    if (e.empty()) {
      e = take_status(api, api.CreateCpuMemoryInfo(kOrtArenaAllocator, kOrtMemTypeDefault,
                                                   &made->memory));
    }
    if (!e.empty()) {
      made->error = "ONNX Runtime " + made->ort->version + " from " + made->ort->path + ": " + e;
      made->ort.reset();
    }
    return made;
  }();
  return *r;
}

// A value ONNX Runtime made or wraps, released with the scope.
struct Value {
  const OrtApi& api;
  OrtValue* value = nullptr;
  ~Value() {
    if (value) api.ReleaseValue(value);
  }
};

}  // namespace

OrtTensorData f32_tensor(std::string name, std::vector<std::int64_t> shape,
                         const std::vector<float>& values) {
  OrtTensorData t{std::move(name), kOnnxFloat, std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

std::string ort_origin() {
  const Runtime& r = runtime();
  if (!r.ort) return r.error;
  return "ONNX Runtime " + r.ort->version + " (" + ATTNCHECK_ONNXRUNTIME_ORIGIN + ")";
}

struct SessionCache::Session {
  const OrtApi& api;
  OrtSession* session = nullptr;
  ~Session() {
    if (session) api.ReleaseSession(session);
  }
};

SessionCache::~SessionCache() = default;

std::string SessionCache::session_for(const std::string& bytes, std::shared_ptr<Session>& session) {
  const Runtime& r = runtime();
  if (!r.ort) return r.error;
  const OrtApi& api = *r.ort->api;
  std::lock_guard lock(mutex_);
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->first == bytes) {
      sessions_.splice(sessions_.begin(), sessions_, it);
      session = it->second;
      return "";
    }
  }
  OrtSessionOptions* options = nullptr;
  std::string e = take_status(api, api.CreateSessionOptions(&options));
  // As a user's session runs: every graph optimization, `threads_` intra-op
  // threads, no inter-op parallelism (one node). Idle pool threads would
  // otherwise spin between runs and take the CPU from the oracle and from
  // other workers: spinning is off, which changes no arithmetic.
  if (e.empty()) e = take_status(api, api.SetIntraOpNumThreads(options, threads_));
  if (e.empty()) e = take_status(api, api.SetInterOpNumThreads(options, 1));
  if (e.empty()) e = take_status(api, api.SetSessionGraphOptimizationLevel(options, kOrtEnableAll));
  if (e.empty()) {
    e = take_status(api, api.AddSessionConfigEntry(options, "session.intra_op.allow_spinning", "0"));
  }
  std::shared_ptr<Session> made(new Session{api, nullptr});
  if (e.empty()) {
    e = take_status(api, api.CreateSessionFromArray(r.env, bytes.data(), bytes.size(), options,
                                                    &made->session));
  }
  if (options) api.ReleaseSessionOptions(options);
  if (!e.empty()) return "ONNX Runtime refused the model: " + e;
  sessions_.emplace_front(bytes, made);
  if (sessions_.size() > kMaxSessions) sessions_.pop_back();
  session = std::move(made);
  return "";
}

std::string SessionCache::run(const OnnxModel& model, std::vector<OrtTensorData>& inputs,
                              const std::string& output, const std::vector<std::int64_t>& shape,
                              std::vector<float>& out) {
  std::shared_ptr<Session> session;
  if (std::string e = session_for(serialize(model), session); !e.empty()) return e;
  const Runtime& r = runtime();
  const OrtApi& api = *r.ort->api;
  std::vector<std::unique_ptr<Value>> values;
  std::vector<const OrtValue*> handles;
  std::vector<const char*> names;
  for (OrtTensorData& t : inputs) {
    values.push_back(std::unique_ptr<Value>(new Value{api, nullptr}));
    std::string e = take_status(
        api, api.CreateTensorWithDataAsOrtValue(r.memory, t.bytes.data(), t.bytes.size(),
                                                t.shape.data(), t.shape.size(), t.type,
                                                &values.back()->value));
    if (!e.empty()) return "ONNX Runtime refused input " + t.name + ": " + e;
    handles.push_back(values.back()->value);
    names.push_back(t.name.c_str());
  }
  Value result{api, nullptr};
  const char* output_name = output.c_str();
  if (std::string e = take_status(api, api.Run(session->session, nullptr, names.data(),
                                               handles.data(), handles.size(), &output_name, 1,
                                               &result.value));
      !e.empty()) {
    return "ONNX Runtime: " + e;
  }
  OrtTensorTypeAndShapeInfo* info = nullptr;
  std::string e = take_status(api, api.GetTensorTypeAndShape(result.value, &info));
  std::size_t rank = 0;
  int type = 0;
  std::vector<std::int64_t> dims;
  if (e.empty()) e = take_status(api, api.GetDimensionsCount(info, &rank));
  if (e.empty()) e = take_status(api, api.GetTensorElementType(info, &type));
  if (e.empty()) {
    dims.resize(rank);
    e = take_status(api, api.GetDimensions(info, dims.data(), rank));
  }
  if (info) api.ReleaseTensorTypeAndShapeInfo(info);
  if (!e.empty()) return "ONNX Runtime: reading output " + output + ": " + e;
  if (type != kOnnxFloat || dims != shape) {
    return "ONNX Runtime returned output " + output + " of another type or shape than the model's";
  }
  void* data = nullptr;
  if (e = take_status(api, api.GetTensorMutableData(result.value, &data)); !e.empty()) {
    return "ONNX Runtime: reading output " + output + ": " + e;
  }
  std::size_t n = 1;
  for (std::int64_t d : dims) n *= static_cast<std::size_t>(d);
  out.assign(static_cast<const float*>(data), static_cast<const float*>(data) + n);
  return "";
}

}  // namespace attncheck::impls::ort
