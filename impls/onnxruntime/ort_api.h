#pragma once
// ONNX Runtime's C API, as much of it as the ONNX Runtime adapters call,
// declared here because the library ships without a header
// (ci/fetch-onnxruntime). OrtApi is a table of function pointers reached
// through OrtGetApiBase()->GetApi(N); ONNX Runtime only appends to it, so a
// table that stops after the last entry we call is the real one's prefix.
// Its layout is an interface fact copied from
// include/onnxruntime/core/session/onnxruntime_c_api.h: every entry, an
// ORT_API2_STATUS or an ORT_CLASS_RELEASE alike, is one pointer slot, and the
// slot index of each entry called is written beside it and checked at
// compile time (static_assert on offsetof below) and at load (ort_api.cpp).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace attncheck::impls::ort {

struct OrtEnv;
struct OrtStatus;
struct OrtMemoryInfo;
struct OrtSession;
struct OrtSessionOptions;
struct OrtValue;
struct OrtRunOptions;
struct OrtTensorTypeAndShapeInfo;

/// onnxruntime_c_api.h's ONNXTensorElementDataType, the values onnx.proto's
/// TensorProto.DataType gives them (only those the adapters use).
enum OnnxElementType : int {
  kOnnxFloat = 1,
  kOnnxInt32 = 6,
  kOnnxInt64 = 7,
  kOnnxBool = 9,
  kOnnxFloat16 = 10,
};

/// The OrtErrorCode the load-time probe status carries.
enum OrtErrorCode : int { kOrtInvalidArgument = 2 };

/// OrtLoggingLevel: only errors reach stderr (the smoke test's level), or
/// only fatal ones (the adapters', which report a refused problem through
/// its status and would otherwise print it twice).
enum OrtLoggingLevel : int { kOrtLoggingLevelError = 3, kOrtLoggingLevelFatal = 4 };

/// GraphOptimizationLevel's ORT_ENABLE_ALL, the level a user's session runs at.
enum GraphOptimizationLevel : int { kOrtEnableAll = 99 };

/// OrtAllocatorType and OrtMemType, for CreateCpuMemoryInfo.
enum OrtAllocatorType : int { kOrtArenaAllocator = 1 };
enum OrtMemType : int { kOrtMemTypeDefault = 0 };

/// Every API entry returns null for success or a status to release.
using OrtStatusPtr = OrtStatus*;

/// The API version the table below is requested at: ORT_API_VERSION of the
/// header that ONNX Runtime 1.30 is built from (ORT_API_VERSION follows the
/// minor version since 1.x: 1.22 has 22). GetApi returns null for a version
/// newer than the library's.
inline constexpr std::uint32_t kOrtApiVersion = 30;

/// struct OrtApiBase: two entries, stable across every version.
struct OrtApiBase {
  const struct OrtApi* (*GetApi)(std::uint32_t version) noexcept;
  const char* (*GetVersionString)() noexcept;
};

/// The leading 131 slots of struct OrtApi, in the header's order. Entries
/// we do not call are placeholders of the same size; the comment on each
/// run of placeholders names its first and last entry.
struct OrtApi {
  OrtStatus* (*CreateStatus)(int code, const char* msg) noexcept;    // 0
  int (*GetErrorCode)(const OrtStatus* status) noexcept;             // 1
  const char* (*GetErrorMessage)(const OrtStatus* status) noexcept;  // 2
  OrtStatusPtr (*CreateEnv)(int log_severity_level, const char* logid,
                            OrtEnv** out) noexcept;  // 3
  void* unused_4_7[4];  // 4 CreateEnvWithCustomLogger .. 7 CreateSession
  OrtStatusPtr (*CreateSessionFromArray)(const OrtEnv* env, const void* model_data,
                                         std::size_t model_data_length,
                                         const OrtSessionOptions* options,
                                         OrtSession** out) noexcept;  // 8
  OrtStatusPtr (*Run)(OrtSession* session, const OrtRunOptions* run_options,
                      const char* const* input_names, const OrtValue* const* inputs,
                      std::size_t input_len, const char* const* output_names,
                      std::size_t output_names_len, OrtValue** outputs) noexcept;  // 9
  OrtStatusPtr (*CreateSessionOptions)(OrtSessionOptions** options) noexcept;      // 10
  void* unused_11_16[6];  // 11 SetOptimizedModelFilePath .. 16 EnableMemPattern
  OrtStatusPtr (*DisableMemPattern)(OrtSessionOptions* options) noexcept;  // 17
  void* unused_18_22[5];  // 18 EnableCpuMemArena .. 22 SetSessionLogSeverityLevel
  OrtStatusPtr (*SetSessionGraphOptimizationLevel)(OrtSessionOptions* options,
                                                   int graph_optimization_level) noexcept;  // 23
  OrtStatusPtr (*SetIntraOpNumThreads)(OrtSessionOptions* options,
                                       int intra_op_num_threads) noexcept;  // 24
  OrtStatusPtr (*SetInterOpNumThreads)(OrtSessionOptions* options,
                                       int inter_op_num_threads) noexcept;  // 25
  void* unused_26_48[23];  // 26 CreateCustomOpDomain .. 48 CreateTensorAsOrtValue
  OrtStatusPtr (*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo* info, void* p_data,
                                                 std::size_t p_data_len, const std::int64_t* shape,
                                                 std::size_t shape_len, int type,
                                                 OrtValue** out) noexcept;     // 49
  OrtStatusPtr (*IsTensor)(const OrtValue* value, int* out) noexcept;          // 50
  OrtStatusPtr (*GetTensorMutableData)(OrtValue* value, void** out) noexcept;  // 51
  void* unused_52_59[8];  // 52 FillStringTensor .. 59 SetDimensions
  OrtStatusPtr (*GetTensorElementType)(const OrtTensorTypeAndShapeInfo* info,
                                       int* out) noexcept;  // 60
  OrtStatusPtr (*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo* info,
                                     std::size_t* out) noexcept;  // 61
  OrtStatusPtr (*GetDimensions)(const OrtTensorTypeAndShapeInfo* info, std::int64_t* dim_values,
                                std::size_t dim_values_length) noexcept;  // 62
  void* unused_63_64[2];  // 63 GetSymbolicDimensions .. 64 GetTensorShapeElementCount
  OrtStatusPtr (*GetTensorTypeAndShape)(const OrtValue* value,
                                        OrtTensorTypeAndShapeInfo** out) noexcept;  // 65
  void* unused_66_68[3];  // 66 GetTypeInfo .. 68 CreateMemoryInfo
  OrtStatusPtr (*CreateCpuMemoryInfo)(int type, int mem_type,
                                      OrtMemoryInfo** out) noexcept;  // 69
  void* unused_70_91[22];                      // 70 CompareMemoryInfo .. 91 KernelContext_GetOutput
  void (*ReleaseEnv)(OrtEnv* input) noexcept;  // 92
  void (*ReleaseStatus)(OrtStatus* input) noexcept;          // 93
  void (*ReleaseMemoryInfo)(OrtMemoryInfo* input) noexcept;  // 94
  void (*ReleaseSession)(OrtSession* input) noexcept;        // 95
  void (*ReleaseValue)(OrtValue* input) noexcept;            // 96
  void* unused_97_98[2];  // 97 ReleaseRunOptions .. 98 ReleaseTypeInfo
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo* input) noexcept;  // 99
  void (*ReleaseSessionOptions)(OrtSessionOptions* input) noexcept;                  // 100
  void* unused_101_124[24];  // 101 ReleaseCustomOpDomain .. 124 AddFreeDimensionOverrideByName
  OrtStatusPtr (*GetAvailableProviders)(char*** out_ptr, int* provider_length) noexcept;  // 125
  OrtStatusPtr (*ReleaseAvailableProviders)(char** ptr, int providers_length) noexcept;   // 126
  void* unused_127_129[3];  // 127 GetStringTensorElementLength .. 129 FillStringTensorElement
  OrtStatusPtr (*AddSessionConfigEntry)(OrtSessionOptions* options, const char* config_key,
                                        const char* config_value) noexcept;  // 130
};

