"""What the Keras 3 (``tf_lstm_ops.keras``) and Keras 2 (``tf_lstm_ops.tf_keras``) drop-in layers
share, with no Keras import: the fallback warning, a step mask checked against the inputs,
Keras' weights as the op takes them, and Keras' RNN loop (``backend.rnn``'s last output, outputs
and states, masks of any pattern and ``go_backwards`` included) computed by one
``TfLstm>KerasRNN`` op on the layer's weights as Keras stores them (docs/keras_layers.md). Both
Keras versions define the loop's results the same way.
"""

import logging
import weakref

import tensorflow as tf

from tf_lstm_ops._loader import in_xla_context, library

_log = logging.getLogger("tf_lstm_ops")
_warned = weakref.WeakKeyDictionary()  # layer -> the fallback reasons already logged for it


def warn_fallback(layer, reason, level=logging.WARNING):
    """Logs once per layer and reason that a call runs the Keras class's own implementation."""
    reasons = _warned.setdefault(layer, set())
    if reason not in reasons:
        reasons.add(reason)
        _log.log(level, "tf_lstm_ops: %s %r: %s: running the Keras class's own implementation "
                 "(the same results at its speed).", type(layer).__name__, layer.name, reason)


XLA_REASON = "compiled by XLA (jit_compile=True), where the custom op has no kernel"


def call_fallback_reason(layer, reason=None):
    """Why this call of `layer` cannot run the fused kernel (None: it can): `reason`, else the
    layer's static one, else XLA. A zoned layer raises instead (ZoneoutLayer._refuse_unzoned: no
    Keras loop has zoneout); otherwise the reason is logged once."""
    reason = reason or layer._static_fallback_reason()
    if reason is None and in_xla_context():
        reason = XLA_REASON
    if reason is not None:
        layer._refuse_unzoned(reason)
        warn_fallback(layer, reason)
    return reason


def step_mask(mask, batch, steps):
    """A [B, T] (or [B, T, 1]) mask of inputs with `batch` examples of `steps` steps as a bool
    [B, T] tensor (any nonzero value is True, as Keras casts it). A mask of another shape is an
    InvalidArgumentError (it would silently describe other steps)."""
    mask = tf.convert_to_tensor(mask)
    if mask.shape.rank == 3:
        mask = tf.squeeze(mask, -1)
    check = tf.debugging.assert_equal(
        tf.shape(mask), tf.stack([batch, steps]),
        message="mask must have the shape [batch_size, timesteps] of the inputs")
    # identity: tf.cast of a bool mask returns the mask itself, which would carry no dependency,
    # and in a graph the ops reading it could then fail first with a less helpful message.
    with tf.control_dependencies([check] if check is not None else []):
        return tf.identity(tf.cast(mask, tf.bool))


def mask_lengths(mask, batch, steps):
    """Per-example lengths of a [B, T] (or [B, T, 1]) mask (see step_mask), and whether it is
    right-padded (every row True for its first `length` steps, False after them): a bool scalar
    tensor."""
    mask = step_mask(mask, batch, steps)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    right_padded = tf.reduce_all(tf.equal(mask, tf.sequence_mask(lengths, tf.shape(mask)[1])))
    return lengths, right_padded


def keras_weights(kernel, recurrent_kernel, bias):
    """A Keras RNN layer's weights as KerasRNN takes them (docs/cudnn_rnn.md §6.6), which its CPU
    kernel reads in place (no copy per call; §6.5's conversion only on the GPU):
    kernel [I, G*H], recurrent_kernel [H, G*H]; bias [G*H] (LSTM, SimpleRNN: b_R, with b_W = 0),
    [2, G*H] (GRU with reset_after: b_W, b_R) or None (no bias: zeros)."""
    if bias is None:
        bias = tf.zeros_like(recurrent_kernel[0])  # [G*H], whether or not H is static
    return kernel, recurrent_kernel, bias


def is_inference(training):
    """Whether a layer call's `training` argument says inference (False, 0): then the op runs with
    is_training=False and keeps no activations for a backward (its gradient, if one is taken
    anyway, recomputes them). None and tensors count as training, as they may be in fit."""
    return isinstance(training, (bool, int)) and not training


def keras_cell_attrs(rnn_mode, activation, recurrent_activation=None, reset_after=True):
    """KerasRNN's cell attributes for a Keras cell: its activations (the ops' names,
    docs/cudnn_rnn.md §4.7; recurrent_activation None for a plain RNN) and GRU's reset_after
    (§4.8); None where the cell is cuDNN's own (the op's defaults)."""
    if rnn_mode in ("lstm", "gru"):
        if (activation, recurrent_activation, reset_after) == ("tanh", "sigmoid", True):
            return None
        attrs = dict(activation=activation, recurrent_activation=recurrent_activation)
        return attrs if reset_after else dict(attrs, reset_after=False)
    if activation == rnn_mode[len("rnn_"):]:
        return None
    return dict(activation=activation, recurrent_activation="")


