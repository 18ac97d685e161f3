"""Gradients of our CudnnRNN, CudnnRNNV2 and CudnnRNNV3 ops, registered when ``tf_lstm_ops`` is
imported.

TF registers gradients for its own op names (which run our CPU kernels once the library is loaded);
these are for the same ops under our namespace (TfLstm>). Each runs the matching CudnnRNNBackprop,
CudnnRNNBackpropV2 or CudnnRNNBackpropV3 op (docs/cudnn_rnn.md §7) on the forward op's inputs,
outputs, reserve space and attributes (V2 and V3 also pass host_reserved; V3 its sequence_lengths,
num_proj and time_major). A forward run with is_training=False kept no reserve space: its gradient
runs the forward once more in training mode without dropout (the same outputs, since inference
applies none) and differentiates that, so an inference call (a Keras layer's training=False) stays
lean and can still be differentiated (input saliency, gradient penalties). An output gradient the
tape leaves out counts as zeros; input_c gets a zero gradient outside LSTM mode (the op ignores it
there), and V3's integer sequence_lengths none. CudnnRNNV3Keras also passes its operand masks
(Keras' recurrent dropout) and zoneout weights, which are constants: no gradient flows to them,
as none flows to Keras' masks (drawn by dropout from ones) or to zoneout's (drawn, or its rate).
KerasRNN's gradient is KerasRNNBackprop, the same Backprop on Keras' weights (docs/cudnn_rnn.md
§6.6); its own gradient is CudnnRNNBackpropV3Keras's through the weight conversions.
"""

import tensorflow as tf

from tf_lstm_ops._loader import OP_NAMESPACE, library

_RNN_ATTRS = ("rnn_mode", "input_mode", "direction", "dropout", "seed", "seed2")
_KERAS_ATTRS = ("activation", "recurrent_activation", "reset_after")
_FORWARD_OPS = {1: "CudnnRNN", 2: "CudnnRNNV2", 3: "CudnnRNNV3"}


def _cudnn_rnn_grad(op, grads, backprop_op, version, forward_op=None):
    attrs = _RNN_ATTRS + (("num_proj", "time_major") if version == 3 else ())
    if forward_op is not None:  # CudnnRNNV3Keras
        attrs += _KERAS_ATTRS
    args = dict(zip(("input", "input_h", "input_c", "params"), op.inputs[:4]))
    if version == 3:
        args["sequence_lengths"] = op.inputs[4]
    if forward_op is not None:
        args.update(input_masks=op.inputs[5], recurrent_masks=op.inputs[6],
                    zoneout_h_weights=op.inputs[7], zoneout_c_weights=op.inputs[8])
    args.update((name, op.get_attr(name)) for name in attrs)
    gradients = _backprop(args, op.outputs, op.get_attr("is_training"), grads, backprop_op,
                          version, forward_op)
    others = ([None] if version == 3 else []) + ([None] * 4 if forward_op is not None else [])
    return gradients + others


def _backprop(args, outputs, is_training, grads, backprop_op, version, forward_op):
    """The gradients of a forward run with `args` (its inputs by name and attributes) that gave
    `outputs`, w.r.t. input, input_h, input_c and the weights (params, or KerasRNN's three)."""
    if not is_training:
        # No reserve space: the training forward of the same inputs, without dropout (which
        # inference never applies), gives the same outputs and the reserve space to differentiate
        # (by a Backprop told the same dropout rate).
        if "dropout" in args:  # (KerasRNN has no dropout between layers)
            args["dropout"] = 0.0
        with tf.name_scope("recomputed_forward"):
            outputs = library.op(forward_op or _FORWARD_OPS[version])(**args, is_training=True)
    args.update(output=outputs[0], output_h=outputs[1], output_c=outputs[2])
    for name, grad, out in zip(
        ("output_backprop", "output_h_backprop", "output_c_backprop"), grads, outputs
    ):
        args[name] = tf.zeros_like(out) if grad is None else grad
    args["reserve_space"] = outputs[3]
    if version >= 2:
        args["host_reserved"] = outputs[4]
    gradients = list(library.op(backprop_op)(**args))
    if args["rnn_mode"] not in ("lstm", b"lstm"):  # input_c is unused (any shape): zero gradient
        gradients[2] = tf.zeros_like(args["input_c"])
    return gradients


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNN")
def _cudnn_rnn_v1_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackprop", 1)


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNNV2")
def _cudnn_rnn_v2_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackpropV2", 2)


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNNV3")
def _cudnn_rnn_v3_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackpropV3", 3)


@tf.RegisterGradient(OP_NAMESPACE + "CudnnRNNV3Keras")
def _cudnn_rnn_v3_keras_grad(op, *grads):
    return _cudnn_rnn_grad(op, grads, "CudnnRNNBackpropV3Keras", 3,
                           forward_op="CudnnRNNV3Keras")


_KERAS_RNN_ATTRS = ("rnn_mode", "time_major") + _KERAS_ATTRS
_KERAS_WEIGHTS = ("kernel", "recurrent_kernel", "bias")


