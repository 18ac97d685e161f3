"""What the benchmark runs: the case space (families, dtypes, phases), a Case's pre-made inputs,
and the contenders, each a builder that returns one callable per phase it times (Skip when it
cannot run a case)."""

import functools
import math

from tf_lstm_ops.bench._common import _first_line, _force, _function

DTYPES = ("float32", "bfloat16", "half", "float64")
FAMILIES = ("lstm", "gru")
PHASES = ("fwd", "bwd", "fwd+bwd")
HVP_PHASE = "hvp"  # one Hessian-vector product w.r.t. the weights (--hvp)
INFERENCE_PHASE = "inf"  # the forward of inference, training=False (--inference)
# The phase that is one whole step of its mode (training, HVP, inference): what --memory measures
# and --plot labels with the speedup.
STEP_PHASES = ("fwd+bwd", HVP_PHASE, INFERENCE_PHASE)
GATES = {"lstm": 4, "gru": 3}


class Skip(Exception):
    """A contender that cannot run a case (unsupported dtype, missing package); the message is the
    note printed under the table."""


class Contender:
    def __init__(self, key, family, name, phases, build, ours=False, dtypes=DTYPES, needs=None,
                 opt_in=False):
        self.key, self.family, self.name = key, family, name
        self.phases, self.build, self.ours = phases, build, ours
        self.dtypes, self.needs = dtypes, needs  # needs: "torch" or "ours_keras"
        self.opt_in = opt_in  # runs only when named (--contenders, --hvp, --inference)


class Case:
    """One (family, dtype, shape) with its pre-made inputs (built lazily, shared by contenders)."""

    def __init__(self, family, dtype, shape, threads, torch_module=None, seed=0):
        self.family, self.dtype, self.shape = family, dtype, tuple(shape)
        self.T, self.B, self.I, self.H = shape
        self.G = GATES[family]
        self.threads, self.torch = threads, torch_module
        self._seed, self._np, self._tf = seed, {}, {}
        self.notes = []  # what a contender's build found worth a note (the TFLite model's ops)

    @property
    def label(self):
        return "%s %s (%s)" % (self.family, self.dtype, ",".join(map(str, self.shape)))

    @property
    def fwd_flop(self):
        return 2 * self.G * self.B * self.H * (self.I + self.H) * self.T

    def flop(self, phase):
        # an HVP is counted as two fwd+bwd steps (the step and its tangent)
        return {"fwd": 1, "bwd": 2, "fwd+bwd": 3, HVP_PHASE: 6, INFERENCE_PHASE: 1}[phase] * \
            self.fwd_flop

    def array(self, name):
        """float32 NumPy inputs: x [T,B,I], dy [T,B,H], w [I+H, G*H], b [G*H], params (cuDNN)."""
        import numpy as np

        if name not in self._np:
            rng = np.random.default_rng(self._seed + sum(map(ord, name)))
            T, B, I, H, G = self.T, self.B, self.I, self.H, self.G
            scale = 1.0 / math.sqrt(H)
            shapes = {"x": (T, B, I), "dy": (T, B, H), "w": (I + H, G * H), "b": (G * H,),
                      "params": (G * H * (I + H) + 2 * G * H,)}
            if name in ("x", "dy"):
                value = rng.standard_normal(shapes[name])
            else:
                value = rng.uniform(-scale, scale, shapes[name])
            self._np[name] = value.astype(np.float32)
        return self._np[name]

    def tensor(self, name):
        """TF tensors in the case dtype: the arrays above, x_bm / dy_bm (batch-major), zeros_bh
        [B,H], zeros_h [H], zeros_1bh [1,B,H], the int64 T and int32 lengths [B]."""
        import tensorflow as tf

        if name not in self._tf:
            dtype = tf_dtype(self.dtype)
            if name == "zeros_bh":
                value = tf.zeros([self.B, self.H], dtype)
            elif name == "zeros_h":
                value = tf.zeros([self.H], dtype)
            elif name == "zeros_1bh":
                value = tf.zeros([1, self.B, self.H], dtype)
            elif name == "seq_len_max":
                value = tf.constant(self.T, tf.int64)
            elif name == "lengths":
                value = tf.fill([self.B], tf.constant(self.T, tf.int32))
            elif name.endswith("_bm"):
                value = tf.transpose(self.tensor(name[:-3]), [1, 0, 2])
            else:
                value = tf.cast(tf.constant(self.array(name)), dtype)
            self._tf[name] = value
        return self._tf[name]


def tf_dtype(name):
    import tensorflow as tf

    return {"float32": tf.float32, "bfloat16": tf.bfloat16, "half": tf.float16,
            "float64": tf.float64}[name]


def keras_dtype(name):
    return {"half": "float16"}.get(name, name)


def _op_phases(forward, backward, x, result, inference=False):
    """The phases of a forward op and its gradient op, each a tf.function of x: fwd (reading
    result(outputs)), bwd (from the forward's outputs, computed once eagerly, untimed) and fwd+bwd;
    with inference, the forward alone as the inference phase."""
    fwd = _function(lambda x: _force([result(forward(x))]))
    if inference:
        return {INFERENCE_PHASE: lambda: fwd(x).numpy()}
    saved = tuple(forward(x))
    bwd = _function(lambda x: _force(backward(x, saved)))
    both = _function(lambda x: _force(backward(x, forward(x))))
    return {"fwd": lambda: fwd(x).numpy(),
            "bwd": lambda: bwd(x).numpy(),
            "fwd+bwd": lambda: both(x).numpy()}


