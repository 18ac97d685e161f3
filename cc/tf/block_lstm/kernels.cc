// OpKernels of the LSTM block ops: validate every input, allocate outputs, call the functors.
// Device-generic (CPU, and GPU when built with CUDA): the kernels' only own writes into outputs
// go through DeviceMemory<Device>.
#define EIGEN_USE_THREADS

#include "cc/tf/device.h"
#include "cc/tf/block_lstm/functor.h"
#include "cc/tf/block_lstm/validation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/register_types.h"
#include "tensorflow/core/framework/tensor.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace tf_lstm_ops {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

namespace {

constexpr const char* kActivationNames[] = {"i", "cs", "f", "o", "ci", "co", "h"};

// Allocates the named outputs with one shape and returns their data pointers.
template <typename T, size_t N>
absl::Status AllocateOutputs(OpKernelContext* ctx, const char* const (&names)[N], const TensorShape& shape,
                       T* (&data)[N]) {
  for (size_t k = 0; k < N; ++k) {
    Tensor* t;
    TF_RETURN_IF_ERROR(ctx->allocate_output(names[k], shape, &t));
    data[k] = t->flat<T>().data();
  }
  return absl::OkStatus();
}

// Allocates an output shaped like an input; zero-filled when `zero`.
template <typename Device, typename T>
absl::Status AllocateLike(OpKernelContext* ctx, const char* name, const Tensor& like, bool zero,
                    T** data) {
  Tensor* t;
  TF_RETURN_IF_ERROR(ctx->allocate_output(name, like.shape(), &t));
  if (zero) TF_RETURN_IF_ERROR(DeviceMemory<Device>::template SetZero<T>(ctx, t));
  *data = t->flat<T>().data();
  return absl::OkStatus();
}

// The saved activations fed to a gradient op; the cell grad op has no `h` input (never read).
template <typename T>
LstmActivations<const T*> ActivationInputs(OpKernelContext* ctx, bool with_h) {
  auto in = [ctx](const char* name) -> const T* {
    return NamedInput(ctx, name).template flat<T>().data();
  };
  return {in("i"), in("cs"), in("f"), in("o"), in("ci"), in("co"), with_h ? in("h") : nullptr};
}

// Gradients w.r.t. the outputs: cs_grad and h_grad always; i_grad, f_grad, o_grad, ci_grad and
// co_grad only in BlockLSTMFullGrad (nullptr = zero otherwise).
template <typename T>
LstmActivations<const T*> OutputGradInputs(OpKernelContext* ctx, bool with_activation_grads) {
  auto in = [ctx, with_activation_grads](const char* name, bool always) -> const T* {
    if (!always && !with_activation_grads) return nullptr;
    return NamedInput(ctx, name).template flat<T>().data();
  };
  return {in("i_grad", false),  in("cs_grad", true),  in("f_grad", false), in("o_grad", false),
          in("ci_grad", false), in("co_grad", false), in("h_grad", true)};
}

// Attributes, read once in the constructor. V2 has no forget_bias attr (its forget bias is 0);
// the gradient ops only have use_peephole, and BlockLSTMFullGrad names its gate_layout.
absl::Status ReadAttrs(OpKernelConstruction* ctx, GateLayout layout, bool forward, LstmAttrs* attrs) {
  *attrs = LstmAttrs{layout, 0.0f, 0.0f, false};
  if (ctx->HasAttr("gate_layout")) {
    std::string name;
    TF_RETURN_IF_ERROR(ctx->GetAttr("gate_layout", &name));
    attrs->layout = name == "ICFO" ? GateLayout::kICFO : GateLayout::kIFCO;
  }
  if (forward && layout == GateLayout::kICFO) {
    TF_RETURN_IF_ERROR(ctx->GetAttr("forget_bias", &attrs->forget_bias));
  }
  if (forward) TF_RETURN_IF_ERROR(ctx->GetAttr("cell_clip", &attrs->cell_clip));
  return ctx->GetAttr("use_peephole", &attrs->use_peephole);
}

}  // namespace

