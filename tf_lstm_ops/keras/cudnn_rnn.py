"""``CudnnRNN`` (and ``CudnnLSTM``, ``CudnnGRU``): the CudnnRNN op family as one multi-layer Keras
layer (``num_layers``, ``bidirectional``, ``dropout`` between layers, ``num_proj`` for LSTM) with an
opaque ``params`` weight in cuDNN's canonical packing and ``get_canonical_weights`` /
``set_canonical_weights``; ``params_size`` gives the length of that weight.
"""

import keras
import numpy as np
import tensorflow as tf

from tf_lstm_ops._fused_rnn import is_inference
from tf_lstm_ops._loader import library
from tf_lstm_ops.keras._common import (
    _Keras3Only,
    _as_input,
    _check_backend,
    _cudnn_rnn_v3,
    _read,
    _register,
    _right_padded_lengths,
)

_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


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


@_register
class CudnnRNN(_Keras3Only, keras.layers.Layer):
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
            lengths = _right_padded_lengths(mask, batch, steps, type(self).__name__)
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
            is_training=not is_inference(training),
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
