"""``LSTM``, ``GRU``, ``SimpleRNN``: drop-in replacements for ``keras.layers.LSTM``,
``keras.layers.GRU(reset_after=True)`` and ``keras.layers.SimpleRNN`` that run one fused
``TfLstm>CudnnRNNV3`` op (forward and backward) on the sequence instead of Keras' per-step loop.

They subclass Keras' layers and keep Keras' cell, so they have the same constructor arguments and
defaults, the same weight variables and the same ``get_config``; each layer converts its cell's
``kernel``, ``recurrent_kernel`` and ``bias`` to the op's cuDNN params buffer at every call. What
the fused kernel cannot do is a ``ValueError`` at construction (the checks below); a mask that is
not right-padded fails at run time with ``InvalidArgumentError``.
"""

import keras
import tensorflow as tf

from tf_lstm_ops.keras._common import (
    _as_input,
    _check_backend,
    _cudnn_rnn_v3,
    _read,
    _register,
    _right_padded_lengths,
)


def _functions(*names):
    """The function objects Keras and TF use for an activation (keras.activations.get(name),
    keras.ops.<name>, tf.<name>, tf.nn.<name>, tf.math.<name>)."""
    found = set()
    for name in names:
        found.add(keras.activations.get(name))
        for module in (keras.ops, tf, tf.nn, tf.math):
            fn = getattr(module, name, None)
            if fn is not None:
                found.add(fn)
    return found


_TANH = _functions("tanh")
_SIGMOID = _functions("sigmoid")
_RELU = _functions("relu")


def _activation_name(activation):
    fn = keras.activations.get(activation)
    for name, group in (("tanh", _TANH), ("sigmoid", _SIGMOID), ("relu", _RELU)):
        if fn in group:
            return name
    return None


def _require_activation(layer_name, arg, value, allowed, fallback):
    name = _activation_name(value)
    if name not in allowed:
        raise ValueError(
            "tf_lstm_ops.keras.%s: %s=%r is not supported: the fused kernel implements %s only. "
            "Use %s for other activations."
            % (layer_name, arg, value, " or ".join(repr(a) for a in allowed), fallback)
        )
    return name


def _require_fusable(layer_name, recurrent_dropout, use_cudnn, fallback):
    if recurrent_dropout:
        raise ValueError(
            "tf_lstm_ops.keras.%s: recurrent_dropout=%r cannot be fused (the kernel runs the whole "
            "sequence in one op; a dropout mask on the recurrent state would have to be applied "
            "inside every step). Use dropout= (on the inputs) or %s."
            % (layer_name, recurrent_dropout, fallback)
        )
    if use_cudnn not in ("auto", True):
        raise ValueError(
            "tf_lstm_ops.keras.%s always runs the fused kernel; use_cudnn=%r asks for Keras' "
            "per-step loop: use %s for that." % (layer_name, use_cudnn, fallback)
        )


def _flat_t(matrix):
    """[in, G*H] Keras kernel -> the G row-major [H, in] cuDNN matrices, concatenated."""
    return tf.reshape(tf.transpose(matrix), [-1])


