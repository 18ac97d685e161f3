// OpKernels of the LayerNorm GRU / SimpleRNN (docs/layer_norm_rnn.md §3): validate every input
// (ranks first, then sizes; docs/validation.md §10), allocate the outputs, run the functors
// (functor.h) on the op's device, as the LayerNorm LSTM's kernels (cc/tf/layer_norm_lstm/
// kernels.cc). sequence_lengths is host memory on every device: the kernel reads it to check and
// hash the run.
#define EIGEN_USE_THREADS

#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/layer_norm_rnn_types.h"
#include "cc/core/precision.h"
#include "cc/tf/device.h"
#include "cc/tf/layer_norm_rnn/functor.h"
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

struct LayerNormRnnAttrs {
  LayerNormCell cell = LayerNormCell::kGru;
  RnnActivation activation = RnnActivation::kTanh;
  RnnActivation recurrent_activation = RnnActivation::kSigmoid;
  float epsilon = 0;
  bool time_major = false;

  absl::Status Read(OpKernelConstruction* ctx) {
    std::string cell_name, act, rec;
    TF_RETURN_IF_ERROR(ctx->GetAttr("cell", &cell_name));
    LayerNormCellNamed(cell_name, &cell);  // (the op def allows only the two names)
    TF_RETURN_IF_ERROR(ctx->GetAttr("activation", &act));
    TF_RETURN_IF_ERROR(ctx->GetAttr("recurrent_activation", &rec));
    const std::string known = absl::StrJoin(kRnnActivationNames, ", ");
    if (!RnnActivationNamed(act, &activation)) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation must be one of ", known, " but is '", act, "'"));
    }
    if (!RnnActivationNamed(rec, &recurrent_activation)) {
      return absl::InvalidArgumentError(
          absl::StrCat("recurrent_activation must be one of ", known, " but is '", rec, "'"));
    }
    if (cell == LayerNormCell::kSimpleRnn && recurrent_activation != RnnActivation::kSigmoid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recurrent_activation is for cell 'gru' only (its gates; leave the default 'sigmoid' "
          "for 'simple_rnn'), got '", rec, "'"));
    }
    TF_RETURN_IF_ERROR(ctx->GetAttr("epsilon", &epsilon));
    if (!(epsilon > 0) || !std::isfinite(epsilon)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "epsilon must be a positive finite number (it keeps 1/sqrt(variance + epsilon) "
          "finite on a constant row) but is ", epsilon));
    }
    return ctx->GetAttr("time_major", &time_major);
  }
};

// The weights, in op-def order (the forward's inputs 2-6, the Grad op's outputs 2-6).
constexpr const char* kWeightNames[] = {"kernel", "recurrent_kernel", "bias", "gamma_x",
                                        "gamma_h"};

// Every input of the forward (as the Grad op repeats them) into m and run, rank first.
absl::Status ResolveLayerNormRnn(OpKernelContext* ctx, const LayerNormRnnAttrs& attrs,
                                 LayerNormRnnModel* m, LayerNormRnnRun* run) {
  const bool gru = attrs.cell == LayerNormCell::kGru;
  const Tensor& input = NamedInput(ctx, "input");
  const Tensor& input_h = NamedInput(ctx, "input_h");
  const Tensor& lengths = NamedInput(ctx, "sequence_lengths");
  const struct {
    const char* name;
    int rank;
  } ranks[] = {{"input", 3},   {"input_h", 2},          {"kernel", 2},
               {"recurrent_kernel", 2}, {"bias", gru ? 2 : 1}, {"gamma_x", 1},
               {"gamma_h", 1}, {"sequence_lengths", 1}};
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
  *m = LayerNormRnnModel{I, H, attrs.cell, attrs.activation, attrs.recurrent_activation,
                         attrs.epsilon};
  int64_t G = 0;
  TF_RETURN_IF_ERROR(CheckedProduct({H, m->gates()}, "the gate width gates * num_units", &G));
  const NamedDim batch{B, "batch_size"}, units{H, "num_units"};
  const NamedDim gates{G, gru ? "3 * num_units" : "num_units"}, inputs{I, "input_size"};
  TF_RETURN_IF_ERROR(CheckShape(input_h, "input_h", {batch, units}));
  TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "kernel"), "kernel", {inputs, gates}));
  TF_RETURN_IF_ERROR(
      CheckShape(NamedInput(ctx, "recurrent_kernel"), "recurrent_kernel", {units, gates}));
  if (gru) {  // Keras' reset_after bias: b_x, b_h
    TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "bias"), "bias", {{2, "2"}, gates}));
    TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "gamma_h"), "gamma_h", {gates}));
  } else {
    TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "bias"), "bias", {gates}));
    const Tensor& gamma_h = NamedInput(ctx, "gamma_h");
    if (gamma_h.dim_size(0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gamma_h is for cell 'gru' only (the SimpleRNN's one norm, of x·W + h·R, scales "
          "with gamma_x): pass the empty vector [0], not shape ",
          gamma_h.shape().DebugString()));
    }
  }
  TF_RETURN_IF_ERROR(CheckShape(NamedInput(ctx, "gamma_x"), "gamma_x", {gates}));
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
  TF_RETURN_IF_ERROR(ResolveZoneoutWeights(NamedInput(ctx, "zoneout_weights"), "zoneout_weights",
                                           run->time, B, run->time_major, H, &run->zoneout_h));
  int64_t unused;
  TF_RETURN_IF_ERROR(CheckedProduct({run->time, B, std::max(4 * H, std::max(G, I))},
                                    "the activations' size (max_time * batch_size * width)",
                                    &unused));
  LayerNormRnnRun training = *run;
  training.training = true;
  if (LayerNormRnnWorkspaceBytes(*m, training, 8) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the activations of this run (input ", input.shape().DebugString(), ", num_units ", H,
        ") overflow int64 bytes"));
  }
  return absl::OkStatus();
}

