// The self-test module: device queries plus the LSTM, CudnnRNN, LayerNorm LSTM and LayerNorm
// GRU / SimpleRNN engine bindings.
#include <cuda_runtime_api.h>

#include "tools/gpu_selftest/bindings.h"

namespace py = pybind11;
using namespace tf_lstm_ops::gpu;  // NOLINT

namespace tf_lstm_ops::gpu::selftest {
void RegisterLayerNormRnn(pybind11::module_& m);  // layer_norm_rnn_bindings.cu.cc
}  // namespace tf_lstm_ops::gpu::selftest

PYBIND11_MODULE(_rnn_gpu_selftest, m) {
  m.doc() = "tf_lstm_ops GPU engines without TensorFlow (self-test)";
  m.def("cuda_device_count", [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
  });
  m.def("runtime_version", [] { return CUDART_VERSION; });
  m.def("driver_version", [] {
    int version = 0;
    cudaDriverGetVersion(&version);
    return version;
  });
  m.def("initialize", [] { selftest::Check(Initialize(), "Initialize"); },
        "driver check and cuBLAS loading (what every launcher does first)");
  selftest::RegisterLstm(m);
  selftest::RegisterRnn(m);
  selftest::RegisterLayerNormLstm(m);
  selftest::RegisterLayerNormRnn(m);
}
