// OpKernels of the LayerNorm LSTM (docs/layer_norm_lstm.md §3): validate every input (ranks
// first, then sizes; docs/validation.md §9), allocate the outputs, run the functors (functor.h):
// the CPU engine on the op's intra-op pool, or with CUDA the GPU engine on the op's stream
// (docs/layer_norm_lstm.md §5). The kernels are device-generic: validation is shared, and what
// differs per device (how much of the reserve header the kernel can check) is ReserveCheck's
// (cc/tf/validation.h); the functors write the header themselves. sequence_lengths is host
// memory on every device: the kernel reads it to check and hash the run.
#define EIGEN_USE_THREADS

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/core/layer_norm_lstm_types.h"
#include "cc/core/precision.h"
#include "cc/tf/device.h"
#include "cc/tf/layer_norm_lstm/functor.h"
#include "cc/tf/validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_lstm_ops {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

struct LayerNormLstmAttrs {
  LayerNormPreset preset = LayerNormPreset::kAddons;
  float epsilon = 0;
  bool time_major = false;

  absl::Status Read(OpKernelConstruction* ctx) {
    std::string norm;
    TF_RETURN_IF_ERROR(ctx->GetAttr("norm", &norm));
    LayerNormPresetNamed(norm, &preset);  // (the op def allows only the two names)
    TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &epsilon));
    if (!(epsilon > 0) || !std::isfinite(epsilon)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "epsilon must be a positive finite number (it keeps 1/sqrt(variance + epsilon) "
          "finite on a constant row) but is ", epsilon));
    }
    return ctx->GetAttr("time_major", &time_major);
  }
};

// The forward's inputs, in op-def order (the Grad op's first 16 too).
constexpr const char* kWeightNames[] = {"kernel", "recurrent_kernel", "bias",
                                        "gamma_x", "beta_x", "gamma_h",
                                        "beta_h", "gamma_c", "beta_c"};

// Every input of the forward (as the Grad op repeats them) into m and run, rank first.
absl::Status ResolveLayerNormLstm(OpKernelContext* ctx, const LayerNormLstmAttrs& attrs,
                                  LayerNormLstmModel* m, LayerNormLstmRun* run) {
  const Tensor& input = NamedInput(ctx, "input");
  const Tensor& input_h = NamedInput(ctx, "input_h");
  const Tensor& lengths = NamedInput(ctx, "sequence_lengths");
  const struct {
    const char* name;
    int rank;
  } ranks[] = {{"input", 3},  {"input_h", 2}, {"input_c", 2}, {"kernel", 2},
               {"recurrent_kernel", 2}, {"bias", 1}, {"gamma_x", 1}, {"beta_x", 1},
               {"gamma_h", 1}, {"beta_h", 1}, {"gamma_c", 1}, {"beta_c", 1},
               {"sequence_lengths", 1}};
  for (const auto& r : ranks) {
    const Tensor& t = NamedInput(ctx, r.name);
    if (t.dims() != r.rank) {
      return absl::InvalidArgumentError(absl::StrCat(r.name, " must be rank ", r.rank,
                                                     " but is rank ", t.dims(), " (shape ",
                                                     t.shape().DebugString(), ")"));
    }
  }
  run->time_major = attrs.time_major;
  run->time = input.dim_size(attrs.time_major ? 0 : 1);
  run->batch = input.dim_size(attrs.time_major ? 1 : 0);
  const int64_t B = run->batch, I = input.dim_size(2), H = input_h.dim_size(1);
  int64_t G;
  TF_RETURN_IF_ERROR(CheckedProduct({H, 4}, "the gate width 4 * num_units", &G));
  *m = LayerNormLstmModel{I, H, attrs.preset, attrs.epsilon};
  const NamedDim batch{B, "batch_size"}, units{H, "num_units"}, gates{G, "4 * num_units"};
  const NamedDim inputs{I, "input_size"};
  TF_RETURN_IF_ERROR(CheckShape(input_h, "input_h", {batch, units}));
  TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "input_c"), "input_c", {batch, units}));
  TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "kernel"), "kernel", {inputs, gates}));
  TF_RETURN_IF_ERROR(
      CheckShape(NamedInput(ctx, "recurrent_kernel"), "recurrent_kernel", {units, gates}));
  for (const char* name : {"bias", "gamma_x", "beta_x", "gamma_h", "beta_h"}) {
    TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, name), name, {gates}));
  }
  for (const char* name : {"gamma_c", "beta_c"}) {
    TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, name), name, {units}));
  }
  TF_RETURN_IF_ERROR(CheckShape(lengths, "sequence_lengths", {batch}));
  const auto values = lengths.flat<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    if (values(b) < 0 || values(b) > run->time) {
      return absl::InvalidArgumentError(absl::StrCat("sequence_lengths[", b,
                                                     "] must be in [0, max_time = ", run->time,
                                                     "] but is ", values(b)));
    }
  }
  run->seq_lengths = values.data();
  const Tensor& mask = NamedInput(ctx, "recurrent_mask");
  if (!(mask.dims() == 1 && mask.dim_size(0) == 0)) {  // [0]: no recurrent dropout
    if (mask.dims() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recurrent_mask must be rank 2 ([batch_size, num_units]) or the empty vector [0] "
          "(none) but is rank ", mask.dims(), " (shape ", mask.shape().DebugString(), ")"));
    }
    TF_RETURN_IF_ERROR(CheckShape(mask, "recurrent_mask", {batch, units}));
    run->recurrent_mask = mask.tensor_data().data();
  }
  TF_RETURN_IF_ERROR(ResolveZoneoutWeights(NamedInput(ctx, "zoneout_h_weights"),
                                           "zoneout_h_weights", run->time, B, run->time_major, H,
                                           &run->zoneout_h));
  TF_RETURN_IF_ERROR(ResolveZoneoutWeights(NamedInput(ctx, "zoneout_c_weights"),
                                           "zoneout_c_weights", run->time, B, run->time_major, H,
                                           &run->zoneout_c));
  int64_t unused;
  TF_RETURN_IF_ERROR(CheckedProduct({run->time, B, std::max(G, I)},
                                    "the activations' size (max_time * batch_size * width)",
                                    &unused));
  LayerNormLstmRun training = *run;
  training.training = true;
  if (LayerNormLstmWorkspaceBytes(*m, training, 8) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the activations of this run (input ", input.shape().DebugString(), ", num_units ", H,
        ") overflow int64 bytes"));
  }
  return absl::OkStatus();
}