// LSTMBlockCell: one step, ICFO. Runs the sequence functor with T = 1.
template <typename Device, typename T>
class LSTMBlockCellOp : public OpKernel {
 public:
  explicit LSTMBlockCellOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, GateLayout::kICFO, /*forward=*/true, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    CommonInputs in;
    OP_REQUIRES_OK(ctx, in.Fetch(ctx));
    LstmDims dims;
    OP_REQUIRES_OK(ctx, ValidateCommon(in, /*sequence=*/false, CellSizeFrom::kCsPrev,
                                       attrs_.use_peephole, &dims));
    TensorShape shape;
    OP_REQUIRES_OK(ctx, MakeShape({dims.batch, dims.cell}, &shape));
    T* out[7];
    OP_REQUIRES_OK(ctx, AllocateOutputs(ctx, kActivationNames, shape, out));
    OP_REQUIRES_OK(ctx, LstmForward<Device, T>()(
                            ctx, dims, attrs_, /*seq_len_max=*/1, in.Pointers<T>(),
                            {out[0], out[1], out[2], out[3], out[4], out[5], out[6]}));
  }

 private:
  LstmAttrs attrs_;
};

// LSTMBlockCellGrad: the element-wise backward of one step (dicfo in ICFO).
template <typename Device, typename T>
class LSTMBlockCellGradOp : public OpKernel {
 public:
  explicit LSTMBlockCellGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, GateLayout::kICFO, /*forward=*/false, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    CommonInputs in;
    OP_REQUIRES_OK(ctx, in.Fetch(ctx));
    LstmDims dims;
    OP_REQUIRES_OK(ctx, ValidateCommon(in, /*sequence=*/false, CellSizeFrom::kCsPrev,
                                       attrs_.use_peephole, &dims));
    const NamedDim B{dims.batch, "batch_size"}, H{dims.cell, "cell_size"};
    OP_REQUIRES_OK(ctx, ValidateSameShape(ctx, {"i", "cs", "f", "o", "ci", "co", "cs_grad",
                                                "h_grad"},
                                          {B, H}));
    Tensor* cs_prev_grad;
    Tensor* dicfo;
    OP_REQUIRES_OK(ctx, ctx->allocate_output("cs_prev_grad", in.cs_prev->shape(), &cs_prev_grad));
    TensorShape dicfo_shape;
    OP_REQUIRES_OK(ctx, MakeShape({dims.batch, 4 * dims.cell}, &dicfo_shape));
    OP_REQUIRES_OK(ctx, ctx->allocate_output("dicfo", dicfo_shape, &dicfo));
    T *wci_grad, *wcf_grad, *wco_grad;
    const bool zero = !attrs_.use_peephole;
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "wci_grad", *in.wci, zero, &wci_grad));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "wcf_grad", *in.wcf, zero, &wcf_grad));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "wco_grad", *in.wco, zero, &wco_grad));
    OP_REQUIRES_OK(ctx, LstmCellBackward<Device, T>()(
                            ctx, dims, attrs_, in.Pointers<T>(), ActivationInputs<T>(ctx, false),
                            OutputGradInputs<T>(ctx, false), cs_prev_grad->flat<T>().data(), dicfo->flat<T>().data(), wci_grad,
                            wcf_grad, wco_grad));
  }

 private:
  LstmAttrs attrs_;
};

// BlockLSTM (ICFO, forget_bias attr) and BlockLSTMV2 (IFCO, no forget bias).
template <typename Device, typename T, GateLayout kLayout>
class BlockLSTMOp : public OpKernel {
 public:
  explicit BlockLSTMOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, kLayout, /*forward=*/true, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    CommonInputs in;
    OP_REQUIRES_OK(ctx, in.Fetch(ctx));
    LstmDims dims;
    OP_REQUIRES_OK(ctx, ValidateCommon(in, /*sequence=*/true, CellSizeFrom::kCsPrev,
                                       /*check_peephole_len=*/true, &dims));
    int64_t seq_len_max;
    OP_REQUIRES_OK(ctx, ValidateSeqLenMax(ctx->input(0), dims.time, &seq_len_max));
    TensorShape shape;
    OP_REQUIRES_OK(ctx, MakeShape({dims.time, dims.batch, dims.cell}, &shape));
    T* out[7];
    OP_REQUIRES_OK(ctx, AllocateOutputs(ctx, kActivationNames, shape, out));
    OP_REQUIRES_OK(ctx, LstmForward<Device, T>()(
                            ctx, dims, attrs_, seq_len_max, in.Pointers<T>(),
                            {out[0], out[1], out[2], out[3], out[4], out[5], out[6]}));
  }

 private:
  LstmAttrs attrs_;
};

