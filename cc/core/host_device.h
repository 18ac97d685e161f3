// TF_LSTM_HOST_DEVICE marks the framework-free math and layout helpers that CPU kernels, CUDA
// kernels and the GPU self-test share: __host__ __device__ under nvcc, nothing otherwise.
#ifndef TF_LSTM_OPS_CC_CORE_HOST_DEVICE_H_
#define TF_LSTM_OPS_CC_CORE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define TF_LSTM_HOST_DEVICE __host__ __device__
#else
#define TF_LSTM_HOST_DEVICE
#endif

#endif  // TF_LSTM_OPS_CC_CORE_HOST_DEVICE_H_