template <typename T>
LayerNormLstmWeights<T> WeightsOf(OpKernelContext* ctx) {
  const T* w[9];
  for (int k = 0; k < 9; ++k) w[k] = NamedInput(ctx, kWeightNames[k]).flat<T>().data();
  return {w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]};
}

template <typename Device, typename T>
class LayerNormLstmOp : public OpKernel {
 public:
  explicit LayerNormLstmOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("is_training", &is_training_));
  }

  void Compute(OpKernelContext* ctx) override {
    LayerNormLstmModel m;
    LayerNormLstmRun run{};
    OP_REQUIRES_OK(ctx, ResolveLayerNormLstm(ctx, attrs_, &m, &run));
    run.training = is_training_;
    const Tensor& input = NamedInput(ctx, "input");
    const Tensor& input_h = NamedInput(ctx, "input_h");
    Tensor *output, *output_h, *output_c;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({input.dim_size(0), input.dim_size(1), m.num_units}),
                            &output));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, input_h.shape(), &output_h));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, input_h.shape(), &output_c));
    const int64_t bytes = LayerNormLstmWorkspaceBytes(m, run, sizeof(AccFor<T>));
    Tensor scratch;  // (inference: the workspace; training writes the reserve space output)
    uint8_t* workspace;
    OP_REQUIRES_OK(ctx, ReserveOrScratch<T>(ctx, 3, bytes, is_training_, &scratch, &workspace));
    auto data = [ctx](const char* name) { return NamedInput(ctx, name).flat<T>().data(); };
    OP_REQUIRES_OK(ctx, LayerNormLstmForward<Device, T>()(
                            ctx, m, run, data("input"), data("input_h"), data("input_c"),
                            WeightsOf<T>(ctx), output->flat<T>().data(),
                            output_h->flat<T>().data(), output_c->flat<T>().data(), workspace));
  }

 private:
  LayerNormLstmAttrs attrs_;
  bool is_training_ = true;
};