def _block_lstm(raw, case, inference=False):
    """BlockLSTMV2 + BlockLSTMGradV2 of `raw` (tf_lstm_ops.raw or tf.raw_ops); with inference,
    the forward alone as the inference phase."""
    import tensorflow as tf

    t = case.tensor
    x, dy = t("x"), t("dy")
    rest = dict(seq_len_max=t("seq_len_max"), cs_prev=t("zeros_bh"), h_prev=t("zeros_bh"),
                w=t("w"), wci=t("zeros_h"), wcf=t("zeros_h"), wco=t("zeros_h"), b=t("b"))
    fwd_op, grad_op = raw.BlockLSTMV2, raw.BlockLSTMGradV2

    def forward(x):
        return fwd_op(x=x, cell_clip=0.0, use_peephole=False, **rest)

    def backward(x, out):
        acts = dict(zip(("i", "cs", "f", "o", "ci", "co", "h"), out))
        return grad_op(x=x, cs_grad=tf.zeros_like(dy), h_grad=dy, use_peephole=False, **rest,
                       **acts)

    # (BlockLSTMV2 has no inference mode: it computes what a gradient needs anyway)
    return _op_phases(forward, backward, x, lambda out: out.h, inference)


def build_ours_block(case):
    import tf_lstm_ops

    return _block_lstm(tf_lstm_ops.raw, case)


def build_ours_block_inf(case):
    import tf_lstm_ops

    return _block_lstm(tf_lstm_ops.raw, case, inference=True)


def build_tf_block(case):
    import tensorflow as tf

    return _block_lstm(tf.raw_ops, case)


def build_ours_tape(case):
    import tensorflow as tf
    import tf_lstm_ops

    t = case.tensor
    x, w, b, dy = t("x"), t("w"), t("b"), t("dy")
    rest = dict(seq_len_max=t("seq_len_max"), cs_prev=t("zeros_bh"), h_prev=t("zeros_bh"),
                wci=t("zeros_h"), wcf=t("zeros_h"), wco=t("zeros_h"))

    @_function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch([x, w, b])
            h = tf_lstm_ops.raw.BlockLSTMV2(x=x, w=w, b=b, cell_clip=0.0, use_peephole=False,
                                            **rest).h
        return _force(tape.gradient(h, [x, w, b], output_gradients=dy))

    return {"fwd+bwd": lambda: step(x).numpy()}


def _cell_loop(cell_op, case):
    """An LSTMBlockCell op run over T in a tf.while_loop: the stacked h [T, B, H]."""
    import tensorflow as tf

    t = case.tensor
    zeros_h, T = t("zeros_h"), case.T

    def run(x, w, b, cs0, h0):
        def body(k, cs, h, hs):
            out = cell_op(x=x[k], cs_prev=cs, h_prev=h, w=w, wci=zeros_h, wcf=zeros_h, wco=zeros_h,
                          b=b, forget_bias=0.0, cell_clip=0.0, use_peephole=False)
            return k + 1, out.cs, out.h, hs.write(k, out.h)

        hs = tf.TensorArray(x.dtype, size=T)
        _, _, _, hs = tf.while_loop(lambda k, *_: k < T, body, (tf.constant(0), cs0, h0, hs))
        return hs.stack()

    return run


def _cell_loop_phases(cell_op, case, with_grad):
    import tensorflow as tf

    t = case.tensor
    run = _cell_loop(cell_op, case)
    x, w, b, zeros_bh, dy = t("x"), t("w"), t("b"), t("zeros_bh"), t("dy")
    fwd = _function(lambda x: _force([run(x, w, b, zeros_bh, zeros_bh)]))
    phases = {"fwd": lambda: fwd(x).numpy()}
    if with_grad:
        @_function
        def both(x):
            with tf.GradientTape() as tape:
                tape.watch([x, w, b])
                hs = run(x, w, b, zeros_bh, zeros_bh)
            return _force(tape.gradient(hs, [x, w, b], output_gradients=dy))

        phases["fwd+bwd"] = lambda: both(x).numpy()
    return phases


def build_ours_cell_loop(case):
    import tf_lstm_ops

    return _cell_loop_phases(tf_lstm_ops.raw.LSTMBlockCell, case, with_grad=True)


def build_tf_cell_loop(case):
    import tensorflow as tf

    return _cell_loop_phases(tf.raw_ops.LSTMBlockCell, case, with_grad=False)


def _ours_cudnn(case, is_training, eager=False):
    """Our CudnnRNNV3 (+ CudnnRNNBackpropV3); is_training=False: the forward alone, as the
    inference phase (no reserve space kept for a backward), in a tf.function or, with eager,
    called eagerly: the op runs on the calling thread, without TF's executor and its threads."""
    import tf_lstm_ops

    t = case.tensor
    attrs = dict(rnn_mode=case.family, time_major=True)
    x, dy, zeros = t("x"), t("dy"), t("zeros_1bh")
    rest = dict(input_h=zeros, input_c=zeros, params=t("params"), sequence_lengths=t("lengths"))
    fwd_op, bwd_op = tf_lstm_ops.raw.CudnnRNNV3, tf_lstm_ops.raw.CudnnRNNBackpropV3

    def forward(x):
        return fwd_op(input=x, is_training=is_training, **attrs, **rest)

    def backward(x, out):
        output, output_h, output_c, reserve_space, host_reserved = out
        return bwd_op(input=x, output=output, output_h=output_h, output_c=output_c,
                      output_backprop=dy, output_h_backprop=zeros, output_c_backprop=zeros,
                      reserve_space=reserve_space, host_reserved=host_reserved, **attrs, **rest)

    if eager:
        return {INFERENCE_PHASE: lambda: forward(x).output[0, 0, 0].numpy()}
    return _op_phases(forward, backward, x, lambda out: out.output, not is_training)


def build_ours_cudnn(case):
    return _ours_cudnn(case, is_training=True)


def build_ours_cudnn_inf(case):
    return _ours_cudnn(case, is_training=False)


def build_ours_cudnn_eager_inf(case):
    return _ours_cudnn(case, is_training=False, eager=True)


