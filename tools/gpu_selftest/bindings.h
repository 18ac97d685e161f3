// The pybind11 module of the GPU self-test: the framework-free engines, callable from Python with
// raw pointers (Python ints: NumPy's .ctypes.data for the host backend, torch's .data_ptr() for the
// CUDA backend). backend "cuda" calls the launchers of cc/block_lstm/gpu_launchers.h,
// cc/cudnn_rnn/gpu_launchers.h and cc/layer_norm_lstm/gpu_launchers.h (exactly what the
// TensorFlow kernels call) on the given stream;
// backend "host" runs the same engines with HostBackend on the CPU.
#ifndef TF_LSTM_OPS_TOOLS_GPU_SELFTEST_BINDINGS_H_
#define TF_LSTM_OPS_TOOLS_GPU_SELFTEST_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/core/cudnn_rnn_types.h"
#include "cc/gpu/launchers.h"

namespace tf_lstm_ops {
namespace gpu {
namespace selftest {

// Pointers and streams arrive as Python ints.
template <typename P>
P* Ptr(uintptr_t address) {
  return reinterpret_cast<P*>(address);
}
inline cudaStream_t Stream(uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

// "host" or "cuda"; anything else is a ValueError.
inline bool IsCuda(const std::string& backend) {
  if (backend == "cuda") return true;
  if (backend == "host") return false;
  throw pybind11::value_error("backend must be 'host' or 'cuda', not '" + backend + "'");
}

// Raises RuntimeError for a failed call, with the CUDA error and the launcher's detail.
inline void Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::string message = std::string(what) + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")";
  const std::string detail = ErrorDetail();
  if (!detail.empty()) message += ": " + detail;
  throw std::runtime_error(message);
}

// A run's zoneout weights at `keep` (0: none), per element or one value; per_element only where
// zoned, as the OpKernels set it (the reserve header hashes it).
inline RnnZoneout ZoneoutAt(uintptr_t keep, bool per_element) {
  return RnnZoneout{Ptr<const void>(keep), keep != 0 && per_element};
}

// A run's lengths checked and kept in *kept (B of them in [0, time]); their data, or nullptr for
// None (every length is time).
inline const int32_t* CheckedLengths(const std::optional<std::vector<int32_t>>& lengths,
                                     int64_t batch, int64_t time, std::vector<int32_t>* kept) {
  if (!lengths) return nullptr;
  *kept = *lengths;
  if (static_cast<int64_t>(kept->size()) != batch) {
    throw pybind11::value_error("lengths must have batch entries");
  }
  for (int32_t v : *kept) {
    if (v < 0 || v > time) throw pybind11::value_error("lengths must be in [0, time]");
  }
  return kept->data();
}

// Calls fn(T{}) with the storage type named by dtype ("half", "bfloat16", "float32",
// "float64").
template <typename Fn>
auto WithDtype(const std::string& dtype, Fn fn) {
  if (dtype == "half") return fn(__half{});
  if (dtype == "bfloat16") return fn(__nv_bfloat16{});
  if (dtype == "float32") return fn(float{});
  if (dtype == "float64") return fn(double{});
  throw pybind11::value_error("dtype must be half, bfloat16, float32 or float64, not " + dtype);
}

void RegisterLstm(pybind11::module_& m);  // block_lstm_bindings.cu.cc
void RegisterRnn(pybind11::module_& m);   // cudnn_rnn_bindings.cu.cc
void RegisterLayerNormLstm(pybind11::module_& m);  // layer_norm_lstm_bindings.cu.cc

}  // namespace selftest
}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_TOOLS_GPU_SELFTEST_BINDINGS_H_