template <typename Device, typename T>
class LayerNormLstmGradOp : public OpKernel {
 public:
  explicit LayerNormLstmGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    LayerNormLstmModel m;
    LayerNormLstmRun run{};
    OP_REQUIRES_OK(ctx, ResolveLayerNormLstm(ctx, attrs_, &m, &run));
    run.training = true;
    const Tensor& input = NamedInput(ctx, "input");
    const Tensor& input_h = NamedInput(ctx, "input_h");
    const TensorShape output_shape({input.dim_size(0), input.dim_size(1), m.num_units});
    OP_REQUIRES_OK(ctx, CheckGradShape(NamedInput(ctx, "output_backprop"), "output_backprop",
                                       output_shape, "the forward output's shape"));
    for (const char* name : {"output_h_backprop", "output_c_backprop"}) {
      OP_REQUIRES_OK(ctx, CheckGradShape(NamedInput(ctx, name), name, input_h.shape(),
                                         "the shape of input_h"));
    }
    // The reserve space must come from our training forward with exactly this configuration.
    const Tensor& reserve = NamedInput(ctx, "reserve_space");
    const RnnReserveHeader expected = LayerNormLstmHeader(m, run, sizeof(T), sizeof(AccFor<T>));
    OP_REQUIRES(ctx, (ReserveCheck<Device, T>::Matches(reserve, expected)),
                absl::InvalidArgumentError(absl::StrCat(
                    "reserve_space ", reserve.shape().DebugString(),
                    " was not produced by a training-mode (is_training=true) LayerNormLSTM "
                    "forward pass of this model with these inputs' shapes, sequence_lengths, "
                    "recurrent_mask, zoneout weights, norm, epsilon and dtype")));

    Tensor* out[12];
    const char* like[] = {"input", "input_h", "input_c"};
    for (int k = 0; k < 12; ++k) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(
                              k, NamedInput(ctx, k < 3 ? like[k] : kWeightNames[k - 3]).shape(),
                              &out[k]));
    }
    auto data = [ctx](const char* name) { return NamedInput(ctx, name).flat<T>().data(); };
    auto grad = [&](int k) { return out[k]->flat<T>().data(); };
    const LayerNormLstmWeightGrads<T> grads{grad(3), grad(4),  grad(5),  grad(6), grad(7),
                                            grad(8), grad(9), grad(10), grad(11)};
    OP_REQUIRES_OK(ctx, LayerNormLstmBackward<Device, T>()(
                            ctx, m, run, expected, data("input"), data("input_h"),
                            data("input_c"), WeightsOf<T>(ctx), data("output_backprop"),
                            data("output_h_backprop"), data("output_c_backprop"),
                            reinterpret_cast<const uint8_t*>(reserve.flat<T>().data()), grad(0),
                            grad(1), grad(2), grads));
  }

 private:
  LayerNormLstmAttrs attrs_;
};

// One registration per device; HOST(arg) marks what the GPU kernels keep in host memory.
#define TF_LSTM_OPS_REGISTER(DEVICE, DEVICE_TYPE, HOST, T)                                      \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>LayerNormLSTM")                                         \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths"),                \
                          LayerNormLstmOp<DEVICE, T>);                                         \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>LayerNormLSTMGrad")                                     \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths"),                \
                          LayerNormLstmGradOp<DEVICE, T>);
#define TF_LSTM_CPU_MEMORY(arg)
#define TF_LSTM_HOST_MEMORY(arg) .HostMemory(arg)
#define TF_LSTM_OPS_REGISTER_CPU(T) \
  TF_LSTM_OPS_REGISTER(CPUDevice, tensorflow::DEVICE_CPU, TF_LSTM_CPU_MEMORY, T)
TF_LSTM_OPS_FOR_EACH_TYPE(TF_LSTM_OPS_REGISTER_CPU)
#undef TF_LSTM_OPS_REGISTER_CPU

#ifdef TF_LSTM_OPS_WITH_CUDA
#define TF_LSTM_OPS_REGISTER_GPU(T) \
  TF_LSTM_OPS_REGISTER(GpuDevice, tensorflow::DEVICE_GPU, TF_LSTM_HOST_MEMORY, T)
TF_LSTM_OPS_FOR_EACH_TYPE(TF_LSTM_OPS_REGISTER_GPU)
#undef TF_LSTM_OPS_REGISTER_GPU
#endif  // TF_LSTM_OPS_WITH_CUDA

#undef TF_LSTM_HOST_MEMORY
#undef TF_LSTM_CPU_MEMORY
#undef TF_LSTM_OPS_REGISTER

}  // namespace
}  // namespace tf_lstm_ops