def pre_padded_mask(batch, steps):
    """What keras.utils.pad_sequences gives by default (padding="pre"): row b has its last
    steps - (b % 4) * steps // 8 steps valid (so from all of them down to 5/8), the rest masked
    at the front. Every step of the longest row runs, as in a real batch."""
    import tensorflow as tf

    lengths = [steps - (b % 4) * steps // 8 for b in range(batch)]
    return tf.constant([[t >= steps - n for t in range(steps)] for n in lengths], tf.bool)


def _keras_phases(layer_cls, case, with_mask=False, **kwargs):
    import tensorflow as tf

    # glorot_uniform: the default orthogonal initializer needs a QR, which has no bfloat16 kernel
    layer = layer_cls(case.H, return_sequences=True, dtype=keras_dtype(case.dtype),
                      recurrent_initializer="glorot_uniform", **kwargs)
    layer.build((case.B, case.T, case.I))
    x, dy = case.tensor("x_bm"), case.tensor("dy_bm")
    mask = pre_padded_mask(case.B, case.T) if with_mask else None
    fwd = tf.function(lambda x: _force([layer(x, mask=mask)]))

    @tf.function
    def both(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, mask=mask, training=True)
        return _force(tape.gradient(y, [x] + list(layer.trainable_variables),
                                    output_gradients=dy))

    return {"fwd": lambda: fwd(x).numpy(), "fwd+bwd": lambda: both(x).numpy()}


def _keras_layer(case):
    """keras.layers.LSTM or GRU, by the case's family."""
    import keras

    return keras.layers.LSTM if case.family == "lstm" else keras.layers.GRU


def build_keras(case):
    if case.family == "lstm":
        return _keras_phases(_keras_layer(case), case)
    return _keras_phases(_keras_layer(case), case, reset_after=True)


def _ours_keras_layer(case):
    try:
        import tf_lstm_ops.keras as tlk
    except Exception as error:  # the module is optional for the benchmark
        raise Skip("tf_lstm_ops.keras not importable (%s: %s)"
                   % (type(error).__name__, _first_line(error)))
    return tlk.LSTM if case.family == "lstm" else tlk.GRU


def build_ours_keras(case):
    return _keras_phases(_ours_keras_layer(case), case)


def build_ours_keras_mask(case):
    return _keras_phases(_ours_keras_layer(case), case, with_mask=True)


def build_keras_mask(case):
    extra = {} if case.family == "lstm" else dict(reset_after=True)
    return _keras_phases(_keras_layer(case), case, with_mask=True, **extra)


def _keras_zoneout_layer(case):
    """What a Keras user runs for zoneout today: Keras' cell in keras.layers.RNN, each new state
    blended with the previous one by a wrapper cell (Tacotron 2's construction; fresh masks per
    step while training, the expectation otherwise), as a layer class for _keras_phases."""
    import keras

    class ZoneoutCell(keras.layers.Layer):
        def __init__(self, cell, rates, **kwargs):
            super().__init__(**kwargs)
            self.cell, self.rates = cell, rates
            self.state_size, self.output_size = cell.state_size, cell.units
            self.seed_generator = keras.random.SeedGenerator(1)

        def build(self, input_shape):
            self.cell.build(input_shape)

        def call(self, inputs, states, training=False):
            _, new = self.cell(inputs, states, training=training)
            zoned = []
            for new_k, prev_k, rate in zip(new, states, self.rates):
                if training:
                    keep = keras.random.uniform(keras.ops.shape(prev_k),
                                                seed=self.seed_generator) >= rate
                    weights = keras.ops.cast(keep, prev_k.dtype)
                else:
                    weights = 1.0 - rate
                zoned.append(new_k * weights + prev_k * (1.0 - weights))
            return zoned[0], zoned

    def layer(units, return_sequences, dtype, zoneout_h=0.0, zoneout_c=0.0, zoneout=0.0,
              **cell_kwargs):
        cell_class = keras.layers.LSTMCell if case.family == "lstm" else keras.layers.GRUCell
        rates = (zoneout_h, zoneout_c) if case.family == "lstm" else (zoneout,)
        return keras.layers.RNN(ZoneoutCell(cell_class(units, dtype=dtype, **cell_kwargs), rates,
                                            dtype=dtype),
                                return_sequences=return_sequences, dtype=dtype)

    return layer


# --configs: each configuration on our layer and on Keras' (key suffix -> the label's argument,
# the layer's arguments, the phases, the families; Keras' layer: _keras_layer's, or for
# zoneout, which Keras has not, its cell construction). Those our layers do not fuse yet run
# Keras' loop there (with a warning): measured so that the gap is in the table.
_CONFIGS = {
    "relu": ("activation='relu'", dict(activation="relu"), ("fwd", "fwd+bwd"), ("lstm", "gru")),
    "recurrent_dropout": ("recurrent_dropout=0.2", dict(recurrent_dropout=0.2, seed=1),
                          ("fwd+bwd",), ("lstm", "gru")),
    "reset_before": ("reset_after=False", dict(reset_after=False), ("fwd", "fwd+bwd"), ("gru",)),
    "zoneout": ("zoneout_h=zoneout_c=0.1", dict(zoneout_h=0.1, zoneout_c=0.1),
                ("fwd", "fwd+bwd"), ("lstm",)),
    "zoneout_gru": ("zoneout=0.1", dict(zoneout=0.1), ("fwd", "fwd+bwd"), ("gru",)),
}


def _build_config(ours, layer_kwargs, case):
    if ours:
        layer = _ours_keras_layer(case)
    elif any(name.startswith("zoneout") for name in layer_kwargs):
        layer = _keras_zoneout_layer(case)
    else:
        layer = _keras_layer(case)
    return _keras_phases(layer, case, **layer_kwargs)


def _config_contenders(family, layer_name):
    """--configs' contenders of a family beyond ours_keras and ours_keras_mask (default ones)."""
    out = [Contender("keras_mask", family, "keras.layers.%s, pre-padded mask" % layer_name,
                     ("fwd", "fwd+bwd"), build_keras_mask, opt_in=True)]
    for suffix, (label, layer_kwargs, phases, families) in _CONFIGS.items():
        if family not in families:
            continue
        out.append(Contender("ours_keras_" + suffix, family,
                             "ours keras.%s(%s)" % (layer_name, label), phases,
                             functools.partial(_build_config, True, layer_kwargs), ours=True,
                             needs="ours_keras", opt_in=True))
        theirs = ("keras.layers.RNN(%sCell, zoneout wrapper cell, %s)" if "zoneout" in suffix
                  else "keras.layers.%s(%s)") % (layer_name, label)
        out.append(Contender("keras_" + suffix, family, theirs, phases,
                             functools.partial(_build_config, False, layer_kwargs),
                             opt_in=True))
    return tuple(out)


# --layernorm: the LayerNorm LSTM (docs/layer_norm_lstm.md), ours and what a Keras user runs
# today: TF Addons' cell written with Keras ops (an LSTMCell whose step normalises x·W, h·R and
# c with LayerNormalization layers) in keras.layers.RNN.
def _keras_layer_norm_lstm(case):
    import keras

    class AddonsCell(keras.layers.LSTMCell):
        def __init__(self, units, **kwargs):
            super().__init__(units, **kwargs)
            self.norms = [keras.layers.LayerNormalization(dtype=self.dtype_policy)
                          for _ in range(3)]

        def build(self, input_shape):
            super().build(input_shape)
            for norm, width in zip(self.norms, (4, 4, 1)):
                norm.build((None, width * self.units))

        def call(self, inputs, states, training=False):
            h, c = states
            x_norm, h_norm, c_norm = self.norms
            z = (x_norm(keras.ops.matmul(inputs, self.kernel))
                 + h_norm(keras.ops.matmul(h, self.recurrent_kernel)) + self.bias)
            i, f, g, o = keras.ops.split(z, 4, axis=-1)
            c = c_norm(keras.ops.sigmoid(f) * c + keras.ops.sigmoid(i) * keras.ops.tanh(g))
            h = keras.ops.sigmoid(o) * keras.ops.tanh(c)
            return h, [h, c]

    def layer(units, return_sequences, dtype, recurrent_initializer):
        return keras.layers.RNN(
            AddonsCell(units, dtype=dtype, recurrent_initializer=recurrent_initializer),
            return_sequences=return_sequences, dtype=dtype)

    return layer


# The GRU's: haste's LayerNormGRU (docs/layer_norm_rnn.md §1) written with Keras ops, a
# reset-after GRUCell whose step normalises x·W and h·R with γ-only LayerNormalization layers.
def _keras_layer_norm_gru(case):
    import keras

    class HasteCell(keras.layers.GRUCell):
        def __init__(self, units, **kwargs):
            super().__init__(units, **kwargs)
            self.norms = [keras.layers.LayerNormalization(epsilon=1e-5, center=False,
                                                          dtype=self.dtype_policy)
                          for _ in range(2)]

        def build(self, input_shape):
            super().build(input_shape)
            for norm in self.norms:
                norm.build((None, 3 * self.units))

        def call(self, inputs, states, training=False):
            h = states[0] if isinstance(states, (list, tuple)) else states
            x_norm, h_norm = self.norms
            xz, xr, xh = keras.ops.split(
                x_norm(keras.ops.matmul(inputs, self.kernel)) + self.bias[0], 3, axis=-1)
            uz, ur, uh = keras.ops.split(
                h_norm(keras.ops.matmul(h, self.recurrent_kernel)) + self.bias[1], 3, axis=-1)
            z, r = keras.ops.sigmoid(xz + uz), keras.ops.sigmoid(xr + ur)
            h = z * h + (1 - z) * keras.ops.tanh(xh + r * uh)
            return h, [h]

    def layer(units, return_sequences, dtype, recurrent_initializer):
        return keras.layers.RNN(
            HasteCell(units, dtype=dtype, recurrent_initializer=recurrent_initializer),
            return_sequences=return_sequences, dtype=dtype)

    return layer


def build_ours_layer_norm(case, **kwargs):
    try:
        import tf_lstm_ops.keras as tlk
    except Exception as error:  # the module is optional for the benchmark
        raise Skip("tf_lstm_ops.keras not importable (%s: %s)"
                   % (type(error).__name__, _first_line(error)))
    return _keras_phases(tlk.LayerNormLSTM if case.family == "lstm" else tlk.LayerNormGRU, case,
                         **kwargs)


def build_keras_layer_norm(case):
    cell = _keras_layer_norm_lstm if case.family == "lstm" else _keras_layer_norm_gru
    return _keras_phases(cell(case), case)


def build_ours_keras_fallback(case):
    # use_cudnn=False: a configuration our layer hands to Keras' own loop (with a warning)
    import logging

    logging.getLogger("tf_lstm_ops").setLevel(logging.ERROR)
    return _keras_phases(_ours_keras_layer(case), case, use_cudnn=False)


def build_keras_fallback(case):
    return _keras_phases(_keras_layer(case), case, use_cudnn=False)


def _hessian_vector_product(variables, loss_fn):
    """{"hvp": callable}: d/dw <d loss/dw, v> for fixed random v, one tf.function (the
    double backpropagation a curvature method or a gradient penalty runs)."""
    import tensorflow as tf

    vectors = [tf.random.stateless_normal(v.shape, seed=[7, k], dtype=v.dtype)
               for k, v in enumerate(variables)]

    @tf.function
    def hvp():
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = loss_fn()
            grads = inner.gradient(loss, variables)
            projection = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vectors)])
        return _force(outer.gradient(projection, variables))

    return {HVP_PHASE: lambda: hvp().numpy()}