class _FusedRNNMixin:
    """inner_loop for Keras' RNN subclasses: one CudnnRNNV3 op over the whole sequence, returning
    exactly what Keras' generic backend.rnn loop returns (its (last_output, outputs, states))."""

    _rnn_mode = None

    def _params(self, dtype):
        raise NotImplementedError

    def _fused_inner_loop(self, sequences, initial_state, mask, training):
        if keras.tree.is_nested(mask):
            mask = mask[0]
        if not keras.tree.is_nested(initial_state):
            initial_state = [initial_state]
        name = type(self).__name__
        x = _as_input(sequences, self)
        dtype = x.dtype
        if training and self.cell.dropout:
            # The same input dropout mask at every step, as Keras' cell does (RNN.call has already
            # drawn it from the cell's seed generator).
            dp_mask = self.cell.get_dropout_mask(x[:, 0, :])
            x = x * tf.expand_dims(tf.cast(dp_mask, dtype), 1)
        shape = tf.shape(x)
        batch, steps = shape[0], shape[1]
        lengths = None if mask is None else _right_padded_lengths(mask, name)
        seq_lengths = tf.fill([batch], steps) if lengths is None else lengths
        if self.go_backwards:
            x = (tf.reverse(x, [1]) if lengths is None
                 else tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0))
        lstm = self._rnn_mode == "lstm"
        h0 = tf.cast(initial_state[0], dtype)
        c0 = tf.cast(initial_state[1], dtype) if lstm else tf.zeros([], dtype)
        out = _cudnn_rnn_v3(
            input=x,
            input_h=tf.expand_dims(h0, 1),  # [B, 1, H] (batch-major state label)
            input_c=tf.expand_dims(c0, 1) if lstm else c0,
            params=self._params(dtype),
            sequence_lengths=seq_lengths,
            rnn_mode=self._rnn_mode,
            is_training=True,
            time_major=False,
        )
        h = tf.squeeze(out.output_h, 1)
        states = [h, tf.squeeze(out.output_c, 1)] if lstm else [h]
        if lengths is None:
            last = h
            outputs = out.output if self.return_sequences else None
        else:
            # Keras' loop: a masked step keeps the states and outputs the previous step's output
            # (zeros before the first valid step), or zeros with zero_output_for_mask. The kernel
            # outputs zeros at t >= length; the final h is the output of the last valid step.
            valid = tf.expand_dims(lengths > 0, 1)
            zero = tf.zeros_like(h)
            if self.go_backwards:
                # processing order: the T - length masked steps come first (zeros), then the
                # valid steps in reverse; the last processed step is valid iff length > 0.
                last = tf.where(valid, h, zero)
                outputs = None
                if self.return_sequences:
                    outputs = tf.reverse(
                        tf.reverse_sequence(out.output, lengths, seq_axis=1, batch_axis=0), [1]
                    )
            elif self.zero_output_for_mask:
                last = tf.where(tf.expand_dims(tf.equal(lengths, steps), 1), h, zero)
                outputs = out.output if self.return_sequences else None
            else:
                last = tf.where(valid, h, zero)
                outputs = None
                if self.return_sequences:
                    keep = tf.expand_dims(tf.sequence_mask(lengths, steps), -1)
                    outputs = tf.where(keep, out.output, tf.expand_dims(last, 1))
        if outputs is None:
            outputs = tf.expand_dims(last, 1)
        return last, outputs, states


@_register
class LSTM(_FusedRNNMixin, keras.layers.LSTM):
    """Drop-in ``keras.layers.LSTM`` running the fused ``TfLstm>CudnnRNNV3`` kernel.

    Same arguments, defaults, weights (``kernel [I, 4H]``, ``recurrent_kernel [H, 4H]``,
    ``bias [4H]``, gates i, f, c, o) and results as ``keras.layers.LSTM``. Differences:
    ``activation`` must be tanh and ``recurrent_activation`` sigmoid, ``recurrent_dropout`` must be
    0 and ``use_cudnn`` must be "auto"/True (else ``ValueError``); masks must be right-padded
    (else ``InvalidArgumentError`` at run time); ``unroll`` has no effect. ``use_bias=False`` is
    supported (zero biases).
    """

    _rnn_mode = "lstm"

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias=True,
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        seed=None,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        use_cudnn="auto",
        **kwargs,
    ):
        _check_backend("LSTM")
        _require_activation("LSTM", "activation", activation, ("tanh",), "keras.layers.LSTM")
        _require_activation("LSTM", "recurrent_activation", recurrent_activation, ("sigmoid",),
                            "keras.layers.LSTM")
        _require_fusable("LSTM", recurrent_dropout, use_cudnn, "keras.layers.LSTM")
        super().__init__(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            unit_forget_bias=unit_forget_bias,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            use_cudnn=use_cudnn,
            **kwargs,
        )
        self.supports_jit = False  # the custom op has no XLA kernel

    def _params(self, dtype):
        cell = self.cell
        kernel = _read(cell.kernel, dtype)
        recurrent = _read(cell.recurrent_kernel, dtype)
        if cell.use_bias:
            bias = _read(cell.bias, dtype)
        else:
            bias = tf.zeros([4 * cell.units], dtype)
        # docs/cudnn_rnn.md §6.5: W_g = kernel[:, g]^T, R_g = recurrent_kernel[:, g]^T, b_W = 0,
        # b_R = bias.
        return tf.concat([_flat_t(kernel), _flat_t(recurrent), tf.zeros_like(bias), bias], 0)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        return self._fused_inner_loop(sequences, initial_state, mask, training)


