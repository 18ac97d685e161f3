"""Gradients of the LayerNorm LSTM ops (docs/layer_norm_lstm.md §4), registered when
``tf_lstm_ops`` is imported.

``LayerNormLSTM``'s gradient is the fused ``LayerNormLSTMGrad`` op on the forward's inputs and
reserve space (a forward run with is_training=False kept none: its gradient runs the training
forward once more, which gives the same outputs, and differentiates that). The Grad op's own
gradient (second derivatives, Hessian-vector products, forward mode) is a double
backpropagation through ``forward``, the same function written with TensorFlow ops, as the
CudnnRNN family's composite (docs/cudnn_rnn.md §7.4). The lengths, the recurrent dropout mask
and the zoneout weights are constants of every derivative: no gradient flows into them.
"""

import tensorflow as tf

from tf_lstm_ops._gradients._common import double_backprop, in_compute_type, string_attr
from tf_lstm_ops._loader import OP_NAMESPACE, library

# The forward op's inputs in op-def order: the differentiable ones (the sequence, the states, the
# weights), then the constants.
DIFFERENTIABLE = ("input", "input_h", "input_c", "kernel", "recurrent_kernel", "bias",
                  "gamma_x", "beta_x", "gamma_h", "beta_h", "gamma_c", "beta_c")
CONSTANTS = ("sequence_lengths", "recurrent_mask", "zoneout_h_weights", "zoneout_c_weights")
ATTRS = ("norm", "epsilon", "time_major")


def _attrs(op):
    return {name: string_attr(op, name) for name in ATTRS}


def layer_norm(v, gamma, beta, epsilon):
    """LN over the last axis: (v − μ)/sqrt(σ² + ε)·γ + β, σ² the population variance. Not
    tf.nn.moments: it stops the gradient through μ inside σ², which leaves first derivatives
    right (dσ²/dμ is 0) but second derivatives wrong."""
    mean = tf.reduce_mean(v, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.square(v - mean), axis=-1, keepdims=True)
    return (v - mean) * tf.math.rsqrt(variance + epsilon) * gamma + beta


def _zone(weights, new, previous):
    return new if weights is None else weights * new + (1 - weights) * previous


def _optional(t):
    """An optional input: None when it is the empty vector [0]."""
    return None if t.shape.rank == 1 and t.shape[0] == 0 else t


def forward(input, input_h, input_c, kernel, recurrent_kernel, bias, gamma_x, beta_x,
            gamma_h, beta_h, gamma_c, beta_c, sequence_lengths, recurrent_mask,
            zoneout_h_weights, zoneout_c_weights, norm="addons", epsilon=1e-3,
            time_major=False):
    """What LayerNormLSTM computes, with TensorFlow ops (docs/layer_norm_lstm.md §1):
    (output, output_h, output_c), 16-bit types in float32 as the kernel computes them."""
    constants = [_optional(t) for t in (recurrent_mask, zoneout_h_weights, zoneout_c_weights)]

    def run(tensors):
        (x, h0, c0, kernel, r, bias, gx, bx, gh, bh, gc, bc), extra = tensors[:12], tensors[12:]
        mask, zh, zc = (None if c is None else tf.cast(extra.pop(0), x.dtype) for c in constants)
        if not time_major:
            x = tf.transpose(x, [1, 0, 2])
            zh, zc = (w if w is None or w.shape.rank == 0 else tf.transpose(w, [1, 0, 2])
                      for w in (zh, zc))
        steps = tf.shape(x)[0]
        valid = tf.transpose(tf.sequence_mask(sequence_lengths, steps)[:, :, None], [1, 0, 2])
        zx = layer_norm(tf.einsum("tbi,ig->tbg", x, kernel), gx, bx, epsilon) + bias
        per_step = [w for w in (zh, zc) if w is not None and w.shape.rank == 3]

        def step(carry, elems):
            h, c = carry
            zx_t, valid_t, *weights = elems
            weights = iter(weights)
            wh, wc = (None if w is None else next(weights) if w.shape.rank == 3 else w
                      for w in (zh, zc))
            operand = h if mask is None else h * mask
            z = zx_t + layer_norm(tf.matmul(operand, r), gh, bh, epsilon)
            i, f, g, o = tf.split(z, 4, axis=-1)
            i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
            c_cell = f * c + i * g
            q = layer_norm(c_cell, gc, bc, epsilon)
            h_new = _zone(wh, o * tf.tanh(q), h)
            c_new = _zone(wc, q if norm == "addons" else c_cell, c)
            return tf.where(valid_t, h_new, h), tf.where(valid_t, c_new, c)

        hs, cs = tf.scan(step, (zx, valid, *per_step), initializer=(h0, c0))
        ys = tf.where(valid, hs, tf.zeros_like(hs))
        # the state after the last step (rows past their end held it); T = 0: the initial one
        h_last = tf.concat([h0[None], hs], 0)[-1]
        c_last = tf.concat([c0[None], cs], 0)[-1]
        return [ys if time_major else tf.transpose(ys, [1, 0, 2]), h_last, c_last]

    tensors = [input, input_h, input_c, kernel, recurrent_kernel, bias, gamma_x, beta_x, gamma_h,
               beta_h, gamma_c, beta_c] + [c for c in constants if c is not None]
    return in_compute_type(run, tensors)


@tf.RegisterGradient(OP_NAMESPACE + "LayerNormLSTM")
def _layer_norm_lstm_grad(op, dy, dh, dc, _reserve):
    args = dict(zip(DIFFERENTIABLE + CONSTANTS, op.inputs))
    attrs = _attrs(op)
    outputs = op.outputs
    if not op.get_attr("is_training"):  # no reserve space: the training forward gives one
        with tf.name_scope("recomputed_forward"):
            outputs = library.op("LayerNormLSTM")(**args, **attrs, is_training=True)
    cotangents = {name: tf.zeros_like(out) if grad is None else grad for name, grad, out in zip(
        ("output_backprop", "output_h_backprop", "output_c_backprop"), (dy, dh, dc), outputs)}
    grads = library.op("LayerNormLSTMGrad")(**args, **attrs, **cotangents,
                                            reserve_space=outputs[3])
    return list(grads) + [None] * len(CONSTANTS)


@tf.RegisterGradient(OP_NAMESPACE + "LayerNormLSTMGrad")
def _layer_norm_lstm_grad_grad(op, *grads):
    return double_backprop(op, grads, forward, _attrs(op), len(DIFFERENTIABLE), len(CONSTANTS),
                           cotangents=3)
