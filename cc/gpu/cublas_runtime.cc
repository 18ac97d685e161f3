// Driver check (launchers.h's Initialize), cuBLAS loaded with dlopen, and the thread-local error
// detail.
#include "cc/gpu/cublas_runtime.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cc/gpu/common.h"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {

namespace {

thread_local std::string error_detail;

// The slice of cuBLAS's C API we call, declared here so no cuBLAS headers are needed. Values
// from cublas_api.h (stable since CUDA 11).
using BlasHandle = void*;
using BlasStatus = int;  // CUBLAS_STATUS_SUCCESS = 0
constexpr int kOpN = 0, kOpT = 1;
constexpr int kCompute32F = 68, kCompute32FFastTf32 = 77, kCompute64F = 70;
constexpr int kGemmDefault = -1;

struct BlasApi {
  BlasStatus (*create)(BlasHandle*);
  BlasStatus (*set_stream)(BlasHandle, cudaStream_t);
  BlasStatus (*set_workspace)(BlasHandle, void*, size_t);
  BlasStatus (*gemm_ex)(BlasHandle, int, int, int, int, int, const void*, const void*,
                        cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                        cudaDataType, int, int, int);
  const char* (*status_string)(BlasStatus);
  std::string library;  // where it came from, for messages
};

// Tries, in order: $TF_LSTM_OPS_CUBLAS (a path); a libcublas the process already loaded (TF or
// PyTorch did); then the loader's search path.
const BlasApi* LoadBlas(std::string* why) {
  static std::once_flag once;
  static BlasApi api;
  static std::string failure;
  std::call_once(once, [] {
    const char* names[] = {"libcublas.so.12", "libcublas.so.13", "libcublas.so"};
    void* lib = nullptr;
    std::string tried;
    if (const char* path = std::getenv("TF_LSTM_OPS_CUBLAS")) {
      lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      tried = path;
      if (lib) api.library = path;
    } else {
      for (const char* name : names) {
        if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))) {
          api.library = name;
          break;
        }
      }
      for (const char* name : names) {
        if (lib) break;
        tried += (tried.empty() ? "" : ", ") + std::string(name);
        if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) api.library = name;
      }
    }
    if (!lib) {
      failure = "tf_lstm_ops: cuBLAS could not be loaded (tried " + tried +
                "): install it (pip install nvidia-cublas-cu12, which tensorflow[and-cuda] "
                "brings) or set TF_LSTM_OPS_CUBLAS=/path/to/libcublas.so.12";
      return;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p && failure.empty()) failure = std::string("tf_lstm_ops: ") + api.library +
                                           " lacks " + name + " (cuBLAS 11 or newer is needed)";
      return p;
    };
    api.create = reinterpret_cast<decltype(api.create)>(sym("cublasCreate_v2"));
    api.set_stream = reinterpret_cast<decltype(api.set_stream)>(sym("cublasSetStream_v2"));
    api.set_workspace =
        reinterpret_cast<decltype(api.set_workspace)>(sym("cublasSetWorkspace_v2"));
    api.gemm_ex = reinterpret_cast<decltype(api.gemm_ex)>(sym("cublasGemmEx"));
    api.status_string =
        reinterpret_cast<decltype(api.status_string)>(dlsym(lib, "cublasGetStatusString"));
  });
  if (!failure.empty()) {
    *why = failure;
    return nullptr;
  }
  return &api;
}

// One cuBLAS handle per (thread, device): handles must not be shared by threads that set
// different streams at once. Never destroyed (process lifetime; destroying at thread exit can
// race with driver shutdown).
cudaError_t HandleFor(const BlasApi& api, BlasHandle* handle) {
  thread_local std::unordered_map<int, BlasHandle> handles;
  int device;
  const cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  auto it = handles.find(device);
  if (it == handles.end()) {
    BlasHandle h = nullptr;
    const BlasStatus s = api.create(&h);
    if (s != 0) {
      SetErrorDetail(("tf_lstm_ops: cublasCreate failed: " +
                      std::string(api.status_string ? api.status_string(s) : "status ") +
                      std::to_string(s)).c_str());
      return cudaErrorUnknown;
    }
    it = handles.emplace(device, h).first;
  }
  *handle = it->second;
  return cudaSuccess;
}

