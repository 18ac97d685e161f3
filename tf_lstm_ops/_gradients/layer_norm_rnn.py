"""Gradients of the LayerNorm GRU / SimpleRNN ops (docs/layer_norm_rnn.md §4), registered when
``tf_lstm_ops`` is imported.

As the LayerNorm LSTM's (layer_norm_lstm.py): ``LayerNormRNN``'s gradient is the fused
``LayerNormRNNGrad`` op on the forward's inputs and reserve space (an is_training=False forward
kept none: its gradient runs the training forward once more); the Grad op's own gradient (second
derivatives, Hessian-vector products, forward mode) is a double backpropagation through
``forward``, the same function written with TensorFlow ops. The lengths, the recurrent dropout
mask and the zoneout weights are constants of every derivative.
"""

import tensorflow as tf

from tf_lstm_ops._gradients._common import double_backprop, in_compute_type, string_attr
from tf_lstm_ops._gradients.layer_norm_lstm import _optional, _zone, layer_norm
from tf_lstm_ops._loader import OP_NAMESPACE, library
from tf_lstm_ops._rnn_activations import ACTIVATIONS

# The forward op's inputs in op-def order: the differentiable ones, then the constants.
DIFFERENTIABLE = ("input", "input_h", "kernel", "recurrent_kernel", "bias", "gamma_x", "gamma_h")
CONSTANTS = ("sequence_lengths", "recurrent_mask", "zoneout_weights")
ATTRS = ("cell", "activation", "recurrent_activation", "epsilon", "time_major")


def _attrs(op):
    return {name: string_attr(op, name) for name in ATTRS}


def forward(input, input_h, kernel, recurrent_kernel, bias, gamma_x, gamma_h, sequence_lengths,
            recurrent_mask, zoneout_weights, cell="gru", activation="tanh",
            recurrent_activation="sigmoid", epsilon=1e-5, time_major=False):
    """What LayerNormRNN computes, with TensorFlow ops (docs/layer_norm_rnn.md §1):
    (output, output_h), 16-bit types in float32 as the kernel computes them."""
    constants = [_optional(t) for t in (recurrent_mask, zoneout_weights)]
    act, rec = ACTIVATIONS[activation], ACTIVATIONS[recurrent_activation]
    gru = cell == "gru"

    def run(tensors):
        (x, h0, kernel, r, bias, gx, gh), extra = tensors[:7], tensors[7:]
        mask, zh = (None if c is None else tf.cast(extra.pop(0), x.dtype) for c in constants)
        if not time_major:
            x = tf.transpose(x, [1, 0, 2])
            zh = zh if zh is None or zh.shape.rank == 0 else tf.transpose(zh, [1, 0, 2])
        steps = tf.shape(x)[0]
        valid = tf.transpose(tf.sequence_mask(sequence_lengths, steps)[:, :, None], [1, 0, 2])
        xw = tf.einsum("tbi,ig->tbg", x, kernel)
        zx = layer_norm(xw, gx, bias[0], epsilon) if gru else xw
        by_step = zh is not None and zh.shape.rank == 3

        def step(h, elems):
            zx_t, valid_t, *weights = elems
            wh = weights[0] if by_step else zh
            hr = tf.matmul(h if mask is None else h * mask, r)
            if gru:
                u = layer_norm(hr, gh, bias[1], epsilon)
                xz, xr, xg = tf.split(zx_t, 3, axis=-1)
                uz, ur, ug = tf.split(u, 3, axis=-1)
                z, r_gate = rec(xz + uz), rec(xr + ur)
                h_cell = z * h + (1 - z) * act(xg + r_gate * ug)
            else:
                h_cell = act(layer_norm(zx_t + hr, gx, bias, epsilon))
            return tf.where(valid_t, _zone(wh, h_cell, h), h)

        hs = tf.scan(step, (zx, valid) + ((zh,) if by_step else ()), initializer=h0)
        ys = tf.where(valid, hs, tf.zeros_like(hs))
        h_last = tf.concat([h0[None], hs], 0)[-1]  # (T = 0: the initial state)
        return [ys if time_major else tf.transpose(ys, [1, 0, 2]), h_last]

    tensors = [input, input_h, kernel, recurrent_kernel, bias, gamma_x, gamma_h] + [
        c for c in constants if c is not None]
    return in_compute_type(run, tensors)


@tf.RegisterGradient(OP_NAMESPACE + "LayerNormRNN")
def _layer_norm_rnn_grad(op, dy, dh, _reserve):
    args = dict(zip(DIFFERENTIABLE + CONSTANTS, op.inputs))
    attrs = _attrs(op)
    outputs = op.outputs
    if not op.get_attr("is_training"):  # no reserve space: the training forward gives one
        with tf.name_scope("recomputed_forward"):
            outputs = library.op("LayerNormRNN")(**args, **attrs, is_training=True)
    cotangents = {name: tf.zeros_like(out) if grad is None else grad for name, grad, out in zip(
        ("output_backprop", "output_h_backprop"), (dy, dh), outputs)}
    grads = library.op("LayerNormRNNGrad")(**args, **attrs, **cotangents,
                                           reserve_space=outputs[2])
    return list(grads) + [None] * len(CONSTANTS)


@tf.RegisterGradient(OP_NAMESPACE + "LayerNormRNNGrad")
def _layer_norm_rnn_grad_grad(op, *grads):
    return double_backprop(op, grads, forward, _attrs(op), len(DIFFERENTIABLE), len(CONSTANTS),
                           cotangents=2)