# Keras' gate order (LSTM i, f, c, o; GRU z, r, h) by cuDNN's (i, f, g, o; r, z, n): the order of
# the op's per-gate operand masks.
_KERAS_GATE_OF_CUDNN_GATE = {"lstm": (0, 1, 2, 3), "gru": (1, 0, 2), "rnn_tanh": (0,),
                             "rnn_relu": (0,)}


def dropout_applies(rate, gated):
    """Whether a Keras cell applies a dropout rate while training: LSTM and GRU (gated) one in
    (0, 1), SimpleRNN any rate > 0 (docs/keras_layers.md §5)."""
    return 0 < rate < 1 if gated else rate > 0


def operand_masks(rnn_mode, masks, dtype):
    """The op's operand masks [G, B, n] (docs/keras_layers.md §5) from a Keras cell's: a list of
    one mask per gate in Keras' gate order, or one mask for every gate; None stays None."""
    if masks is None:
        return None
    gates = _KERAS_GATE_OF_CUDNN_GATE[rnn_mode]
    per_gate = [masks[k] for k in gates] if isinstance(masks, (list, tuple)) else [masks] * len(
        gates)
    return tf.cast(tf.stack(per_gate), dtype)


# ---- zoneout (docs/keras_layers.md §7) ----------------------------------------------------------

def zoneout_rate(name, value):
    """A layer's zoneout rate as a float in [0, 1] (the probability that a state element keeps its
    previous value at a training step); anything else is a ValueError naming the argument."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        rate = None
    if rate is None or not 0.0 <= rate <= 1.0:
        raise ValueError("%s must be a number in [0, 1] (the probability that a state element "
                         "keeps its previous value), got %r" % (name, value))
    return rate


class ZoneoutLayer:
    """Zoneout's rates on the drop-in layers (Keras 3 and tf_keras): `zoneout_h` and `zoneout_c`
    on LSTM, `zoneout` on GRU and SimpleRNN; 0 (the default) leaves the layer and its config
    exactly Keras'. Zoneout runs only on the fused kernel: a layer or call it cannot serve is an
    error, never Keras' loop without zoneout."""

    _zoneout_args = ()  # the layer's zoneout arguments, h's first

    def _init_zoneout(self, **rates):
        for name in self._zoneout_args:
            setattr(self, name, zoneout_rate(name, rates[name]))
        self._refuse_unzoned(self._static_fallback_reason())

    def _zoneout_rates(self):
        """(h's rate, c's rate): c's is 0 outside LSTM."""
        rates = [getattr(self, name, 0.0) for name in self._zoneout_args]
        return tuple(rates + [0.0] * (2 - len(rates)))

    def _refuse_unzoned(self, reason):
        """Raises when the layer zones and `reason` (a fallback's, or None) would run Keras' own
        loop, which has no zoneout."""
        if reason is not None and any(self._zoneout_rates()):
            raise ValueError(
                "%s %r: zoneout (%s) runs only on the fused kernel, which cannot serve %s"
                % (type(self).__name__, self.name, ", ".join(
                    "%s=%g" % (name, getattr(self, name)) for name in self._zoneout_args),
                   reason))

    def _zoneout_config(self):
        """The nonzero rates, for get_config (none: Keras' config)."""
        return {name: getattr(self, name) for name in self._zoneout_args
                if getattr(self, name, 0.0)}

    def _zoneout_weights(self, x, training, uniform):
        """The op's zoneout weights of h and c for the sequence x [B, T, I] (docs/cudnn_rnn.md
        §4.9), None where a rate is 0: while training, per step and element keep-new masks
        [B, T, H], 1 with probability 1 - rate (`uniform(shape)` draws them from the layer's
        generator); at inference the expectation, the scalar 1 - rate. `training` a tensor
        picks between the two in the graph."""
        shape = tf.concat([tf.shape(x)[:2], [self.units]], 0)
        weights = []
        for rate in self._zoneout_rates():
            if not rate:
                weights.append(None)
                continue
            expectation = tf.constant(1.0 - rate, x.dtype)
            if isinstance(training, (bool, int)) and not training:
                weights.append(expectation)
                continue
            masks = tf.cast(uniform(shape) >= rate, x.dtype)
            if not isinstance(training, (bool, int)):
                masks = tf.where(tf.cast(training, tf.bool), masks,
                                 tf.broadcast_to(expectation, tf.shape(masks)))
            weights.append(masks)
        return weights


