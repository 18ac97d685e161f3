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