// Whether float GEMMs may use TF32 tensor cores (TF_LSTM_OPS_ALLOW_TF32=1; default off, so
// float32 results are full fp32 as on the CPU).
bool AllowTf32() {
  static const bool allow = [] {
    const char* v = std::getenv("TF_LSTM_OPS_ALLOW_TF32");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return allow;
}

}  // namespace

const char* ErrorDetail() { return error_detail.c_str(); }
void SetErrorDetail(const char* message) { error_detail = message; }

// Once per process: the driver must support the CUDA runtime this library was built with, and
// cuBLAS must load. cudaSuccess, or an error with ErrorDetail() saying what to do.
cudaError_t Initialize() {
  static cudaError_t status = cudaSuccess;
  static std::string detail;
  static std::once_flag once;
  std::call_once(once, [] {
    int driver = 0;
    cudaError_t s = cudaDriverGetVersion(&driver);
    if (s == cudaSuccess && driver < CUDART_VERSION) {
      char message[512];
      std::snprintf(message, sizeof(message),
                    "tf_lstm_ops was built with the CUDA %d.%d runtime, but the installed NVIDIA "
                    "driver supports CUDA up to %d.%d (0 = no driver): upgrade the driver, or "
                    "rebuild the library with an nvcc that matches the driver (e.g. CUDA 12: "
                    "pip install nvidia-cuda-nvcc-cu12, then ./configure.sh with "
                    "CUDA_HOME pointing at it)",
                    CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, driver / 1000,
                    driver % 1000 / 10);
      status = cudaErrorInsufficientDriver;
      detail = message;
      return;
    }
    if (s != cudaSuccess) {
      status = s;
      detail = std::string("tf_lstm_ops: cudaDriverGetVersion failed: ") + cudaGetErrorString(s);
      return;
    }
    std::string why;
    if (LoadBlas(&why) == nullptr) {
      status = cudaErrorSharedObjectInitFailed;
      detail = why;
    }
  });
  // Every launcher starts here: a detail left by an earlier failure on this thread must not be
  // attached to a later, unrelated error.
  SetErrorDetail(status == cudaSuccess ? "" : detail.c_str());
  return status;
}

cudaError_t BlasGemmEx(cudaStream_t stream, void* workspace, size_t workspace_bytes, bool trans_a,
                       bool trans_b, int m, int n, int k, const void* a, cudaDataType a_type,
                       int lda, const void* b, cudaDataType b_type, int ldb, bool accumulate,
                       void* c, cudaDataType c_type, int ldc) {
  std::string why;
  const BlasApi* api = LoadBlas(&why);
  if (api == nullptr) {
    SetErrorDetail(why.c_str());
    return cudaErrorSharedObjectInitFailed;
  }
  BlasHandle handle;
  TF_LSTM_GPU_RETURN_IF_ERROR(HandleFor(*api, &handle));
  const bool is_double = c_type == CUDA_R_64F;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void* alpha = is_double ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = is_double ? (accumulate ? static_cast<const void*>(&one_d) : &zero_d)
                               : (accumulate ? &one_f : &zero_f);
  const int compute = is_double                                  ? kCompute64F
                      : (a_type == CUDA_R_32F && AllowTf32()) ? kCompute32FFastTf32
                                                                 : kCompute32F;
  BlasStatus s = api->set_stream(handle, stream);
  if (s == 0 && workspace != nullptr) s = api->set_workspace(handle, workspace, workspace_bytes);
  if (s == 0) {
    s = api->gemm_ex(handle, trans_a ? kOpT : kOpN, trans_b ? kOpT : kOpN, m, n, k, alpha, a,
                     a_type, lda, b, b_type, ldb, beta, c, c_type, ldc, compute, kGemmDefault);
  }
  if (s != 0) {
    SetErrorDetail(("tf_lstm_ops: cublasGemmEx failed (" + api->library + "): " +
                    (api->status_string ? std::string(api->status_string(s))
                                        : "status " + std::to_string(s)))
                       .c_str());
    return cudaErrorUnknown;
  }
  return cudaSuccess;
}

}  // namespace gpu
}  // namespace tf_lstm_ops