def keras_rnn_loop(x, h0, c0, weights, mask, rnn_mode, go_backwards, return_sequences,
                   zero_output_for_mask, training=True, cell_attrs=None, input_masks=None,
                   recurrent_masks=None, zoneout_h=None, zoneout_c=None):
    """Keras' RNN loop over x [B, T, I] (inputs already dropped out) from h0 (and c0 for LSTM),
    on one KerasRNN op on `weights` (keras_weights'): masked_rnn_loop's results. `training` is the
    layer call's (is_inference); `cell_attrs` are keras_cell_attrs' (None: cuDNN's cell);
    input_masks / recurrent_masks the per-gate operand masks of Keras' recurrent dropout
    (operand_masks; None: none), the same at every step; zoneout_h / zoneout_c the zoneout
    weights of h and c (ZoneoutLayer._zoneout_weights; None: not zoned)."""
    lstm = rnn_mode == "lstm"
    kernel, recurrent_kernel, bias = weights

    def run(x, seq_lengths, zoneout):
        keras_inputs = dict(input_masks=input_masks, recurrent_masks=recurrent_masks,
                            zoneout_h_weights=zoneout[0], zoneout_c_weights=zoneout[1])
        none = tf.zeros([0], x.dtype)  # (the empty vector: none)
        out = library.op("KerasRNN")(
            **dict(cell_attrs or {}),
            **{name: none if v is None else tf.cast(v, x.dtype)
               for name, v in keras_inputs.items()},
            input=x,
            input_h=tf.expand_dims(h0, 1),  # [B, 1, H] (batch-major state label)
            input_c=tf.expand_dims(c0, 1) if lstm else tf.zeros([], x.dtype),
            kernel=kernel,
            recurrent_kernel=recurrent_kernel,
            bias=bias,
            sequence_lengths=seq_lengths,
            rnn_mode=rnn_mode,
            is_training=not is_inference(training),
            time_major=False,
        )
        h = tf.squeeze(out.output_h, 1)
        return out.output, [h, tf.squeeze(out.output_c, 1)] if lstm else [h]

    return masked_rnn_loop(x, mask, go_backwards, return_sequences, zero_output_for_mask, run,
                           [zoneout_h, zoneout_c])


def masked_rnn_loop(x, mask, go_backwards, return_sequences, zero_output_for_mask, run,
                    per_step_inputs=()):
    """Keras' RNN loop over x [B, T, I] on one fused op: (last_output [B, H], outputs [B, T, H] or
    [B, 1, H] without return_sequences, states), as Keras' backend.rnn defines them, masks of any
    pattern and go_backwards included. `mask` is a bool [B, T] step mask (step_mask) or None.
    run(x, seq_lengths, per_step_inputs) runs the op on the right-padded sequence it is given
    from the layer's initial state: (its outputs [B, T, H], its final states, h first).
    per_step_inputs: tensors that go with x's steps ([B, T, n]: zoneout's weights; rank 3), or
    anything else, passed through (a scalar weight, None).

    A masked step of Keras' loop leaves the states as they are, so the states evolve exactly as
    on the sequence of the unmasked steps alone: each row's unmasked steps are moved to its front,
    in order (a stable gather), and run as a right-padded sequence of `length` steps, which the
    op stops at. Keras' output at step t is then the output after the row's last unmasked step
    at or before t (zeros before the first one; zeros at masked steps with
    zero_output_for_mask): a second gather. Pre-padded, post-padded and masks with holes take
    this one path, with no data-dependent branch (docs/keras_layers.md §3)."""
    shape = tf.shape(x)
    batch, steps = shape[0], shape[1]
    per_step = list(per_step_inputs)
    by_step = [k for k, v in enumerate(per_step) if getattr(v, "shape", None) is not None
               and v.shape.rank == 3]
    if go_backwards:  # Keras processes, and returns outputs, in reversed time
        x = tf.reverse(x, [1])
        mask = None if mask is None else tf.reverse(mask, [1])
        for k in by_step:
            per_step[k] = tf.reverse(per_step[k], [1])
    if mask is None:
        seq_lengths = tf.fill([batch], steps)
    else:
        seq_lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        # Unmasked steps first, each group in time order (a stable sort of 0/1 keys).
        order = tf.argsort(tf.cast(tf.logical_not(mask), tf.int32), axis=1, stable=True)
        x = tf.gather(x, order, axis=1, batch_dims=1)
        for k in by_step:
            per_step[k] = tf.gather(per_step[k], order, axis=1, batch_dims=1)
    output, states = run(x, seq_lengths, per_step)
    h = states[0]
    if mask is None:
        last = h
        outputs = output if return_sequences else None
    else:
        # The final h is the output of the last unmasked step; a row with none outputs zeros.
        emitted = tf.expand_dims(seq_lengths > 0, 1)
        if zero_output_for_mask:
            emitted = tf.logical_and(emitted, mask[:, -1:])
        last = tf.where(emitted, h, tf.zeros_like(h))
        outputs = None
        if return_sequences:
            # rank[b, t]: the index, among row b's unmasked steps, of the last one at or before t.
            rank = tf.cumsum(tf.cast(mask, tf.int32), axis=1) - 1
            emitted = rank >= 0
            if zero_output_for_mask:
                emitted = tf.logical_and(emitted, mask)
            outputs = tf.gather(output, tf.maximum(rank, 0), axis=1, batch_dims=1)
            outputs = tf.where(tf.expand_dims(emitted, -1), outputs, tf.zeros_like(outputs))
    if outputs is None:
        outputs = tf.expand_dims(last, 1)
    return last, outputs, states