template <typename T>
LayerNormRnnWeights<T> WeightsOf(OpKernelContext* ctx, const LayerNormRnnModel& m) {
  auto data = [ctx](const char* name) { return NamedInput(ctx, name).flat<T>().data(); };
  return {data("kernel"), data("recurrent_kernel"), data("bias"), data("gamma_x"),
          m.gru() ? data("gamma_h") : nullptr};
}

template <typename Device, typename T>
class LayerNormRnnOp : public OpKernel {
 public:
  explicit LayerNormRnnOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("is_training", &is_training_));
  }

  void Compute(OpKernelContext* ctx) override {
    LayerNormRnnModel m;
    LayerNormRnnRun run{};
    OP_REQUIRES_OK(ctx, ResolveLayerNormRnn(ctx, attrs_, &m, &run));
    run.training = is_training_;
    const Tensor& input = NamedInput(ctx, "input");
    const Tensor& input_h = NamedInput(ctx, "input_h");
    Tensor *output, *output_h;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({input.dim_size(0), input.dim_size(1), m.num_units}),
                            &output));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, input_h.shape(), &output_h));
    const int64_t bytes = LayerNormRnnWorkspaceBytes(m, run, sizeof(AccFor<T>));
    Tensor scratch;  // (inference: the workspace; training writes the reserve space output)
    uint8_t* workspace;
    OP_REQUIRES_OK(ctx, ReserveOrScratch<T>(ctx, 2, bytes, is_training_, &scratch, &workspace));
    auto data = [ctx](const char* name) { return NamedInput(ctx, name).flat<T>().data(); };
    OP_REQUIRES_OK(ctx, LayerNormRnnForward<Device, T>()(
                            ctx, m, run, data("input"), data("input_h"), WeightsOf<T>(ctx, m),
                            output->flat<T>().data(), output_h->flat<T>().data(), workspace));
  }

 private:
  LayerNormRnnAttrs attrs_;
  bool is_training_ = true;
};

template <typename Device, typename T>
class LayerNormRnnGradOp : public OpKernel {
 public:
  explicit LayerNormRnnGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    LayerNormRnnModel m;
    LayerNormRnnRun run{};
    OP_REQUIRES_OK(ctx, ResolveLayerNormRnn(ctx, attrs_, &m, &run));
    run.training = true;
    const Tensor& input = NamedInput(ctx, "input");
    const Tensor& input_h = NamedInput(ctx, "input_h");
    const TensorShape output_shape({input.dim_size(0), input.dim_size(1), m.num_units});
    OP_REQUIRES_OK(ctx, CheckGradShape(NamedInput(ctx, "output_backprop"), "output_backprop",
                                       output_shape, "the forward output's shape"));
    OP_REQUIRES_OK(ctx, CheckGradShape(NamedInput(ctx, "output_h_backprop"), "output_h_backprop",
                                       input_h.shape(), "the shape of input_h"));
    // The reserve space must come from our training forward with exactly this configuration.
    const Tensor& reserve = NamedInput(ctx, "reserve_space");
    const RnnReserveHeader expected = LayerNormRnnHeader(m, run, sizeof(T), sizeof(AccFor<T>));
    OP_REQUIRES(ctx, (ReserveCheck<Device, T>::Matches(reserve, expected)),
                absl::InvalidArgumentError(absl::StrCat(
                    "reserve_space ", reserve.shape().DebugString(),
                    " was not produced by a training-mode (is_training=true) LayerNormRNN "
                    "forward pass of this model with these inputs' shapes, sequence_lengths, "
                    "recurrent_mask, zoneout weights, cell, activations, epsilon and dtype")));

    Tensor* out[7];
    const char* like[] = {"input", "input_h"};
    for (int k = 0; k < 7; ++k) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(
                              k, NamedInput(ctx, k < 2 ? like[k] : kWeightNames[k - 2]).shape(),
                              &out[k]));
    }
    auto data = [ctx](const char* name) { return NamedInput(ctx, name).flat<T>().data(); };
    auto grad = [&](int k) { return out[k]->flat<T>().data(); };
    const LayerNormRnnWeightGrads<T> grads{grad(2), grad(3), grad(4), grad(5), grad(6)};
    OP_REQUIRES_OK(ctx, LayerNormRnnBackward<Device, T>()(
                            ctx, m, run, expected, data("input"), data("input_h"),
                            WeightsOf<T>(ctx, m), data("output_backprop"),
                            data("output_h_backprop"),
                            reinterpret_cast<const uint8_t*>(reserve.flat<T>().data()), grad(0),
                            grad(1), grads));
  }

 private:
  LayerNormRnnAttrs attrs_;
};

// One registration per device; HOST(arg) marks what the GPU kernels keep in host memory.
#define TF_LSTM_OPS_REGISTER(DEVICE, DEVICE_TYPE, HOST, T)                                      \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>LayerNormRNN")                                          \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths"),                \
                          LayerNormRnnOp<DEVICE, T>);                                          \
  REGISTER_KERNEL_BUILDER(Name("TfLstm>LayerNormRNNGrad")                                      \
                              .Device(DEVICE_TYPE)                                             \
                              .TypeConstraint<T>("T") HOST("sequence_lengths"),                \
                          LayerNormRnnGradOp<DEVICE, T>);
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