@_register
class GRU(_FusedRNNMixin, keras.layers.GRU):
    """Drop-in ``keras.layers.GRU(reset_after=True)`` running the fused ``TfLstm>CudnnRNNV3``
    kernel (cuDNN's GRU is Keras' "reset after" GRU).

    Same arguments, defaults, weights (``kernel [I, 3H]``, ``recurrent_kernel [H, 3H]``,
    ``bias [2, 3H]``, gates z, r, h) and results as ``keras.layers.GRU``. Differences:
    ``reset_after`` must be True, ``activation`` tanh, ``recurrent_activation`` sigmoid,
    ``recurrent_dropout`` 0 and ``use_cudnn`` "auto"/True (else ``ValueError``); masks must be
    right-padded; ``unroll`` has no effect. ``use_bias=False`` is supported.
    """

    _rnn_mode = "gru"

    def __init__(
        self,
        units,
        activation="tanh",
        recurrent_activation="sigmoid",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        seed=None,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        reset_after=True,
        use_cudnn="auto",
        **kwargs,
    ):
        _check_backend("GRU")
        if not reset_after:
            raise ValueError(
                "tf_lstm_ops.keras.GRU: reset_after=False is not supported: the fused kernel is "
                "cuDNN's GRU, which applies the reset gate after the recurrent matmul "
                "(reset_after=True, Keras' default). Use keras.layers.GRU(reset_after=False)."
            )
        _require_activation("GRU", "activation", activation, ("tanh",), "keras.layers.GRU")
        _require_activation("GRU", "recurrent_activation", recurrent_activation, ("sigmoid",),
                            "keras.layers.GRU")
        _require_fusable("GRU", recurrent_dropout, use_cudnn, "keras.layers.GRU")
        super().__init__(
            units,
            activation=activation,
            recurrent_activation=recurrent_activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            seed=seed,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            reset_after=reset_after,
            use_cudnn=use_cudnn,
            **kwargs,
        )
        self.supports_jit = False  # the custom op has no XLA kernel

    def _params(self, dtype):
        cell = self.cell
        H = cell.units

        def to_cudnn_order(m):  # Keras gate blocks z, r, h -> cuDNN r, z, h (last axis)
            return tf.concat([m[..., H:2 * H], m[..., :H], m[..., 2 * H:]], -1)

        kernel = to_cudnn_order(_read(cell.kernel, dtype))
        recurrent = to_cudnn_order(_read(cell.recurrent_kernel, dtype))
        if cell.use_bias:
            bias = tf.reshape(to_cudnn_order(_read(cell.bias, dtype)), [-1])  # b_W, then b_R
        else:
            bias = tf.zeros([6 * H], dtype)
        return tf.concat([_flat_t(kernel), _flat_t(recurrent), bias], 0)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        return self._fused_inner_loop(sequences, initial_state, mask, training)


@_register
class SimpleRNN(_FusedRNNMixin, keras.layers.SimpleRNN):
    """Drop-in ``keras.layers.SimpleRNN`` running the fused ``TfLstm>CudnnRNNV3`` kernel
    (``rnn_tanh`` or ``rnn_relu``).

    Same arguments, defaults, weights (``kernel [I, H]``, ``recurrent_kernel [H, H]``,
    ``bias [H]``) and results as ``keras.layers.SimpleRNN``. Differences: ``activation`` must be
    tanh or relu and ``recurrent_dropout`` 0 (else ``ValueError``); masks must be right-padded;
    ``unroll`` has no effect.
    """

    def __init__(
        self,
        units,
        activation="tanh",
        use_bias=True,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        kernel_regularizer=None,
        recurrent_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        recurrent_constraint=None,
        bias_constraint=None,
        dropout=0.0,
        recurrent_dropout=0.0,
        return_sequences=False,
        return_state=False,
        go_backwards=False,
        stateful=False,
        unroll=False,
        seed=None,
        **kwargs,
    ):
        _check_backend("SimpleRNN")
        name = _require_activation("SimpleRNN", "activation", activation, ("tanh", "relu"),
                                   "keras.layers.SimpleRNN")
        _require_fusable("SimpleRNN", recurrent_dropout, "auto", "keras.layers.SimpleRNN")
        super().__init__(
            units,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            recurrent_initializer=recurrent_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            recurrent_regularizer=recurrent_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            recurrent_constraint=recurrent_constraint,
            bias_constraint=bias_constraint,
            dropout=dropout,
            recurrent_dropout=recurrent_dropout,
            return_sequences=return_sequences,
            return_state=return_state,
            go_backwards=go_backwards,
            stateful=stateful,
            unroll=unroll,
            seed=seed,
            **kwargs,
        )
        self._rnn_mode = "rnn_" + name
        self.supports_jit = False  # the custom op has no XLA kernel

    def _params(self, dtype):
        cell = self.cell
        kernel = _read(cell.kernel, dtype)
        recurrent = _read(cell.recurrent_kernel, dtype)
        if cell.use_bias:
            bias = _read(cell.bias, dtype)
        else:
            bias = tf.zeros([cell.units], dtype)
        return tf.concat([_flat_t(kernel), _flat_t(recurrent), tf.zeros_like(bias), bias], 0)

    def inner_loop(self, sequences, initial_state, mask, training=False):
        return self._fused_inner_loop(sequences, initial_state, mask, training)
