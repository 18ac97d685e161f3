"""Gradients of our CudnnRNN, CudnnRNNV2 and CudnnRNNV3 ops, registered when ``tf_lstm_ops`` is
imported.

TF registers gradients for its own op names (which run our CPU kernels once the library is loaded);
these are for the same ops under our namespace (TfLstm>). Each runs the matching CudnnRNNBackprop,
CudnnRNNBackpropV2 or CudnnRNNBackpropV3 op (docs/cudnn_rnn.md §7) on the forward op's inputs,
outputs, reserve space and attributes (V2 and V3 also pass host_reserved; V3 its sequence_lengths,
num_proj and time_major), so the forward must have run with is_training=True (else a ValueError says
so). An output gradient the tape leaves out counts as zeros; input_c gets a zero gradient outside
LSTM mode (the op ignores it there), and V3's integer sequence_lengths none.
"""

import tensorflow as tf

from tf_lstm_ops._loader import OP_NAMESPACE, library

_RNN_ATTRS = ("rnn_mode", "input_mode", "direction", "dropout", "seed", "seed2")


def _cudnn_rnn_grad(op, grads, backprop_op, version):
    if not op.get_attr("is_training"):
        raise ValueError(
            "%s was run with is_training=False, which keeps no reserve space: set "
            "is_training=True to differentiate it" % op.type
        )
    args = dict(zip(("input", "input_h", "input_c", "params"), op.inputs[:4]))
    args.update(output=op.outputs[0], output_h=op.outputs[1], output_c=op.outputs[2])
    for name, grad, out in zip(
        ("output_backprop", "output_h_backprop", "output_c_backprop"), grads, op.outputs
    ):
        args[name] = tf.zeros_like(out) if grad is None else grad
    args["reserve_space"] = op.outputs[3]
    attrs = _RNN_ATTRS
    if version >= 2:
        args["host_reserved"] = op.outputs[4]
    if version == 3:
        args["sequence_lengths"] = op.inputs[4]
        attrs += ("num_proj", "time_major")
    args.update((name, op.get_attr(name)) for name in attrs)
    input_grad, h_grad, c_grad, params_grad = library.op(backprop_op)(**args)
    if args["rnn_mode"] not in ("lstm", b"lstm"):  # input_c is unused (any shape): zero gradient
        c_grad = tf.zeros_like(args["input_c"])
    return [input_grad, h_grad, c_grad, params_grad] + ([None] if version == 3 else [])


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNN")
def _cudnn_rnn_v1_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackprop", 1)


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNNV2")
def _cudnn_rnn_v2_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackpropV2", 2)


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNNV3")
def _cudnn_rnn_v3_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackpropV3", 3)


# The Keras weight conversions (docs/cudnn_rnn.md §6.5) are linear, and each is the other's
# adjoint, so each one's gradient is the other (to every order).
@tf.RegisterGradient(OP_NAMESPACE + "KerasToCudnnParams")
def _keras_to_cudnn_params_grad(op, params_grad):
    kernel, recurrent_kernel, bias = op.inputs
    input_size, num_units = kernel.shape[0], recurrent_kernel.shape[0]
    if input_size is None or num_units is None or bias.shape.rank is None:
        raise ValueError(
            "KerasToCudnnParams is differentiated only with static kernel and recurrent_kernel "
            "sizes and bias rank; got kernel %s, recurrent_kernel %s, bias %s"
            % (kernel.shape, recurrent_kernel.shape, bias.shape))
    return library.op("CudnnParamsToKeras")(
        params=params_grad, rnn_mode=op.get_attr("rnn_mode"), input_size=input_size,
        num_units=num_units, bias_rows=bias.shape.rank)


@tf.RegisterGradient(OP_NAMESPACE + "CudnnParamsToKeras")
def _cudnn_params_to_keras_grad(op, *grads):
    grads = [tf.zeros_like(out) if grad is None else grad for grad, out in zip(grads, op.outputs)]
    kernel_grad, recurrent_kernel_grad, bias_grad = grads
    return library.op("KerasToCudnnParams")(
        kernel=kernel_grad, recurrent_kernel=recurrent_kernel_grad, bias=bias_grad,
        rnn_mode=op.get_attr("rnn_mode"))
