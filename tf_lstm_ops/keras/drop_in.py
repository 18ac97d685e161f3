"""Keras 3 layers on the tf_lstm_ops fused kernels (TensorFlow backend only).

    import keras
    import tf_lstm_ops.keras as tlk

    model = keras.Sequential([
        keras.Input((None, 16)),
        keras.layers.Masking(),
        tlk.LSTM(64, return_sequences=True),        # drop-in for keras.layers.LSTM
        keras.layers.Bidirectional(tlk.GRU(32)),    # drop-in for keras.layers.GRU
    ])

Layers:

- ``LSTM``, ``GRU``, ``SimpleRNN``: drop-in replacements for ``keras.layers.LSTM``,
  ``keras.layers.GRU(reset_after=True)`` and ``keras.layers.SimpleRNN``. They subclass Keras'
  layers and keep Keras' cell, so they have the same constructor arguments and defaults, the same
  weight variables (``kernel``, ``recurrent_kernel``, ``bias``; GRU bias ``[2, 3H]``), the same
  ``get_config`` and the same saved-weights structure: ``ours.set_weights(theirs.get_weights())``
  and ``ours.load_weights("keras_model.weights.h5")`` work. Every call runs one fused
  ``TfLstm>CudnnRNNV3`` op (forward and backward) on the sequence instead of Keras' per-step loop.
  What a fused kernel cannot do is a ``ValueError`` at construction: activations other than
  tanh/sigmoid (LSTM, GRU) or tanh/relu (SimpleRNN), ``recurrent_dropout != 0``,
  ``GRU(reset_after=False)``, ``use_cudnn=False``. A mask must be right-padded (per-example
  lengths); any other mask fails at run time with ``InvalidArgumentError``. Results, including the
  outputs at masked steps, equal Keras' own CPU layers.
- ``CudnnRNN`` (and ``CudnnLSTM``, ``CudnnGRU``): the CudnnRNN op family as one multi-layer layer
  (``num_layers``, ``bidirectional``, ``dropout`` between layers, ``num_proj`` for LSTM) with an
  opaque ``params`` weight in cuDNN's canonical packing and ``get_canonical_weights`` /
  ``set_canonical_weights``.
- ``LSTMBlockCell``: the ``LSTMBlockCell`` op as a cell for ``keras.layers.RNN`` (``forget_bias``,
  ``cell_clip``, peepholes).

Every layer sets ``supports_jit = False`` (custom ops have no XLA kernel; Keras would otherwise
jit-compile the model on GPU hosts), computes in the dtype policy's compute dtype (``float32``,
``mixed_float16``, ``mixed_bfloat16``; the kernels accumulate in float32), is registered with
``keras.saving.register_keras_serializable(package="tf_lstm_ops")`` and round-trips through
``.keras`` files (``import tf_lstm_ops.keras`` before ``keras.saving.load_model``) and
``tf.saved_model.save`` (``import tf_lstm_ops`` before ``tf.saved_model.load``: the graphs contain
the plugin's ``TfLstm>CudnnRNNV3`` ops).
"""

import keras
import numpy as np
import tensorflow as tf

from tf_lstm_ops._loader import library

__all__ = [
    "LSTM",
    "GRU",
    "SimpleRNN",
    "CudnnRNN",
    "CudnnLSTM",
    "CudnnGRU",
    "LSTMBlockCell",
    "params_size",
]

_PACKAGE = "tf_lstm_ops"
_register = keras.saving.register_keras_serializable(package=_PACKAGE)

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