@tf.RegisterGradient(OP_NAMESPACE + "KerasRNN")
def _keras_rnn_grad(op, *grads):
    """KerasRNNBackprop (docs/cudnn_rnn.md §6.6): the others' gradient, on Keras' weights."""
    args = dict(zip(("input", "input_h", "input_c") + _KERAS_WEIGHTS + (
        "sequence_lengths", "input_masks", "recurrent_masks", "zoneout_h_weights",
        "zoneout_c_weights"), op.inputs))
    args.update((name, op.get_attr(name)) for name in _KERAS_RNN_ATTRS)
    return _backprop(args, op.outputs, op.get_attr("is_training"), grads, "KerasRNNBackprop", 3,
                     "KerasRNN") + [None] * 5


@tf.RegisterGradient(OP_NAMESPACE + "KerasRNNBackprop")
def _keras_rnn_backprop_grad(op, *grads):
    """KerasRNNBackprop is CudnnRNNBackpropV3Keras on KerasToCudnnParams of its weights, with the
    params' gradient in Keras' layout (CudnnParamsToKeras): its gradient is that composition's,
    through theirs (the second derivatives of cudnn_rnn_composite.py), by one tape."""
    inputs = list(op.inputs)
    theta = inputs[:6]  # input, input_h, input_c, kernel, recurrent_kernel, bias
    v = inputs[10:13]  # output_backprop, output_h_backprop, output_c_backprop
    attrs = {name: op.get_attr(name) for name in _KERAS_RNN_ATTRS}
    used = [k for k, g in enumerate(grads) if g is not None]
    if not used:
        return [None] * len(inputs)
    with tf.GradientTape() as tape:
        tape.watch(theta + v)
        kernel, recurrent_kernel, bias = theta[3:6]
        params = library.op("KerasToCudnnParams")(
            kernel=kernel, recurrent_kernel=recurrent_kernel, bias=bias, rnn_mode=attrs["rnn_mode"])
        out = library.op("CudnnRNNBackpropV3Keras")(
            input=theta[0], input_h=theta[1], input_c=theta[2], params=params,
            sequence_lengths=inputs[6], output=inputs[7], output_h=inputs[8], output_c=inputs[9],
            output_backprop=v[0], output_h_backprop=v[1], output_c_backprop=v[2],
            reserve_space=inputs[13], host_reserved=inputs[14], input_masks=inputs[15],
            recurrent_masks=inputs[16], zoneout_h_weights=inputs[17],
            zoneout_c_weights=inputs[18], **attrs)
        results = list(out[:3]) + list(_params_to_keras(out[3], kernel, recurrent_kernel, bias,
                                                        attrs["rnn_mode"]))
    second = tape.gradient([results[k] for k in used], theta + v,
                           output_gradients=[grads[k] for k in used],
                           unconnected_gradients=tf.UnconnectedGradients.ZERO)
    # sequence_lengths; output, output_h, output_c (recomputed); reserve_space, host_reserved;
    # the operand masks and zoneout weights
    return second[:6] + [None] * 4 + second[6:] + [None] * 6


def _params_to_keras(params_grad, kernel, recurrent_kernel, bias, rnn_mode):
    """The gradient of KerasToCudnnParams(kernel, recurrent_kernel, bias) from its params'."""
    input_size, num_units = kernel.shape[0], recurrent_kernel.shape[0]
    if input_size is None or num_units is None or bias.shape.rank is None:
        raise ValueError(
            "Keras' weights are differentiated only with static kernel and recurrent_kernel "
            "sizes and bias rank; got kernel %s, recurrent_kernel %s, bias %s"
            % (kernel.shape, recurrent_kernel.shape, bias.shape))
    return library.op("CudnnParamsToKeras")(
        params=params_grad, rnn_mode=rnn_mode, input_size=input_size, num_units=num_units,
        bias_rows=bias.shape.rank)


# The Keras weight conversions (docs/cudnn_rnn.md §6.5) are linear, and each is the other's
# adjoint, so each one's gradient is the other (to every order).
@tf.RegisterGradient(OP_NAMESPACE + "KerasToCudnnParams")
def _keras_to_cudnn_params_grad(op, params_grad):
    kernel, recurrent_kernel, bias = op.inputs
    return _params_to_keras(params_grad, kernel, recurrent_kernel, bias, op.get_attr("rnn_mode"))


@tf.RegisterGradient(OP_NAMESPACE + "CudnnParamsToKeras")
def _cudnn_params_to_keras_grad(op, *grads):
    grads = [tf.zeros_like(out) if grad is None else grad for grad, out in zip(grads, op.outputs)]
    kernel_grad, recurrent_kernel_grad, bias_grad = grads
    return library.op("KerasToCudnnParams")(
        kernel=kernel_grad, recurrent_kernel=recurrent_kernel_grad, bias=bias_grad,
        rnn_mode=op.get_attr("rnn_mode"))
