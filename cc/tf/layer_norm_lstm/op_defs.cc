// Op definitions of the LayerNorm LSTM (docs/layer_norm_lstm.md §3): ours alone, for the
// LayerNormLSTM layers and cells.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_lstm_ops {
namespace {

using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// The forward's inputs: the sequence and states, Keras' weights (kernel [I, 4H],
// recurrent_kernel [H, 4H], bias [4H], gates i, f, c, o), the three norms' γ and β (x·W's and
// h·R's [4H], c's [H]), the lengths, TF Addons' recurrent dropout mask ([B, H] or [0]) and
// zoneout's weights (docs/cudnn_rnn.md §4.9).
#define TF_LSTM_LAYER_NORM_LSTM_INPUTS                                                  \
  .Input("input: T")                                                                    \
      .Input("input_h: T")                                                              \
      .Input("input_c: T")                                                              \
      .Input("kernel: T")                                                               \
      .Input("recurrent_kernel: T")                                                     \
      .Input("bias: T")                                                                 \
      .Input("gamma_x: T")                                                              \
      .Input("beta_x: T")                                                               \
      .Input("gamma_h: T")                                                              \
      .Input("beta_h: T")                                                               \
      .Input("gamma_c: T")                                                              \
      .Input("beta_c: T")                                                               \
      .Input("sequence_lengths: int32")                                                 \
      .Input("recurrent_mask: T")                                                       \
      .Input("zoneout_h_weights: T")                                                    \
      .Input("zoneout_c_weights: T")                                                    \
      .Attr("T: {bfloat16, half, float, double}")                                       \
      .Attr("norm: {'addons', 'paper'} = 'addons'")                                     \
      .Attr("epsilon: float = 0.001")                                                   \
      .Attr("time_major: bool = false")

REGISTER_OP("TfLstm>LayerNormLSTM")
    TF_LSTM_LAYER_NORM_LSTM_INPUTS
    .Attr("is_training: bool = true")
    .Output("output: T")
    .Output("output_h: T")
    .Output("output_c: T")
    .Output("reserve_space: T")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle input, state;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &input));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &state));
      // [T, B, H] or [B, T, H]: the input's first two dimensions either way
      c->set_output(0, c->MakeShape({c->Dim(input, 0), c->Dim(input, 1), c->Dim(state, 1)}));
      c->set_output(1, c->input(1));
      c->set_output(2, c->input(2));
      c->set_output(3, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

// Its gradient: the gradients of <output_backprop, output> + <output_h_backprop, output_h> +
// <output_c_backprop, output_c> w.r.t. the sequence, the states and every weight, from the
// training forward's reserve space.
REGISTER_OP("TfLstm>LayerNormLSTMGrad")
    TF_LSTM_LAYER_NORM_LSTM_INPUTS
    .Input("output_backprop: T")
    .Input("output_h_backprop: T")
    .Input("output_c_backprop: T")
    .Input("reserve_space: T")
    .Output("input_backprop: T")
    .Output("input_h_backprop: T")
    .Output("input_c_backprop: T")
    .Output("kernel_backprop: T")
    .Output("recurrent_kernel_backprop: T")
    .Output("bias_backprop: T")
    .Output("gamma_x_backprop: T")
    .Output("beta_x_backprop: T")
    .Output("gamma_h_backprop: T")
    .Output("beta_h_backprop: T")
    .Output("gamma_c_backprop: T")
    .Output("beta_c_backprop: T")
    .SetShapeFn([](InferenceContext* c) {
      for (int k = 0; k < 12; ++k) c->set_output(k, c->input(k));
      return absl::OkStatus();
    });

#undef TF_LSTM_LAYER_NORM_LSTM_INPUTS

}  // namespace
}  // namespace tf_lstm_ops