// BlockLSTMGrad (ICFO), BlockLSTMGradV2 (IFCO), and BlockLSTMFullGrad (our gradient function's
// op: layout from its attr, plus gradients w.r.t. i, f, o, ci, co, which TF's ops cannot take).
template <typename Device, typename T, GateLayout kLayout, bool kFull>
class BlockLSTMGradOp : public OpKernel {
 public:
  explicit BlockLSTMGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, kLayout, /*forward=*/false, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    CommonInputs in;
    LstmDims dims;
    int64_t seq_len_max;
    OP_REQUIRES_OK(ctx, ValidateSequenceGrad(ctx, kFull, &in, &dims, &seq_len_max));
    LstmInputGrads<T> grads;
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "x_grad", *in.x, false, &grads.x));
    OP_REQUIRES_OK(ctx,
                   AllocateLike<Device>(ctx, "cs_prev_grad", *in.cs_prev, false, &grads.cs_prev));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "h_prev_grad", *in.h_prev, false, &grads.h_prev));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "w_grad", *in.w, false, &grads.w));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "wci_grad", *in.wci, false, &grads.wci));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "wcf_grad", *in.wcf, false, &grads.wcf));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "wco_grad", *in.wco, false, &grads.wco));
    OP_REQUIRES_OK(ctx, AllocateLike<Device>(ctx, "b_grad", *in.b, false, &grads.b));
    OP_REQUIRES_OK(ctx, LstmBackward<Device, T>()(ctx, dims, attrs_, seq_len_max,
                                                  in.Pointers<T>(), ActivationInputs<T>(ctx, true),
                                                  OutputGradInputs<T>(ctx, kFull), grads));
  }

 private:
  LstmAttrs attrs_;
};

// BlockLSTMFullGradGrad: the gradient of BlockLSTMFullGrad w.r.t. its 22 float inputs, given the
// gradients d_*_grad w.r.t. its eight outputs, each shaped like that output.
template <typename Device, typename T>
class BlockLSTMFullGradGradOp : public OpKernel {
 public:
  explicit BlockLSTMFullGradGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadAttrs(ctx, GateLayout::kIFCO, /*forward=*/false, &attrs_));
  }

  void Compute(OpKernelContext* ctx) override {
    CommonInputs in;
    LstmDims dims;
    int64_t seq_len_max;
    OP_REQUIRES_OK(ctx, ValidateSequenceGrad(ctx, /*all_output_grads=*/true, &in, &dims,
                                             &seq_len_max));
    // The gradients of BlockLSTMFullGrad's results, each shaped like that result.
    const NamedDim T_{dims.time, "time"}, B{dims.batch, "batch_size"}, H{dims.cell, "cell_size"};
    const NamedDim I{dims.input, "input_size"}, G{4 * dims.cell, "cell_size * 4"};
    const NamedDim rows{dims.input + dims.cell, "input_size + cell_size"};
    OP_REQUIRES_OK(ctx, ValidateSameShape(ctx, {"d_x_grad"}, {T_, B, I}));
    OP_REQUIRES_OK(ctx, ValidateSameShape(ctx, {"d_cs_prev_grad", "d_h_prev_grad"}, {B, H}));
    OP_REQUIRES_OK(ctx, ValidateSameShape(ctx, {"d_w_grad"}, {rows, G}));
    OP_REQUIRES_OK(ctx, ValidateSameShape(ctx, {"d_wci_grad", "d_wcf_grad", "d_wco_grad"}, {H}));
    OP_REQUIRES_OK(ctx, ValidateSameShape(ctx, {"d_b_grad"}, {G}));

    auto input = [ctx](const char* name) {
      return NamedInput(ctx, name).template flat<T>().data();
    };
    const LstmInputGrads<const T> cot{input("d_x_grad"),   input("d_cs_prev_grad"),
                                      input("d_h_prev_grad"), input("d_w_grad"),
                                      input("d_wci_grad"), input("d_wcf_grad"),
                                      input("d_wco_grad"), input("d_b_grad")};
    // Output k is the gradient w.r.t. input 1 + k, and shaped like it.
    T* out[22];
    for (int k = 0; k < 22; ++k) {
      Tensor* t;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(k, ctx->input(1 + k).shape(), &t));
      out[k] = t->flat<T>().data();
    }
    const LstmBackwardGrads<T> grads{
        {out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]},
        {out[8], out[9], out[10], out[11], out[12], out[13], out[14]},
        {out[15], out[16], out[17], out[18], out[19], out[20], out[21]}};
    OP_REQUIRES_OK(ctx, LstmBackwardGrad<Device, T>()(
                            ctx, dims, attrs_, seq_len_max, in.Pointers<T>(),
                            ActivationInputs<T>(ctx, true), OutputGradInputs<T>(ctx, true), cot,
                            grads));
  }

 private:
  LstmAttrs attrs_;
};