/// The slot index of a member of OrtApi, for the checks below.
#define ATTNCHECK_ORT_SLOT(member) (offsetof(OrtApi, member) / sizeof(void*))
static_assert(ATTNCHECK_ORT_SLOT(GetErrorMessage) == 2);
static_assert(ATTNCHECK_ORT_SLOT(CreateEnv) == 3);
static_assert(ATTNCHECK_ORT_SLOT(CreateSessionFromArray) == 8);
static_assert(ATTNCHECK_ORT_SLOT(CreateSessionOptions) == 10);
static_assert(ATTNCHECK_ORT_SLOT(DisableMemPattern) == 17);
static_assert(ATTNCHECK_ORT_SLOT(SetSessionGraphOptimizationLevel) == 23);
static_assert(ATTNCHECK_ORT_SLOT(SetInterOpNumThreads) == 25);
static_assert(ATTNCHECK_ORT_SLOT(CreateTensorWithDataAsOrtValue) == 49);
static_assert(ATTNCHECK_ORT_SLOT(GetTensorMutableData) == 51);
static_assert(ATTNCHECK_ORT_SLOT(GetTensorElementType) == 60);
static_assert(ATTNCHECK_ORT_SLOT(GetDimensions) == 62);
static_assert(ATTNCHECK_ORT_SLOT(GetTensorTypeAndShape) == 65);
static_assert(ATTNCHECK_ORT_SLOT(CreateCpuMemoryInfo) == 69);
static_assert(ATTNCHECK_ORT_SLOT(ReleaseEnv) == 92);
static_assert(ATTNCHECK_ORT_SLOT(ReleaseValue) == 96);
static_assert(ATTNCHECK_ORT_SLOT(ReleaseTensorTypeAndShapeInfo) == 99);
static_assert(ATTNCHECK_ORT_SLOT(ReleaseSessionOptions) == 100);
static_assert(ATTNCHECK_ORT_SLOT(GetAvailableProviders) == 125);
static_assert(ATTNCHECK_ORT_SLOT(AddSessionConfigEntry) == 130);
static_assert(sizeof(OrtApi) == 131 * sizeof(void*));

/// A loaded ONNX Runtime: the library's handle, its API table and version.
/// The library stays loaded for the process's life (dlclose of ONNX
/// Runtime with live thread pools is not safe), so there is no unload.
struct OrtRuntime {
  const OrtApi* api = nullptr;
  std::string version;  ///< GetVersionString(), "1.30.0"
  std::string path;     ///< the library dlopen loaded
};

/// The ONNX Runtime major.minor whose table layout and behaviour the
/// adapters were checked against; another is refused at load.
inline constexpr const char* kOrtVersionPrefix = "1.30.";

/// Loads the library at `path` and its API table, checking the version
/// string and the table's slots (ort_api.cpp says how). On failure returns
/// null and sets `error` to one line naming the library and the reason.
std::unique_ptr<OrtRuntime> load_onnxruntime(const std::string& path, std::string& error);

/// The message of a failed call's status ("" for success), releasing it.
std::string take_status(const OrtApi& api, OrtStatus* status);

}  // namespace attncheck::impls::ort