def _check_backend(layer_name):
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(
            "tf_lstm_ops.keras.%s runs TensorFlow custom ops and needs Keras' TensorFlow backend, "
            "but Keras is using the %r backend. Set the environment variable "
            "KERAS_BACKEND=tensorflow before importing keras (or use keras.layers instead)."
            % (layer_name, backend)
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


def _read(variable, dtype):
    """A Keras variable (or tensor) as a tensor of `dtype` (the gradient reaches the variable)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return tf.cast(variable, dtype)


def _as_input(inputs, layer):
    """The layer's input as a tensor; integer and boolean inputs in the layer's compute dtype, as
    Keras' own layers compute them (their matmuls promote them to the weights' float dtype)."""
    x = tf.convert_to_tensor(inputs)
    if not x.dtype.is_floating:
        x = tf.cast(x, layer.compute_dtype)
    return x


def _flat_t(matrix):
    """[in, G*H] Keras kernel -> the G row-major [H, in] cuDNN matrices, concatenated."""
    return tf.reshape(tf.transpose(matrix), [-1])


def _right_padded_lengths(mask, layer_name):
    """Per-example lengths of a [B, T] mask, asserting that it is right-padded."""
    mask = tf.convert_to_tensor(mask)
    if mask.shape.rank == 3:
        mask = tf.squeeze(mask, -1)
    mask = tf.cast(mask, tf.bool)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
    right_padded = tf.reduce_all(
        tf.equal(mask, tf.sequence_mask(lengths, tf.shape(mask)[1]))
    )
    check = tf.debugging.Assert(
        right_padded,
        [
            "tf_lstm_ops.keras.%s: the mask is not right-padded. The fused kernel takes one "
            "length per example, so every row of the mask must be True for its first steps and "
            "False after them (sequences padded at the end). Left padding or masked steps in "
            "the middle of a sequence are not supported: pad at the end, or use the keras.layers "
            "layer for such masks." % layer_name
        ],
    )
    if check is not None:  # graph mode; eagerly Assert has already run
        with tf.control_dependencies([check]):
            lengths = tf.identity(lengths)
    return lengths


def _cudnn_rnn_v3(**kwargs):
    return library.op("CudnnRNNV3")(**kwargs)


def params_size(rnn_mode, num_layers, num_units, input_size, bidirectional=False, num_proj=0):
    """Number of elements of the cuDNN canonical params buffer (linear_input mode)."""
    G, D, H = _GATES[rnn_mode], 2 if bidirectional else 1, num_units
    P = num_proj or 0
    Hr = P if P else H
    total = 0
    for layer in range(num_layers):
        in_l = input_size if layer == 0 else D * Hr
        total += D * (G * H * (in_l + Hr) + P * H + 2 * G * H)
    return total


# ------------------------------------------------------------------------------------------------
# single-layer drop-in layers
# ------------------------------------------------------------------------------------------------

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
        # spec 5.5: W_g = kernel[:, g]^T, R_g = recurrent_kernel[:, g]^T, b_W = 0, b_R = bias.
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


# ------------------------------------------------------------------------------------------------
# multi-layer CudnnRNN layer
# ------------------------------------------------------------------------------------------------

@_register
class CudnnRNN(keras.layers.Layer):
    """The CudnnRNN op family as a Keras layer: ``num_layers`` stacked layers, uni- or
    bidirectional, dropout between layers, LSTM projection, in one ``TfLstm>CudnnRNNV3`` op.

    Args:
      units: cell size H of every layer.
      rnn_mode: "lstm", "gru" (cuDNN's reset-after GRU), "rnn_tanh" or "rnn_relu".
      num_layers: number of stacked layers L.
      bidirectional: run each layer in both directions (D = 2); a layer's output is the
        concatenation [forward, backward] and feeds the next layer.
      dropout: inverted dropout on the inputs of layers 1..L-1 while training.
      num_proj: LSTM only: project h to num_proj < units features (LSTMP); None = no projection.
      return_sequences: return the top layer's output at every step ([B, T, D * Hr], Hr = num_proj
        or units; zeros at masked steps, as cuDNN), else its final output: the top layer's final
        h, [forward, backward] concatenated for bidirectional (the backward direction's final
        step is t = 0), like ``keras.layers.Bidirectional`` of a layer with
        return_sequences=False.
      return_state: also return the final states h [L * D, B, Hr] (and c [L * D, B, H] for LSTM),
        pseudo-layer p = layer * D + direction, TF's CudnnLSTM state layout.
      time_major: inputs and outputs are [T, B, ...] instead of [B, T, ...].
      kernel_initializer, recurrent_initializer, bias_initializer: initialise the canonical
        weights as Keras initialises LSTM/GRU weights (per layer and direction: input matrix
        [in, G * H], recurrent matrix [Hr, G * H], projection [H, P] from kernel_initializer);
        input biases b_W start at 0 for LSTM and RNN and at bias_initializer for GRU, recurrent
        biases b_R at bias_initializer.
      unit_forget_bias: LSTM only: start the forget gate's recurrent bias at 1.
      seed: dropout seed (the kernel's seed / seed2 attrs).

    Call arguments: ``inputs``, ``initial_state`` (``[h]`` or ``[h, c]`` in the state layout above;
    zeros when None), ``mask`` ([B, T], right-padded: per-example lengths), ``training``.

    Weights: one float ``params`` vector of ``params_size(...)`` elements in cuDNN's canonical
    packing (the buffer TF-GPU's CudnnRNN ops use). ``get_canonical_weights()`` /
    ``set_canonical_weights(weights, biases)`` convert with the ``CudnnRNNParamsToCanonicalV2`` /
    ``CudnnRNNCanonicalToParamsV2`` ops: for pseudo-layers p = layer * D + direction ascending,
    weights W_0..W_{G-1} [H, in_l], R_0..R_{G-1} [H, Hr] (then the projection [P, H]); biases
    b_W0..b_W{G-1}, b_R0..b_R{G-1} [H]. Gate order: LSTM i, f, c, o; GRU r, z, h.
    """

    def __init__(
        self,
        units,
        rnn_mode="lstm",
        num_layers=1,
        bidirectional=False,
        dropout=0.0,
        num_proj=None,
        return_sequences=False,
        return_state=False,
        time_major=False,
        kernel_initializer="glorot_uniform",
        recurrent_initializer="orthogonal",
        bias_initializer="zeros",
        unit_forget_bias=True,
        seed=None,
        **kwargs,
    ):
        layer_name = type(self).__name__
        _check_backend(layer_name)
        super().__init__(**kwargs)
        if rnn_mode not in _GATES:
            raise ValueError("tf_lstm_ops.keras.%s: rnn_mode must be one of %s, got %r"
                             % (layer_name, sorted(_GATES), rnn_mode))
        if int(units) <= 0 or int(num_layers) <= 0:
            raise ValueError("tf_lstm_ops.keras.%s: units and num_layers must be positive, got "
                             "units=%r, num_layers=%r" % (layer_name, units, num_layers))
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError("tf_lstm_ops.keras.%s: dropout must be in [0, 1), got %r"
                             % (layer_name, dropout))
        if num_proj is not None and (rnn_mode != "lstm" or not 0 < int(num_proj) < int(units)):
            raise ValueError(
                "tf_lstm_ops.keras.%s: num_proj=%r: a projection needs rnn_mode='lstm' and "
                "0 < num_proj < units (units=%r); use num_proj=None for none"
                % (layer_name, num_proj, units)
            )
        self.units = int(units)
        self.rnn_mode = rnn_mode
        self.num_layers = int(num_layers)
        self.bidirectional = bool(bidirectional)
        self.dropout = float(dropout)
        self.num_proj = None if num_proj is None else int(num_proj)
        self.return_sequences = return_sequences
        self.return_state = return_state
        self.time_major = time_major
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.recurrent_initializer = keras.initializers.get(recurrent_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.unit_forget_bias = unit_forget_bias
        self.seed = seed
        self.supports_masking = True
        self.supports_jit = False
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.input_size = None

    # -- sizes -----------------------------------------------------------------------------------
    @property
    def num_dirs(self):
        return 2 if self.bidirectional else 1

    @property
    def output_units(self):
        """Hr: the size of h (num_proj with a projection, else units)."""
        return self.num_proj or self.units

    @property
    def _direction(self):
        return "bidirectional" if self.bidirectional else "unidirectional"

    def _op_attrs(self):
        seed = 0 if self.seed is None else int(self.seed)
        return dict(rnn_mode=self.rnn_mode, input_mode="linear_input", direction=self._direction,
                    seed=seed, seed2=(seed * 7919 + 17) % (2 ** 31) if seed else 0,
                    num_proj=self.num_proj or 0)

    def _counts(self):
        G, LD = _GATES[self.rnn_mode], self.num_layers * self.num_dirs
        return LD * (2 * G + (1 if self.num_proj else 0)), LD * 2 * G

    def canonical_shapes(self):
        """(weight shapes, bias shapes) of get_canonical_weights(), in canonical order."""
        if self.input_size is None:
            raise ValueError("%s is not built yet: call it or build(input_shape) first"
                             % self.name)
        G, H, Hr, D = _GATES[self.rnn_mode], self.units, self.output_units, self.num_dirs
        weights, biases = [], []
        for layer in range(self.num_layers):
            in_l = self.input_size if layer == 0 else D * Hr
            for _ in range(D):
                weights += [(H, in_l)] * G + [(H, Hr)] * G
                if self.num_proj:
                    weights.append((self.num_proj, H))
                biases += [(H,)] * (2 * G)
        return weights, biases

    # -- weights ---------------------------------------------------------------------------------
    def build(self, input_shape):
        input_size = input_shape[-1]
        if input_size is None:
            raise ValueError("%s needs a known feature size (last axis), got input shape %s"
                             % (self.name, input_shape))
        self.input_size = int(input_size)
        size = params_size(self.rnn_mode, self.num_layers, self.units, self.input_size,
                           self.bidirectional, self.num_proj or 0)
        self.params = self.add_weight(shape=(size,), name="params",
                                      initializer=self._initial_params)

    def _initial_params(self, shape, dtype=None):
        dtype = tf.as_dtype(dtype or self.variable_dtype)
        G, H, Hr, D = _GATES[self.rnn_mode], self.units, self.output_units, self.num_dirs
        weights, biases = [], []
        for layer in range(self.num_layers):
            in_l = self.input_size if layer == 0 else D * Hr
            for _ in range(D):
                kernel = self.kernel_initializer((in_l, G * H), dtype=dtype)
                recurrent = self.recurrent_initializer((Hr, G * H), dtype=dtype)
                weights += [tf.transpose(k) for k in tf.split(kernel, G, axis=1)]
                weights += [tf.transpose(r) for r in tf.split(recurrent, G, axis=1)]
                if self.num_proj:
                    weights.append(tf.transpose(self.kernel_initializer((H, Hr), dtype=dtype)))
                b_r = tf.split(tf.reshape(self.bias_initializer((G * H,), dtype=dtype), [-1]), G)
                if self.rnn_mode == "lstm" and self.unit_forget_bias:
                    b_r[1] = tf.ones([H], dtype)
                if self.rnn_mode == "gru":
                    b_w = tf.split(tf.reshape(self.bias_initializer((G * H,), dtype=dtype), [-1]),
                                   G)
                else:
                    b_w = [tf.zeros([H], dtype)] * G
                biases += list(b_w) + list(b_r)
        params = self._canonical_to_params(weights, biases, dtype)
        return tf.reshape(params, shape)

    def _canonical_to_params(self, weights, biases, dtype):
        return library.op("CudnnRNNCanonicalToParamsV2")(
            num_layers=tf.constant(self.num_layers, tf.int32),
            num_units=tf.constant(self.units, tf.int32),
            input_size=tf.constant(self.input_size, tf.int32),
            weights=[tf.cast(w, dtype) for w in weights],
            biases=[tf.cast(b, dtype) for b in biases],
            **self._op_attrs(),
        )

    def get_canonical_weights(self):
        """(weights, biases): lists of NumPy arrays in canonical order (see the class doc), read
        from ``params`` with the CudnnRNNParamsToCanonicalV2 op."""
        self.canonical_shapes()  # raises when not built
        n_weights, n_biases = self._counts()
        weights, biases = library.op("CudnnRNNParamsToCanonicalV2")(
            num_layers=tf.constant(self.num_layers, tf.int32),
            num_units=tf.constant(self.units, tf.int32),
            input_size=tf.constant(self.input_size, tf.int32),
            params=tf.convert_to_tensor(self.params.value),
            num_params_weights=n_weights,
            num_params_biases=n_biases,
            **self._op_attrs(),
        )
        return [np.asarray(w) for w in weights], [np.asarray(b) for b in biases]

    def set_canonical_weights(self, weights, biases):
        """Sets ``params`` from canonical weights and biases (shapes as canonical_shapes()),
        packed with the CudnnRNNCanonicalToParamsV2 op."""
        w_shapes, b_shapes = self.canonical_shapes()
        got_w = [tuple(np.shape(w)) for w in weights]
        got_b = [tuple(np.shape(b)) for b in biases]
        if got_w != w_shapes or got_b != b_shapes:
            raise ValueError(
                "%s.set_canonical_weights: expected weight shapes %s and bias shapes %s, got %s "
                "and %s" % (self.name, w_shapes, b_shapes, got_w, got_b)
            )
        dtype = tf.as_dtype(self.params.dtype)
        self.params.assign(self._canonical_to_params(weights, biases, dtype))

    # -- call ------------------------------------------------------------------------------------
    def call(self, inputs, initial_state=None, mask=None, training=False):
        x = _as_input(inputs, self)
        dtype = x.dtype
        batch_axis, time_axis = (1, 0) if self.time_major else (0, 1)
        batch = tf.shape(x)[batch_axis]
        steps = tf.shape(x)[time_axis]
        LD, H, Hr = self.num_layers * self.num_dirs, self.units, self.output_units
        lstm = self.rnn_mode == "lstm"
        if initial_state is None:
            h0 = tf.zeros(tf.stack([LD, batch, Hr]), dtype)
            c0 = tf.zeros(tf.stack([LD, batch, H]), dtype) if lstm else None
        else:
            if not keras.tree.is_nested(initial_state):
                initial_state = [initial_state]
            if len(initial_state) != (2 if lstm else 1):
                raise ValueError("%s: initial_state must be %s, got %d tensors"
                                 % (self.name, "[h, c]" if lstm else "[h]", len(initial_state)))
            h0 = tf.cast(initial_state[0], dtype)
            c0 = tf.cast(initial_state[1], dtype) if lstm else None
        if mask is not None:
            if keras.tree.is_nested(mask):
                mask = mask[0]
            mask = tf.convert_to_tensor(mask)
            if self.time_major:
                mask = tf.transpose(mask)
            lengths = _right_padded_lengths(mask, type(self).__name__)
        else:
            lengths = tf.fill([batch], steps)

        def state_in(s, n):
            # batch-major ops label states [B, L*D, n] but read their memory as [L*D, B, n]
            return s if self.time_major else tf.reshape(s, tf.stack([batch, LD, n]))

        def state_out(s, n):
            return s if self.time_major else tf.reshape(s, tf.stack([LD, batch, n]))

        out = _cudnn_rnn_v3(
            input=x,
            input_h=state_in(h0, Hr),
            input_c=state_in(c0, H) if lstm else tf.zeros([], dtype),
            params=_read(self.params, dtype),
            sequence_lengths=lengths,
            dropout=self.dropout if training else 0.0,
            is_training=True,
            time_major=self.time_major,
            **self._op_attrs(),
        )
        h = state_out(out.output_h, Hr)
        states = [h, state_out(out.output_c, H)] if lstm else [h]
        if self.return_sequences:
            output = out.output
        elif self.bidirectional:
            output = tf.concat([h[-2], h[-1]], axis=-1)
        else:
            output = h[-1]
        if self.return_state:
            return [output] + states
        return output

    def compute_output_shape(self, inputs_shape, initial_state_shape=None):
        batch_axis, time_axis = (1, 0) if self.time_major else (0, 1)
        batch, steps = inputs_shape[batch_axis], inputs_shape[time_axis]
        width = self.num_dirs * self.output_units
        if self.return_sequences:
            shape = (steps, batch, width) if self.time_major else (batch, steps, width)
        else:
            shape = (batch, width)
        if not self.return_state:
            return shape
        LD = self.num_layers * self.num_dirs
        states = [(LD, batch, self.output_units)]
        if self.rnn_mode == "lstm":
            states.append((LD, batch, self.units))
        return [shape] + states

    def compute_mask(self, inputs, mask=None):
        if keras.tree.is_nested(mask):
            mask = mask[0]
        output_mask = mask if self.return_sequences else None
        if self.return_state:
            return [output_mask] + [None] * (2 if self.rnn_mode == "lstm" else 1)
        return output_mask

    def get_config(self):
        config = {
            "units": self.units,
            "rnn_mode": self.rnn_mode,
            "num_layers": self.num_layers,
            "bidirectional": self.bidirectional,
            "dropout": self.dropout,
            "num_proj": self.num_proj,
            "return_sequences": self.return_sequences,
            "return_state": self.return_state,
            "time_major": self.time_major,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "recurrent_initializer": keras.initializers.serialize(self.recurrent_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "unit_forget_bias": self.unit_forget_bias,
            "seed": self.seed,
        }
        return {**super().get_config(), **config}


@_register
class CudnnLSTM(CudnnRNN):
    """``CudnnRNN(rnn_mode="lstm")``: multi-layer (bidirectional, projected) LSTM. Gate order of
    the canonical weights: i, f, c, o."""

    def __init__(self, units, **kwargs):
        kwargs.pop("rnn_mode", None)
        super().__init__(units, rnn_mode="lstm", **kwargs)

    def get_config(self):
        config = super().get_config()
        del config["rnn_mode"]
        return config


@_register
class CudnnGRU(CudnnRNN):
    """``CudnnRNN(rnn_mode="gru")``: multi-layer (bidirectional) cuDNN GRU (Keras'
    reset_after=True GRU). Gate order of the canonical weights: r, z, h."""

    def __init__(self, units, **kwargs):
        kwargs.pop("rnn_mode", None)
        for arg in ("num_proj", "unit_forget_bias"):
            if kwargs.pop(arg, None):
                raise ValueError("tf_lstm_ops.keras.CudnnGRU: %s is an LSTM-only argument" % arg)
        super().__init__(units, rnn_mode="gru", **kwargs)

    def get_config(self):
        config = super().get_config()
        for key in ("rnn_mode", "num_proj", "unit_forget_bias"):
            del config[key]
        return config


# ------------------------------------------------------------------------------------------------
# LSTMBlockCell as a Keras RNN cell
# ------------------------------------------------------------------------------------------------

@_register
class LSTMBlockCell(keras.layers.Layer):
    """The ``LSTMBlockCell`` op (one fused LSTM step) as a cell for ``keras.layers.RNN``.

    Args:
      units: cell size H.
      forget_bias: added to the forget gate's pre-activation (default 1, like TF's LSTMBlockCell).
      cell_clip: clip the cell state to [-cell_clip, cell_clip]; None (default) = no clipping.
      use_peephole: diagonal peephole connections (weights ``w_i_diag``, ``w_f_diag``,
        ``w_o_diag`` [H]).
      kernel_initializer, bias_initializer, peephole_initializer, kernel_regularizer,
      bias_regularizer, kernel_constraint, bias_constraint: as for Keras layers.

    Weights (TF's LSTMBlockCell layout): ``kernel [I + H, 4H]`` (rows [0, I) multiply x, the rest
    h), ``bias [4H]``, gate blocks in ICFO order (input, cell input, forget, output). States are
    ``[h, c]`` (Keras' LSTMCell order); the output is h.
    """

    def __init__(
        self,
        units,
        forget_bias=1.0,
        cell_clip=None,
        use_peephole=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        peephole_initializer="glorot_uniform",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        _check_backend("LSTMBlockCell")
        super().__init__(**kwargs)
        if int(units) <= 0:
            raise ValueError("tf_lstm_ops.keras.LSTMBlockCell: units must be positive, got %r"
                             % (units,))
        self.units = int(units)
        self.forget_bias = float(forget_bias)
        self.cell_clip = None if cell_clip is None else float(cell_clip)
        self.use_peephole = bool(use_peephole)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.peephole_initializer = keras.initializers.get(peephole_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.state_size = [self.units, self.units]
        self.output_size = self.units
        self.supports_jit = False

    def build(self, input_shape):
        H = self.units
        self.kernel = self.add_weight(
            shape=(input_shape[-1] + H, 4 * H), name="kernel",
            initializer=self.kernel_initializer, regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            shape=(4 * H,), name="bias", initializer=self.bias_initializer,
            regularizer=self.bias_regularizer, constraint=self.bias_constraint,
        )
        if self.use_peephole:
            self.w_i_diag, self.w_f_diag, self.w_o_diag = (
                self.add_weight(shape=(H,), name=name, initializer=self.peephole_initializer)
                for name in ("w_i_diag", "w_f_diag", "w_o_diag")
            )

    def call(self, inputs, states, training=False):
        x = _as_input(inputs, self)
        dtype = x.dtype
        h_prev, c_prev = (tf.cast(s, dtype) for s in states[:2])
        if self.use_peephole:
            peepholes = [_read(w, dtype) for w in (self.w_i_diag, self.w_f_diag, self.w_o_diag)]
        else:
            peepholes = [tf.zeros([self.units], dtype)] * 3
        out = library.op("LSTMBlockCell")(
            x=x, cs_prev=c_prev, h_prev=h_prev, w=_read(self.kernel, dtype),
            wci=peepholes[0], wcf=peepholes[1], wco=peepholes[2], b=_read(self.bias, dtype),
            forget_bias=self.forget_bias,
            cell_clip=self.cell_clip if self.cell_clip is not None else -1.0,
            use_peephole=self.use_peephole,
        )
        return out.h, [out.h, out.cs]

    def get_initial_state(self, batch_size=None):
        return [tf.zeros(tf.stack([batch_size, self.units]), self.compute_dtype)
                for _ in range(2)]

    def get_config(self):
        config = {
            "units": self.units,
            "forget_bias": self.forget_bias,
            "cell_clip": self.cell_clip,
            "use_peephole": self.use_peephole,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "peephole_initializer": keras.initializers.serialize(self.peephole_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        }
        return {**super().get_config(), **config}
