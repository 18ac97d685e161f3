// The device of the CPU runtime and engines: Eigen's ThreadPoolDevice, the caller's intra-op pool
// (TensorFlow hands its own; tests/framework_free/engine_driver.cc makes one).
#ifndef TF_LSTM_OPS_CC_CPU_DEVICE_H_
#define TF_LSTM_OPS_CC_CPU_DEVICE_H_

#ifndef EIGEN_USE_THREADS
#define EIGEN_USE_THREADS  // Eigen::ThreadPoolDevice
#endif

#include "unsupported/Eigen/CXX11/Tensor"

namespace tf_lstm_ops {
namespace cpu {

using CPUDevice = Eigen::ThreadPoolDevice;

}  // namespace cpu
}  // namespace tf_lstm_ops

#endif  // TF_LSTM_OPS_CC_CPU_DEVICE_H_