def build_ours_block_hvp(case):
    import tensorflow as tf
    import tf_lstm_ops

    t = case.tensor
    w, b = tf.Variable(t("w")), tf.Variable(t("b"))
    dy = t("dy")

    def loss():
        out = tf_lstm_ops.raw.BlockLSTMV2(
            seq_len_max=t("seq_len_max"), x=t("x"), cs_prev=t("zeros_bh"), h_prev=t("zeros_bh"),
            w=w, wci=t("zeros_h"), wcf=t("zeros_h"), wco=t("zeros_h"), b=b, cell_clip=0.0,
            use_peephole=False)
        return tf.reduce_sum(out.h * dy)

    return _hessian_vector_product([w, b], loss)


def build_ours_cudnn_hvp(case):
    import tensorflow as tf
    import tf_lstm_ops

    t = case.tensor
    params = tf.Variable(t("params"))
    dy = t("dy")

    def loss():
        out = tf_lstm_ops.raw.CudnnRNNV3(
            input=t("x"), input_h=t("zeros_1bh"), input_c=t("zeros_1bh"), params=params,
            sequence_lengths=t("lengths"), rnn_mode=case.family, time_major=True,
            is_training=True)
        return tf.reduce_sum(out.output * dy)

    return _hessian_vector_product([params], loss)


