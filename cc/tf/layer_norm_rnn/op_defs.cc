// Op definitions of the LayerNorm GRU and SimpleRNN (docs/layer_norm_rnn.md §3): ours alone, for
// the LayerNormGRU and LayerNormSimpleRNN layers and cells. One op for both cells (attribute
// `cell`): they share their inputs but for what the bias and the norms' scales mean.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_lstm_ops {
namespace {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The forward's inputs: the sequence and state, Keras' weights (kernel [I, G·H],
// recurrent_kernel [H, G·H]; G = 3 for the GRU, gates z, r, h; 1 for the SimpleRNN), the bias
// (GRU: [2, 3H], Keras' reset_after b_x and b_h; SimpleRNN: [H]), the norms' scales (GRU: gamma_x
// of x·W and gamma_h of h·R, [3H] each; SimpleRNN: gamma_x [H] of x·W + h·R, gamma_h the empty
// vector [0]), the lengths, the recurrent dropout mask ([B, H] or [0]) and zoneout's weights of h
// (docs/cudnn_rnn.md §4.9).
#define TF_LSTM_LAYER_NORM_RNN_INPUTS                                                   \
  .Input("input: T")                                                                    \
      .Input("input_h: T")                                                              \
      .Input("kernel: T")                                                               \
      .Input("recurrent_kernel: T")                                                     \
      .Input("bias: T")                                                                 \
      .Input("gamma_x: T")                                                              \
      .Input("gamma_h: T")                                                              \
      .Input("sequence_lengths: int32")                                                 \
      .Input("recurrent_mask: T")                                                       \
      .Input("zoneout_weights: T")                                                      \
      .Attr("T: {bfloat16, half, float, double}")                                       \
      .Attr("cell: {'gru', 'simple_rnn'}")                                              \
      .Attr("activation: string = 'tanh'")                                              \
      .Attr("recurrent_activation: string = 'sigmoid'")                                 \
      .Attr("epsilon: float = 1e-5")                                                    \
      .Attr("time_major: bool = false")

REGISTER_OP("TfLstm>LayerNormRNN")
    TF_LSTM_LAYER_NORM_RNN_INPUTS
    .Attr("is_training: bool = true")
    .Output("output: T")
    .Output("output_h: T")
    .Output("reserve_space: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle input, state;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &input));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &state));
      // [T, B, H] or [B, T, H]: the input's first two dimensions either way
      c->set_output(0, c->MakeShape({c->Dim(input, 0), c->Dim(input, 1), c->Dim(state, 1)}));
      c->set_output(1, c->input(1));
      c->set_output(2, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

// Its gradient: the gradients of <output_backprop, output> + <output_h_backprop, output_h> w.r.t.
// the sequence, the state and every weight, from the training forward's reserve space.
REGISTER_OP("TfLstm>LayerNormRNNGrad")
    TF_LSTM_LAYER_NORM_RNN_INPUTS
    .Input("output_backprop: T")
    .Input("output_h_backprop: T")
    .Input("reserve_space: T")
    .Output("input_backprop: T")
    .Output("input_h_backprop: T")
    .Output("kernel_backprop: T")
    .Output("recurrent_kernel_backprop: T")
    .Output("bias_backprop: T")
    .Output("gamma_x_backprop: T")
    .Output("gamma_h_backprop: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int k = 0; k < 7; ++k) c->set_output(k, c->input(k));
      return absl::OkStatus();
    });

#undef TF_LSTM_LAYER_NORM_RNN_INPUTS

}  // namespace
}  // namespace tf_lstm_ops
