#include "impls/onnxruntime/ort_api.h"

#include <dlfcn.h>

#include <cstring>

namespace attncheck::impls::ort {
namespace {

// A status the library itself made must come back through slots 1 and 2
// with the code and message it was made with: a table shifted by a slot
// would return something else or the wrong type. Anchors slots 0-2 and 93.
bool status_round_trips(const OrtApi& api) {
  const char* probe = "attncheck: probe status";
  OrtStatus* status = api.CreateStatus(kOrtInvalidArgument, probe);
  if (status == nullptr) return false;
  bool same = api.GetErrorCode(status) == kOrtInvalidArgument &&
              std::strcmp(api.GetErrorMessage(status), probe) == 0;
  api.ReleaseStatus(status);
  return same;
}

// Every build lists the CPU provider: anchors slots 125 and 126, the
// neighbours of the last slot declared (AddSessionConfigEntry, 130).
bool lists_cpu_provider(const OrtApi& api) {
  char** names = nullptr;
  int count = 0;
  if (OrtStatus* status = api.GetAvailableProviders(&names, &count)) {
    api.ReleaseStatus(status);
    return false;
  }
  bool found = false;
  for (int i = 0; i < count; ++i)
    found = found || std::strcmp(names[i], "CPUExecutionProvider") == 0;
  if (OrtStatus* status = api.ReleaseAvailableProviders(names, count)) api.ReleaseStatus(status);
  return found;
}

}  // namespace

std::string take_status(const OrtApi& api, OrtStatus* status) {
  if (status == nullptr) return "";
  std::string message = api.GetErrorMessage(status);
  api.ReleaseStatus(status);
  return message.empty() ? "error without a message" : message;
}

std::unique_ptr<OrtRuntime> load_onnxruntime(const std::string& path, std::string& error) {
  // RTLD_LOCAL: ONNX Runtime bundles its own protobuf and abseil, which must
  // not bind against another copy a plugin or LibTorch brought in.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    error = "cannot load ONNX Runtime " + path + ": " + dlerror();
    return nullptr;
  }
  using GetApiBase = const OrtApiBase* (*)() noexcept;
  auto get_base = reinterpret_cast<GetApiBase>(dlsym(handle, "OrtGetApiBase"));
  const OrtApiBase* base = get_base ? get_base() : nullptr;
  if (base == nullptr) {
    error = path + " has no OrtGetApiBase: not an ONNX Runtime library";
    return nullptr;
  }
  auto runtime = std::make_unique<OrtRuntime>();
  runtime->path = path;
  const char* version = base->GetVersionString();
  runtime->version = version ? version : "";
  if (runtime->version.rfind(kOrtVersionPrefix, 0) != 0) {
    error = path + " is ONNX Runtime " + runtime->version +
            "; the adapters declare the C API and the kernels of " + kOrtVersionPrefix + "x";
    return nullptr;
  }
  runtime->api = base->GetApi(kOrtApiVersion);
  if (runtime->api == nullptr) {
    error = path + " (ONNX Runtime " + runtime->version + ") does not serve API version " +
            std::to_string(kOrtApiVersion);
    return nullptr;
  }
  if (!status_round_trips(*runtime->api) || !lists_cpu_provider(*runtime->api)) {
    error = path + " (ONNX Runtime " + runtime->version +
            "): the API table does not answer as impls/onnxruntime/ort_api.h lays it out";
    return nullptr;
  }
  return runtime;
}

}  // namespace attncheck::impls::ort