def _keras_hvp(layer_cls, case):
    import tensorflow as tf

    layer = layer_cls(case.H, return_sequences=True, dtype=keras_dtype(case.dtype),
                      recurrent_initializer="glorot_uniform")
    layer.build((case.B, case.T, case.I))
    x, dy = case.tensor("x_bm"), case.tensor("dy_bm")
    return _hessian_vector_product(list(layer.trainable_variables),
                                   lambda: tf.reduce_sum(layer(x, training=True) * dy))


def build_ours_keras_hvp(case):
    return _keras_hvp(_ours_keras_layer(case), case)


def build_keras_hvp(case):
    return _keras_hvp(_keras_layer(case), case)


def _inference_model(layer_cls, case):
    """A Keras model of one layer_cls(H, return_sequences=True) on batch-major [B, T, I] inputs,
    with the weights every inference contender of the case shares: the case's w and b in Keras'
    layout (kernel w[:I], recurrent kernel w[I:]; a GRU's input and recurrent bias both b)."""
    import keras
    import numpy as np

    dtype = keras_dtype(case.dtype)
    family_kwargs = {"reset_after": True} if case.family == "gru" else {}
    inputs = keras.Input(batch_shape=(case.B, case.T, case.I), dtype=dtype)
    # glorot_uniform: the default orthogonal initializer needs a QR (no bfloat16 kernel)
    layer = layer_cls(case.H, return_sequences=True, dtype=dtype,
                      recurrent_initializer="glorot_uniform", **family_kwargs)
    model = keras.Model(inputs, layer(inputs))
    w, b = case.array("w"), case.array("b")
    model.set_weights([w[:case.I], w[case.I:], b if case.family == "lstm" else np.stack([b, b])])
    return model


def _keras_inference(layer_cls, case):
    import tensorflow as tf

    model = _inference_model(layer_cls, case)
    x = case.tensor("x_bm")
    infer = tf.function(lambda x: _force([model(x, training=False)]))
    return {INFERENCE_PHASE: lambda: infer(x).numpy()}


def build_ours_keras_inf(case):
    return _keras_inference(_ours_keras_layer(case), case)


def build_keras_inf(case):
    return _keras_inference(_keras_layer(case), case)


def _tflite_source(stock, case):
    """(the Keras model TFLite converts, what it is). TFLite's converter fuses an LSTM into its
    builtin UNIDIRECTIONAL_SEQUENCE_LSTM only where the layer's function carries tf_keras' (Keras
    2) "lstm_" api_implements mark, which Keras 3's LSTM lacks (its loop converts to a WHILE); so
    an LSTM is converted from a tf_keras twin with the stock model's weights where tf_keras
    imports. TFLite has no fused GRU: a GRU converts from the stock model as it is."""
    what = "to_stock_keras(model)"
    if case.family != "lstm":
        return stock, what
    try:
        import tf_keras
    except ImportError as error:
        return stock, "%s (tf_keras not importable: %s)" % (what, _first_line(error))
    twin = tf_keras.Sequential([tf_keras.Input(batch_shape=(case.B, case.T, case.I)),
                                tf_keras.layers.LSTM(case.H, return_sequences=True)])
    twin.set_weights(stock.get_weights())  # the same layout: kernel, recurrent kernel, bias
    return twin, "a tf_keras twin of " + what


