// The pybind11 module of the GPU self-test: the framework-free engines, callable from Python with
// raw pointers (Python ints: NumPy's .ctypes.data for the host backend, torch's .data_ptr() for the
// CUDA backend). backend "cuda" calls the launchers of cc/block_lstm/gpu_launchers.h and
// cc/cudnn_rnn/gpu_launchers.h (exactly what the TensorFlow kernels call) on the given stream;
// backend "host" runs the same engines with HostBackend on the CPU.
#ifndef TF_LSTM_OPS_TOOLS_GPU_SELFTEST_BINDINGS_H_
#define TF_LSTM_OPS_TOOLS_GPU_SELFTEST_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

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

}  // namespace selftest
}  // namespace gpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_TOOLS_GPU_SELFTEST_BINDINGS_H_