// One registration per device. The sequence ops read seq_len_max on the host (HostMemory on the
// GPU, as TF's own GPU kernels).
#define TF_LSTM_REGISTER(DEVICE, DEVICE_TYPE, SEQ_LEN_MAX_ON_HOST, T)                        \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>LSTMBlockCell").Device(DEVICE_TYPE).TypeConstraint<T>("T"),              \
      LSTMBlockCellOp<DEVICE, T>);                                                          \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>LSTMBlockCellGrad").Device(DEVICE_TYPE).TypeConstraint<T>("T"),          \
      LSTMBlockCellGradOp<DEVICE, T>);                                                      \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>BlockLSTM").Device(DEVICE_TYPE).TypeConstraint<T>("T")                   \
          SEQ_LEN_MAX_ON_HOST,                                                              \
      BlockLSTMOp<DEVICE, T, GateLayout::kICFO>);                                           \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>BlockLSTMV2").Device(DEVICE_TYPE).TypeConstraint<T>("T")                 \
          SEQ_LEN_MAX_ON_HOST,                                                              \
      BlockLSTMOp<DEVICE, T, GateLayout::kIFCO>);                                           \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>BlockLSTMGrad").Device(DEVICE_TYPE).TypeConstraint<T>("T")               \
          SEQ_LEN_MAX_ON_HOST,                                                              \
      BlockLSTMGradOp<DEVICE, T, GateLayout::kICFO, false>);                                \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>BlockLSTMGradV2").Device(DEVICE_TYPE).TypeConstraint<T>("T")             \
          SEQ_LEN_MAX_ON_HOST,                                                              \
      BlockLSTMGradOp<DEVICE, T, GateLayout::kIFCO, false>);                                \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>BlockLSTMFullGrad").Device(DEVICE_TYPE).TypeConstraint<T>("T")           \
          SEQ_LEN_MAX_ON_HOST,                                                              \
      BlockLSTMGradOp<DEVICE, T, GateLayout::kIFCO, true>);                                 \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("TfLstm>BlockLSTMFullGradGrad").Device(DEVICE_TYPE).TypeConstraint<T>("T")       \
          SEQ_LEN_MAX_ON_HOST,                                                              \
      BlockLSTMFullGradGradOp<DEVICE, T>);

#define TF_LSTM_REGISTER_CPU(T) TF_LSTM_REGISTER(CPUDevice, tensorflow::DEVICE_CPU, , T)
TF_CALL_half(TF_LSTM_REGISTER_CPU);
TF_CALL_bfloat16(TF_LSTM_REGISTER_CPU);
TF_CALL_float(TF_LSTM_REGISTER_CPU);
TF_CALL_double(TF_LSTM_REGISTER_CPU);
#undef TF_LSTM_REGISTER_CPU

#ifdef TF_LSTM_OPS_WITH_CUDA
#define TF_LSTM_REGISTER_GPU(T) \
  TF_LSTM_REGISTER(GpuDevice, tensorflow::DEVICE_GPU, .HostMemory("seq_len_max"), T)
TF_CALL_half(TF_LSTM_REGISTER_GPU);
TF_CALL_bfloat16(TF_LSTM_REGISTER_GPU);
TF_CALL_float(TF_LSTM_REGISTER_GPU);
TF_CALL_double(TF_LSTM_REGISTER_GPU);
#undef TF_LSTM_REGISTER_GPU
#endif  // TF_LSTM_OPS_WITH_CUDA
#undef TF_LSTM_REGISTER

}  // namespace tf_lstm_ops