def build_tflite_inf(case):
    """TFLite's interpreter on our layer's inference model exported with to_stock_keras and
    converted for its fixed [B, T, I] input; a timed call is set_tensor + invoke + get_tensor."""
    import contextlib
    import io
    import warnings

    import tensorflow as tf

    layer_cls = _ours_keras_layer(case)
    from tf_lstm_ops.keras import to_stock_keras

    model, what = _tflite_source(to_stock_keras(_inference_model(layer_cls, case)), case)
    try:
        # from_keras_model, not a concrete function: it freezes the variables a Keras 3 loop
        # reads (a concrete function's WHILE keeps READ_VARIABLE ops the interpreter cannot run).
        # It exports a Keras 3 model through a SavedModel and prints where: kept off stdout,
        # which may be --json -.
        with contextlib.redirect_stdout(io.StringIO()):
            content = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    except Exception as error:  # the converter's own failure is the row's skip note
        raise Skip("TFLite conversion failed (%s: %s)" % (type(error).__name__,
                                                          _first_line(error)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation (for LiteRT's)
        interpreter = tf.lite.Interpreter(model_content=content, num_threads=case.threads)
    interpreter.allocate_tensors()
    try:
        ops = sorted({op["op_name"] for op in interpreter._get_ops_details()})
    except AttributeError:  # a private method; an interpreter without it lists nothing
        ops = None
    fused = "UNIDIRECTIONAL_SEQUENCE_LSTM" if case.family == "lstm" else None
    if ops is None:
        case.notes.append("TFLite %s: converted from %s; its op list is not readable here"
                          % (case.family, what))
    elif fused in ops:
        case.notes.append("TFLite %s: converted from %s, runs the builtin fused %s"
                          % (case.family, what, fused))
    else:
        case.notes.append("TFLite %s: converted from %s, NOT fused: ops %s%s"
                          % (case.family, what, ", ".join(ops),
                             "" if fused else " (TFLite has no fused GRU)"))
    x = case.array("x").transpose(1, 0, 2).copy()  # batch-major, like the Keras rows' x_bm
    source = interpreter.get_input_details()[0]["index"]
    target = interpreter.get_output_details()[0]["index"]

    def infer():
        interpreter.set_tensor(source, x)
        interpreter.invoke()
        return float(interpreter.get_tensor(target).reshape(-1)[0])

    return {INFERENCE_PHASE: infer}


def _torch_module(case):
    """(torch, the case's torch.nn.LSTM / GRU in the case dtype, x [T, B, I] in that dtype)."""
    torch = case.torch
    if torch is None:
        raise Skip("torch not importable")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "half": torch.float16,
             "float64": torch.float64}[case.dtype]
    torch.set_num_threads(case.threads)
    torch.manual_seed(0)
    cls = torch.nn.LSTM if case.family == "lstm" else torch.nn.GRU
    module = cls(case.I, case.H).to(dtype)  # time-major, like ours
    return torch, module, torch.from_numpy(case.array("x")).to(dtype)


def _torch_force(tensors):
    """torch's _force: one element of every tensor, read back as a Python float."""
    return float(sum(v.reshape(-1)[0].float() for v in tensors))


def build_torch(case):
    torch, module, x = _torch_module(case)
    params = list(module.parameters())
    x.requires_grad_(True)
    dy = torch.from_numpy(case.array("dy")).to(x.dtype)
    inputs = [x] + params

    def fwd():
        return _torch_force([module(x)[0]])

    def both():
        y = module(x)[0]
        return _torch_force(torch.autograd.grad(y, inputs, dy))

    saved = module(x)[0]

    def bwd():
        return _torch_force(torch.autograd.grad(saved, inputs, dy, retain_graph=True))

    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": both}


def _torchscript_layer_norm(case):
    """(torch, a TorchScript LayerNorm LSTM / GRU over the case's sequence, x [T, B, I]): the
    cells as PyTorch's benchmarks/fastrnns writes its LayerNormLSTMCell (per step: LayerNorm of
    x·Wᵀ and of h·Rᵀ, each over all gates; the LSTM's LayerNorm of c carried, TF Addons' cell;
    the GRU haste's, reset after, its norms without β and two biases), the time loop scripted."""
    from typing import List

    torch = case.torch
    if torch is None:
        raise Skip("torch not importable")
    if case.dtype != "float32":
        raise Skip("the TorchScript contender runs float32 only")
    torch.set_num_threads(case.threads)
    torch.manual_seed(0)
    nn, Tensor = torch.nn, torch.Tensor
    T, B, I, H = case.shape

    class LSTM(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight_ih = nn.Parameter(torch.randn(4 * H, I) * 0.1)
            self.weight_hh = nn.Parameter(torch.randn(4 * H, H) * 0.1)
            self.norm_i, self.norm_h = nn.LayerNorm(4 * H), nn.LayerNorm(4 * H)
            self.norm_c = nn.LayerNorm(H)

        def forward(self, x: Tensor) -> Tensor:
            h = torch.zeros(x.size(1), self.weight_hh.size(1))
            c = torch.zeros(x.size(1), self.weight_hh.size(1))
            outputs: List[Tensor] = []
            for t in range(x.size(0)):
                gates = (self.norm_i(torch.mm(x[t], self.weight_ih.t()))
                         + self.norm_h(torch.mm(h, self.weight_hh.t())))
                i, f, g, o = gates.chunk(4, 1)
                c = self.norm_c(torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g))
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            return torch.stack(outputs)

    class GRU(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight_ih = nn.Parameter(torch.randn(3 * H, I) * 0.1)
            self.weight_hh = nn.Parameter(torch.randn(3 * H, H) * 0.1)
            self.bias_ih = nn.Parameter(torch.zeros(3 * H))
            self.bias_hh = nn.Parameter(torch.zeros(3 * H))
            self.norm_i = nn.LayerNorm(3 * H, elementwise_affine=False)
            self.norm_h = nn.LayerNorm(3 * H, elementwise_affine=False)
            self.gamma_i = nn.Parameter(torch.ones(3 * H))
            self.gamma_h = nn.Parameter(torch.ones(3 * H))

        def forward(self, x: Tensor) -> Tensor:
            h = torch.zeros(x.size(1), self.weight_hh.size(1))
            outputs: List[Tensor] = []
            for t in range(x.size(0)):
                xz, xr, xg = (self.norm_i(torch.mm(x[t], self.weight_ih.t())) * self.gamma_i
                              + self.bias_ih).chunk(3, 1)
                uz, ur, ug = (self.norm_h(torch.mm(h, self.weight_hh.t())) * self.gamma_h
                              + self.bias_hh).chunk(3, 1)
                z, r = torch.sigmoid(xz + uz), torch.sigmoid(xr + ur)
                h = z * h + (1 - z) * torch.tanh(xg + r * ug)
                outputs.append(h)
            return torch.stack(outputs)

    module = torch.jit.script(LSTM() if case.family == "lstm" else GRU())
    return torch, module, torch.from_numpy(case.array("x")).to(torch.float32)


def build_torchscript_layer_norm(case):
    torch, module, x = _torchscript_layer_norm(case)
    params = list(module.parameters())
    x.requires_grad_(True)
    dy = torch.from_numpy(case.array("dy")).to(torch.float32)

    def fwd():
        with torch.no_grad():
            return _torch_force([module(x)])

    def both():
        return _torch_force(torch.autograd.grad(module(x), [x] + params, dy))

    return {"fwd": fwd, "fwd+bwd": both}


def build_torch_inf(case):
    torch, module, x = _torch_module(case)

    def infer():
        with torch.inference_mode():  # no autograd graph recorded, no version counters
            return _torch_force([module(x)[0]])

    return {INFERENCE_PHASE: infer}


HALF_FLOAT = ("half", "float32")


def _hvp_contenders(family, op_name, layer_name):
    """The --hvp contenders of a family: through CudnnRNNV3, our layer and Keras' layer."""
    return (
        Contender("ours_cudnn_hvp", family, op_name + " HVP", (HVP_PHASE,), build_ours_cudnn_hvp,
                  ours=True, opt_in=True),
        Contender("ours_keras_hvp", family, "ours keras.%s HVP" % layer_name, (HVP_PHASE,),
                  build_ours_keras_hvp, ours=True, needs="ours_keras", opt_in=True),
        Contender("keras_hvp", family, "keras.layers.%s HVP" % layer_name, (HVP_PHASE,),
                  build_keras_hvp, opt_in=True),
    )


def _inference_contenders(family, op_name, layer_name):
    """The --inference contenders of a family, each timing the forward with training=False:
    CudnnRNNV3 (is_training=False) in a tf.function and called eagerly, our layer and Keras' in a
    model with the same weights, TFLite on our model's stock export, torch under
    inference_mode."""
    inf = (INFERENCE_PHASE,)
    return (
        Contender("ours_cudnn_inf", family, op_name + " inference", inf, build_ours_cudnn_inf,
                  ours=True, opt_in=True),
        Contender("ours_cudnn_eager_inf", family, op_name + " eager", inf,
                  build_ours_cudnn_eager_inf, ours=True, opt_in=True),
        Contender("ours_keras_inf", family, "ours keras.%s inference" % layer_name, inf,
                  build_ours_keras_inf, ours=True, needs="ours_keras", opt_in=True),
        Contender("keras_inf", family, "keras.layers.%s inference" % layer_name, inf,
                  build_keras_inf, opt_in=True),
        Contender("tflite_inf", family, "TFLite %s (stock export)" % layer_name, inf,
                  build_tflite_inf, dtypes=("float32",), needs="ours_keras", opt_in=True),
        Contender("torch_inf", family, "torch.nn.%s inference_mode" % layer_name, inf,
                  build_torch_inf, needs="torch", opt_in=True),
    )


CONTENDERS = (
    Contender("ours_block", "lstm", "ours BlockLSTMV2", PHASES, build_ours_block, ours=True),
    Contender("ours_tape", "lstm", "ours BlockLSTMV2 (tape)", ("fwd+bwd",), build_ours_tape,
              ours=True),
    Contender("ours_cudnn", "lstm", "ours CudnnRNNV3", PHASES, build_ours_cudnn, ours=True),
    Contender("ours_cell_loop", "lstm", "ours LSTMBlockCell loop", ("fwd", "fwd+bwd"),
              build_ours_cell_loop, ours=True),
    Contender("ours_keras", "lstm", "ours keras.LSTM", ("fwd", "fwd+bwd"), build_ours_keras,
              ours=True, needs="ours_keras"),
    Contender("ours_keras_mask", "lstm", "ours keras.LSTM, pre-padded mask",
              ("fwd", "fwd+bwd"), build_ours_keras_mask, ours=True, needs="ours_keras"),
    Contender("ours_keras_fallback", "lstm", "ours keras.LSTM(use_cudnn=False)",
              ("fwd", "fwd+bwd"), build_ours_keras_fallback, ours=True, needs="ours_keras"),
    Contender("tf_block", "lstm", "tf.raw_ops BlockLSTMV2", PHASES, build_tf_block,
              dtypes=HALF_FLOAT),
    Contender("tf_cell_loop", "lstm", "tf.raw_ops LSTMBlockCell loop", ("fwd",),
              build_tf_cell_loop, dtypes=HALF_FLOAT),
    Contender("keras", "lstm", "keras.layers.LSTM", ("fwd", "fwd+bwd"), build_keras),
    *_config_contenders("lstm", "LSTM"),
    Contender("keras_fallback", "lstm", "keras.layers.LSTM(use_cudnn=False)", ("fwd", "fwd+bwd"),
              build_keras_fallback),
    Contender("torch", "lstm", "torch.nn.LSTM", PHASES, build_torch, needs="torch"),
    Contender("ours_layernorm", "lstm", "ours keras.LayerNormLSTM (TF Addons')",
              ("fwd", "fwd+bwd"), build_ours_layer_norm, ours=True, opt_in=True),
    Contender("ours_layernorm_paper", "lstm", "ours keras.LayerNormLSTM(norm='paper')",
              ("fwd", "fwd+bwd"), functools.partial(build_ours_layer_norm, norm="paper"),
              ours=True, needs="ours_layernorm", opt_in=True),
    Contender("ours_layernorm_zoneout", "lstm",
              "ours keras.LayerNormLSTM(zoneout_h=zoneout_c=0.1)", ("fwd", "fwd+bwd"),
              functools.partial(build_ours_layer_norm, zoneout_h=0.1, zoneout_c=0.1),
              ours=True, needs="ours_layernorm", opt_in=True),
    Contender("keras_layernorm", "lstm",
              "keras.layers.RNN(TF Addons' LayerNorm LSTM cell in Keras ops)",
              ("fwd", "fwd+bwd"), build_keras_layer_norm, opt_in=True),
    Contender("torchscript_layernorm", "lstm", "TorchScript LayerNorm LSTM (fastrnns' cell)",
              ("fwd", "fwd+bwd"), build_torchscript_layer_norm, dtypes=("float32",),
              needs="torch", opt_in=True),
    Contender("ours_block_hvp", "lstm", "ours BlockLSTMV2 HVP", (HVP_PHASE,), build_ours_block_hvp,
              ours=True, opt_in=True),
    *_hvp_contenders("lstm", "ours CudnnRNNV3", "LSTM"),
    Contender("ours_block_inf", "lstm", "ours BlockLSTMV2 inference", (INFERENCE_PHASE,),
              build_ours_block_inf, ours=True, opt_in=True),
    *_inference_contenders("lstm", "ours CudnnRNNV3", "LSTM"),
    Contender("ours_cudnn", "gru", "ours CudnnRNNV3 gru", PHASES, build_ours_cudnn, ours=True),
    Contender("ours_keras", "gru", "ours keras.GRU", ("fwd", "fwd+bwd"), build_ours_keras,
              ours=True, needs="ours_keras"),
    Contender("ours_keras_mask", "gru", "ours keras.GRU, pre-padded mask", ("fwd", "fwd+bwd"),
              build_ours_keras_mask, ours=True, needs="ours_keras"),
    Contender("ours_keras_fallback", "gru", "ours keras.GRU(use_cudnn=False)", ("fwd", "fwd+bwd"),
              build_ours_keras_fallback, ours=True, needs="ours_keras"),
    Contender("keras", "gru", "keras.layers.GRU", ("fwd", "fwd+bwd"), build_keras),
    *_config_contenders("gru", "GRU"),
    Contender("keras_fallback", "gru", "keras.layers.GRU(use_cudnn=False)", ("fwd", "fwd+bwd"),
              build_keras_fallback),
    Contender("torch", "gru", "torch.nn.GRU", PHASES, build_torch, needs="torch"),
    Contender("ours_layernorm", "gru", "ours keras.LayerNormGRU (haste's)", ("fwd", "fwd+bwd"),
              build_ours_layer_norm, ours=True, opt_in=True),
    Contender("ours_layernorm_zoneout", "gru", "ours keras.LayerNormGRU(zoneout=0.1)",
              ("fwd", "fwd+bwd"), functools.partial(build_ours_layer_norm, zoneout=0.1),
              ours=True, needs="ours_layernorm", opt_in=True),
    Contender("keras_layernorm", "gru", "keras.layers.RNN(haste's LayerNorm GRU cell in Keras ops)",
              ("fwd", "fwd+bwd"), build_keras_layer_norm, opt_in=True),
    Contender("torchscript_layernorm", "gru", "TorchScript LayerNorm GRU (haste's cell)",
              ("fwd", "fwd+bwd"), build_torchscript_layer_norm, dtypes=("float32",),
              needs="torch", opt_in=True),
    *_hvp_contenders("gru", "ours CudnnRNNV3 gru", "GRU"),
    *_inference_contenders("gru", "ours CudnnRNNV3 gru", "GRU"),
)
# What --hvp runs: one fwd+bwd step of ours (the unit of the goal) and the HVPs.
HVP_CONTENDERS = ("ours_block", "ours_cudnn", "ours_keras", "ours_block_hvp", "ours_cudnn_hvp",
                  "ours_keras_hvp", "keras_hvp")
# What --inference runs, and its baseline: how the alternatives compare with our layer.
INFERENCE_CONTENDERS = ("ours_block_inf", "ours_cudnn_inf", "ours_cudnn_eager_inf",
                        "ours_keras_inf", "keras_inf", "tflite_inf", "torch_inf")
INFERENCE_BASELINE = "ours_keras_inf"
# What --configs runs: Keras' configurations beyond the defaults that our layers fuse, ours and
# Keras', beside our default-configuration layer (the baseline).
CONFIG_CONTENDERS = ("ours_keras", "ours_keras_mask", "keras_mask", "ours_keras_relu",
                     "keras_relu", "ours_keras_recurrent_dropout", "keras_recurrent_dropout",
                     "ours_keras_reset_before", "keras_reset_before", "ours_keras_zoneout",
                     "keras_zoneout", "ours_keras_zoneout_gru", "keras_zoneout_gru")
CONFIG_BASELINE = "ours_keras"
# What --layernorm runs: the LayerNorm LSTM and GRU, ours and Keras', beside our plain layers.
LAYER_NORM_CONTENDERS = ("ours_keras", "ours_layernorm", "ours_layernorm_paper",
                         "ours_layernorm_zoneout", "keras_layernorm", "torchscript_layernorm")
LAYER_NORM_BASELINE = "ours_layernorm"
DEFAULT_BASELINE = {"lstm": "ours_block", "gru": "ours_cudnn"}
CONTENDER_KEYS = tuple(dict.fromkeys(c.key for c in CONTENDERS))
UNSUPPORTED_NOTES = {"tf_block": "TF registers BlockLSTMV2/GradV2 CPU kernels for half and float32"
                                 " only",
                     "tf_cell_loop": "TF registers LSTMBlockCell CPU kernels for half and float32"
                                     " only",
                     "tflite_inf": "the TFLite contender converts float32 models only"}


def contenders_for(family, keys):
    """The family's contenders named in keys; with keys None, all but the opt-in ones."""
    return [c for c in CONTENDERS if c.family == family
            and (c.key in keys if keys is not None else not c.opt_in)]
