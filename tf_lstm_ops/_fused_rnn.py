"""What the Keras 3 (``tf_lstm_ops.keras``) and Keras 2 (``tf_lstm_ops.tf_keras``) drop-in layers
share, with no Keras import: the fallback warning, a mask's lengths and whether it is
right-padded, Keras' weights as the op's cuDNN params buffer, and Keras' RNN loop
(``backend.rnn``'s last output, outputs and states, masks and ``go_backwards`` included) computed by
one ``TfLstm>CudnnRNNV3`` op. Both Keras versions define the loop's results the same way.
"""

import logging
import weakref

import tensorflow as tf

from tf_lstm_ops._loader import library

_log = logging.getLogger("tf_lstm_ops")
_warned = weakref.WeakKeyDictionary()  # layer -> the fallback reasons already logged for it


def warn_fallback(layer, reason, level=logging.WARNING):
    """Logs once per layer and reason that a call runs the Keras class's own implementation."""
    reasons = _warned.setdefault(layer, set())
    if reason not in reasons:
        reasons.add(reason)
        _log.log(level, "tf_lstm_ops: %s %r: %s: running the Keras class's own implementation "
                 "(the same results at its speed).", type(layer).__name__, layer.name, reason)


def mask_lengths(mask, batch, steps):
    """Per-example lengths of a [B, T] (or [B, T, 1]) mask of inputs with `batch` examples of
    `steps` steps, and whether it is right-padded (every row True for its first `length` steps,
    False after them): a bool scalar tensor. A mask of another shape is an InvalidArgumentError
    (its lengths would silently describe other steps)."""
    mask = tf.convert_to_tensor(mask)
    if mask.shape.rank == 3:
        mask = tf.squeeze(mask, -1)
    check = tf.debugging.assert_equal(
        tf.shape(mask), tf.stack([batch, steps]),
        message="mask must have the shape [batch_size, timesteps] of the inputs")
    # identity: tf.cast of a bool mask returns the mask itself, which would carry no dependency,
    # and in a graph the ops reading it could then fail first with a less helpful message.
    with tf.control_dependencies([check] if check is not None else []):
        mask = tf.identity(tf.cast(mask, tf.bool))
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    right_padded = tf.reduce_all(tf.equal(mask, tf.sequence_mask(lengths, tf.shape(mask)[1])))
    return lengths, right_padded


def keras_params(rnn_mode, kernel, recurrent_kernel, bias):
    """A Keras RNN layer's weights as the params buffer of the one-layer model they describe
    (docs/cudnn_rnn.md §6.5), by one KerasToCudnnParams op (its gradient: CudnnParamsToKeras).
    kernel [I, G*H], recurrent_kernel [H, G*H]; bias [G*H] (LSTM, SimpleRNN: b_R, with b_W = 0),
    [2, G*H] (GRU with reset_after: b_W, b_R) or None (no bias: zeros)."""
    if bias is None:
        bias = tf.zeros([tf.shape(recurrent_kernel)[1]], recurrent_kernel.dtype)
    return library.op("KerasToCudnnParams")(
        kernel=kernel, recurrent_kernel=recurrent_kernel, bias=bias, rnn_mode=rnn_mode)


_NOT_RIGHT_PADDED = ("a mask that is not right-padded (left padding or masked steps inside a "
                     "sequence: the kernel takes one length per example)")


def by_mask(layer, inputs, mask, fused, keras_call, same_structure):
    """fused(lengths) where the mask of `inputs` is right-padded, else keras_call(): eagerly by
    the mask's value; in a graph by a conditional, the data deciding per batch, both branches
    made same_structure(result) (a structure both can return)."""
    shape = tf.shape(inputs)
    lengths, right_padded = mask_lengths(mask, shape[0], shape[1])
    if tf.executing_eagerly():
        if bool(right_padded):
            return fused(lengths)
        warn_fallback(layer, _NOT_RIGHT_PADDED)
        return keras_call()
    warn_fallback(layer, "batches with %s will run the Keras class's loop, right-padded batches "
                  "the fused kernel" % _NOT_RIGHT_PADDED, level=logging.INFO)
    return tf.cond(right_padded, lambda: same_structure(fused(lengths)),
                   lambda: same_structure(keras_call()))


def is_inference(training):
    """Whether a layer call's `training` argument says inference (False, 0): then the op runs with
    is_training=False and keeps no activations for a backward (its gradient, if one is taken
    anyway, recomputes them). None and tensors count as training, as they may be in fit."""
    return isinstance(training, (bool, int)) and not training


def keras_rnn_loop(x, h0, c0, params, lengths, rnn_mode, go_backwards, return_sequences,
                   zero_output_for_mask, training=True):
    """Keras' RNN loop over x [B, T, I] (inputs already dropped out) from h0 (and c0 for LSTM),
    on one op: (last_output [B, H], outputs [B, T, H] or [B, 1, H] without return_sequences,
    states). `lengths` [B] are the per-example lengths of a right-padded mask, or None;
    `training` is the layer call's (is_inference)."""
    dtype = x.dtype
    shape = tf.shape(x)
    batch, steps = shape[0], shape[1]
    seq_lengths = tf.fill([batch], steps) if lengths is None else lengths
    if go_backwards:
        x = (tf.reverse(x, [1]) if lengths is None
             else tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0))
    lstm = rnn_mode == "lstm"
    c0 = c0 if lstm else tf.zeros([], dtype)
    out = library.op("CudnnRNNV3")(
        input=x,
        input_h=tf.expand_dims(h0, 1),  # [B, 1, H] (batch-major state label)
        input_c=tf.expand_dims(c0, 1) if lstm else c0,
        params=params,
        sequence_lengths=seq_lengths,
        rnn_mode=rnn_mode,
        is_training=not is_inference(training),
        time_major=False,
    )
    h = tf.squeeze(out.output_h, 1)
    states = [h, tf.squeeze(out.output_c, 1)] if lstm else [h]
    if lengths is None:
        last = h
        outputs = out.output if return_sequences else None
    else:
        # Keras' loop: a masked step keeps the states and outputs the previous step's output
        # (zeros before the first valid step), or zeros with zero_output_for_mask. The kernel
        # outputs zeros at t >= length; the final h is the output of the last valid step.
        valid = tf.expand_dims(lengths > 0, 1)
        zero = tf.zeros_like(h)
        if go_backwards:
            # processing order: the T - length masked steps come first (zeros), then the
            # valid steps in reverse; the last processed step is valid iff length > 0.
            last = tf.where(valid, h, zero)
            outputs = None
            if return_sequences:
                outputs = tf.reverse(
                    tf.reverse_sequence(out.output, lengths, seq_axis=1, batch_axis=0), [1]
                )
        elif zero_output_for_mask:
            last = tf.where(tf.expand_dims(tf.equal(lengths, steps), 1), h, zero)
            outputs = out.output if return_sequences else None
        else:
            last = tf.where(valid, h, zero)
            outputs = None
            if return_sequences:
                keep = tf.expand_dims(tf.sequence_mask(lengths, steps), -1)
                outputs = tf.where(keep, out.output, tf.expand_dims(last, 1))
    if outputs is None:
        outputs = tf.expand_dims(last, 1)
    return last, outputs, states
