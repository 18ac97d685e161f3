"""tf_lstm_ops.keras: the drop-in LSTM / GRU / SimpleRNN layers against Keras' own CPU layers
(outputs, states and gradients with the same weights; masks, go_backwards, stateful, dropout,
Bidirectional, mixed precision), the configurations that run Keras' own implementation, the LSTMBlockCell in keras.layers.RNN,
and the multi-layer CudnnRNN layers against the raw op and stacked Keras layers."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tools.references import block_lstm as ref  # noqa: E402

keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":  # pragma: no cover
    pytest.skip("Keras backend is not TensorFlow", allow_module_level=True)

import tf_lstm_ops  # noqa: E402
import tf_lstm_ops.keras as tlk  # noqa: E402

B, T, I, H = 3, 5, 4, 3
LENS = np.array([5, 2, 0])  # full, padded, fully masked
ATOL = 2e-5

KINDS = {
    # name: (ours, Keras', extra constructor args)
    "lstm": (tlk.LSTM, keras.layers.LSTM, {}),
    "gru": (tlk.GRU, keras.layers.GRU, {}),
    "rnn_tanh": (tlk.SimpleRNN, keras.layers.SimpleRNN, {}),
    "rnn_relu": (tlk.SimpleRNN, keras.layers.SimpleRNN, dict(activation="relu")),
}


def right_padded(lens, steps=T):
    return np.arange(steps)[None, :] < np.asarray(lens)[:, None]


def make_pair(kind, **kw):
    ours_cls, theirs_cls, extra = KINDS[kind]
    theirs_kw = dict(use_cudnn=False) if kind in ("lstm", "gru") else {}
    return ours_cls(H, **extra, **kw), theirs_cls(H, **extra, **theirs_kw, **kw)


def same_random_weights(rng, layers, shape, scale=0.8):
    for layer in layers:
        layer.build(shape)
    ws = [rng.uniform(-scale, scale, np.shape(w)).astype(np.float32)
          for w in layers[0].get_weights()]
    for layer in layers:
        layer.set_weights(ws)
    return ws


def run_with_grads(layer, x, init, mask, cotangents, training=False):
    """Outputs of layer(x) and the gradients of sum(cotangent * output) w.r.t. x, the initial
    states and the trainable weights."""
    x = tf.constant(x)
    init = None if init is None else [tf.constant(s) for s in init]
    with tf.GradientTape() as tape:
        tape.watch(x)
        if init is not None:
            tape.watch(init)
        outs = layer(x, initial_state=init, mask=None if mask is None else tf.constant(mask),
                     training=training)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        loss = sum(tf.reduce_sum(tf.cast(o, tf.float32) * c) for o, c in zip(outs, cotangents))
    sources = [x] + (init or []) + layer.trainable_weights
    grads = tape.gradient(loss, sources)
    return [np.asarray(o) for o in outs], [np.asarray(g) for g in grads]


def cotangents_for(rng, layer_outputs_shapes):
    return [tf.constant(rng.uniform(-1, 1, s).astype(np.float32)) for s in layer_outputs_shapes]


def assert_all_close(actual, expected, atol=ATOL, rtol=1e-5, what=""):
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(a, e, atol=atol, rtol=rtol, err_msg="%s %d" % (what, k))


def n_states(kind):
    return 2 if kind == "lstm" else 1


# ------------------------------------------------------------------------------------------------
# equality with Keras' own layers
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("kind", list(KINDS))
def test_sequences_states_and_gradients_equal_keras(rng, kind, use_mask, go_backwards):
    """return_sequences + return_state with random initial states: outputs (masked steps
    included: Keras carries the last output forward), final states and every gradient."""
    ours, theirs = make_pair(kind, return_sequences=True, return_state=True,
                             go_backwards=go_backwards)
    same_random_weights(rng, [ours, theirs], (B, T, I))
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    init = [rng.uniform(-1, 1, (B, H)).astype(np.float32) for _ in range(n_states(kind))]
    mask = right_padded(LENS) if use_mask else None
    cot = cotangents_for(rng, [(B, T, H)] + [(B, H)] * n_states(kind))
    outs, grads = run_with_grads(ours, x, init, mask, cot)
    outs_k, grads_k = run_with_grads(theirs, x, init, mask, cot)
    assert_all_close(outs, outs_k, what="output")
    assert_all_close(grads, grads_k, what="gradient")
    assert len(grads) == 1 + n_states(kind) + 3


def _op_is_training(fn, *args):
    """The is_training attribute of every CudnnRNNV3 or KerasRNN op in fn's graph."""
    graph = tf.function(fn).get_concrete_function(*args).graph
    return [op.get_attr("is_training") for op in graph.get_operations()
            if op.type.endswith(("CudnnRNNV3", "KerasRNN"))]


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "cudnn_lstm"])
def test_inference_calls_keep_nothing_and_are_still_differentiable(rng, kind):
    """training=False (predict, a plain model(x)) runs the op with is_training=False; its
    gradient (which recomputes the training forward) equals a training=True call's, bit for
    bit, and so Keras' (the other tests here differentiate training=False calls)."""
    if kind == "cudnn_lstm":
        layer = tlk.CudnnLSTM(H, num_layers=2, return_sequences=True)
    else:
        layer = make_pair(kind, return_sequences=True)[0]
    x = tf.constant(rng.uniform(-1, 1, (B, T, I)).astype(np.float32))
    layer(x)
    assert _op_is_training(lambda x: layer(x, training=False), x) == [False]
    assert _op_is_training(lambda x: layer(x), x) == [False]  # Keras' default
    assert _op_is_training(lambda x: layer(x, training=True), x) == [True]
    cot = tf.constant(rng.uniform(-1, 1, (B, T, H)).astype(np.float32))

    def grads(training):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, training=training) * cot)
        return tape.gradient(loss, [x] + layer.trainable_weights)

    for inference, training in zip(grads(False), grads(True)):
        np.testing.assert_array_equal(np.asarray(inference), np.asarray(training))
    for graph, eager in zip(tf.function(lambda: grads(False))(), grads(False)):
        np.testing.assert_array_equal(np.asarray(graph), np.asarray(eager))


@pytest.mark.parametrize("pattern", ["post", "pre", "holes", "last_step_masked"])
@pytest.mark.parametrize("zero_output_for_mask", [False, True])
@pytest.mark.parametrize("go_backwards", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_last_output_and_zero_output_for_mask_equal_keras(rng, kind, go_backwards,
                                                         zero_output_for_mask, pattern):
    """return_sequences=False (and =True with zero_output_for_mask) under a mask, zero initial
    state: the same last output (0 for a fully masked example) and gradients as Keras."""
    mask = mask_patterns(rng)[pattern]
    for return_sequences in (False, True):
        ours, theirs = make_pair(kind, return_sequences=return_sequences,
                                 go_backwards=go_backwards,
                                 zero_output_for_mask=zero_output_for_mask)
        same_random_weights(rng, [ours, theirs], (B, T, I))
        x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
        cot = cotangents_for(rng, [(B, T, H) if return_sequences else (B, H)])
        outs, grads = run_with_grads(ours, x, None, mask, cot)
        outs_k, grads_k = run_with_grads(theirs, x, None, mask, cot)
        assert_all_close(outs, outs_k, what="output rs=%s" % return_sequences)
        assert_all_close(grads, grads_k, what="gradient rs=%s" % return_sequences)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_use_bias_false_equals_keras(rng, kind):
    ours, theirs = make_pair(kind, use_bias=False, return_sequences=True)
    same_random_weights(rng, [ours, theirs], (B, T, I))
    assert len(ours.trainable_weights) == 2
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    cot = cotangents_for(rng, [(B, T, H)])
    outs, grads = run_with_grads(ours, x, None, None, cot)
    outs_k, grads_k = run_with_grads(theirs, x, None, None, cot)
    assert_all_close(outs, outs_k)
    assert_all_close(grads, grads_k)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_input_dropout_equals_keras_with_same_seed(rng, kind):
    """dropout= on the inputs: with the same seed Keras' cell and ours draw the same mask (one
    per sequence); training=False applies none."""
    ours, theirs = make_pair(kind, dropout=0.5, seed=1234, return_sequences=True)
    plain_ours, _ = make_pair(kind, return_sequences=True)
    ws = same_random_weights(rng, [ours, theirs], (B, T, I))
    plain_ours.build((B, T, I))
    plain_ours.set_weights(ws)
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    cot = cotangents_for(rng, [(B, T, H)])
    outs, grads = run_with_grads(ours, x, None, None, cot, training=True)
    outs_k, grads_k = run_with_grads(theirs, x, None, None, cot, training=True)
    assert_all_close(outs, outs_k)
    assert_all_close(grads, grads_k)
    plain = np.asarray(plain_ours(x))
    assert np.max(np.abs(outs[0] - plain)) > 1e-3  # dropout did something
    np.testing.assert_allclose(np.asarray(ours(x, training=False)), plain, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_stateful_equals_keras(rng, kind):
    """Eagerly, and with a pre-padded mask in a graph."""
    ours, theirs = make_pair(kind, stateful=True, return_sequences=True)
    same_random_weights(rng, [ours, theirs], (B, T, I))
    mask = tf.constant(mask_patterns(rng)["pre"])
    graph_ours = tf.function(lambda x: ours(x, mask=mask))
    graph_theirs = tf.function(lambda x: theirs(x, mask=mask))
    for step in range(5):
        if step == 2:
            ours.reset_state()
            theirs.reset_state()
        x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
        if step < 3:
            np.testing.assert_allclose(np.asarray(ours(x)), np.asarray(theirs(x)), atol=ATOL)
        else:
            np.testing.assert_allclose(np.asarray(graph_ours(x)), np.asarray(graph_theirs(x)),
                                       atol=ATOL)
    for s_ours, s_theirs in zip(ours.states, theirs.states):
        np.testing.assert_allclose(np.asarray(s_ours), np.asarray(s_theirs), atol=ATOL)


def test_masking_layer_in_a_model_equals_keras(rng):
    """keras.layers.Masking in a functional model (graph mode: predict), feeding LSTM -> GRU ->
    SimpleRNN; and one training step of each gives the same weights."""
    def build(module, extra):
        keras.utils.set_random_seed(3)
        inputs = keras.Input((T, I))
        h = keras.layers.Masking(mask_value=0.0)(inputs)
        h = module.LSTM(H, return_sequences=True, **extra)(h)
        h = module.GRU(H, return_sequences=True, **extra)(h)
        h = module.SimpleRNN(H)(h)
        model = keras.Model(inputs, keras.layers.Dense(2)(h))
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
        return model

    ours, theirs = build(tlk, {}), build(keras.layers, dict(use_cudnn=False))
    ours.set_weights(theirs.get_weights())
    x = rng.uniform(-1, 1, (4, T, I)).astype(np.float32)
    x[~right_padded([5, 3, 1, 4])] = 0.0
    y = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs.predict(x, verbose=0),
                               atol=ATOL)
    ours.fit(x, y, epochs=1, batch_size=4, verbose=0, shuffle=False)
    theirs.fit(x, y, epochs=1, batch_size=4, verbose=0, shuffle=False)
    assert_all_close(ours.get_weights(), theirs.get_weights(), atol=1e-5, what="weight")


def mask_patterns(rng):
    """Step masks of every pattern, [B, T] with B = 3: what pad_sequences gives by default
    (padding="pre"), holes, a random one, and all-masked rows and batches."""
    post = right_padded(LENS)
    hole = post.copy()
    hole[0, 2] = False  # a masked step inside a sequence
    holes = np.array([[1, 0, 1, 0, 1], [0, 1, 1, 0, 0], [0, 0, 0, 0, 1]], bool)
    return {
        "post": post,
        "pre": post[:, ::-1].copy(),
        "hole": hole,
        "holes": holes,
        "random": rng.uniform(size=(B, T)) < 0.5,
        "none_valid": np.zeros((B, T), bool),
        "last_step_masked": np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]], bool),
    }


def _graph_op_types(fn, *args):
    return {op.type for op in fn.get_concrete_function(*args).graph.get_operations()}


# Every pattern eagerly; in a graph (a trace each, ~1 s) the ones whose structure differs most.
MASK_CASES = [(p, False) for p in ("post", "pre", "hole", "holes", "random", "none_valid",
                                   "last_step_masked")] + [(p, True) for p in ("pre", "holes",
                                                                               "none_valid")]


@pytest.mark.parametrize("pattern, graph", MASK_CASES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_mask_pattern_runs_the_kernel_and_equals_keras(rng, caplog, kind, pattern, graph):
    """A step mask of any pattern runs the fused op, eagerly and in a tf.function traced for
    unknown shapes: outputs (Keras carries the last output over masked steps, zeros before the
    first valid one), last output, final states and every gradient equal Keras', forwards and
    with go_backwards. No Keras loop (no While) and no conditional are in the graph."""
    mask = mask_patterns(rng)[pattern]
    for return_sequences, go_backwards in ((True, False), (True, True), (False, False)):
        ours, theirs = make_pair(kind, return_sequences=return_sequences, return_state=True,
                                 go_backwards=go_backwards)
        same_random_weights(rng, [ours, theirs], (B, T, I))
        x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
        init = [rng.uniform(-1, 1, (B, H)).astype(np.float32) for _ in range(n_states(kind))]
        shapes = [(B, T, H) if return_sequences else (B, H)] + [(B, H)] * n_states(kind)
        cot = cotangents_for(rng, shapes)
        with caplog.at_level("INFO", logger="tf_lstm_ops"):
            if graph:
                spec = tf.TensorSpec([None, None, I], tf.float32)
                run = tf.function(run_with_grads_graph(ours), input_signature=[
                    spec, tf.TensorSpec([None, None], tf.bool),
                    [tf.TensorSpec(None, tf.float32)] * len(shapes),
                    [tf.TensorSpec([None, H], tf.float32)] * n_states(kind)])
                outs, grads = run(x, mask, cot, init)
                types = _graph_op_types(run, x, mask, cot, init)
                assert any(t.endswith("KerasRNN") for t in types)
                assert not {"While", "StatelessWhile", "If", "StatelessIf"} & types
            else:
                outs, grads = run_with_grads(ours, x, init, mask, cot)
        assert "tf_lstm_ops" not in caplog.text  # no fallback, no warning
        outs_k, grads_k = run_with_grads(theirs, x, init, mask, cot)
        assert_all_close([np.asarray(o) for o in outs], outs_k, what="output")
        assert_all_close([np.asarray(g) for g in grads], grads_k, what="gradient")


def run_with_grads_graph(layer):
    """run_with_grads for tf.function: the layer built, its weights read inside."""
    def run(x, mask, cotangents, init=None):
        init = None if init is None else list(init)
        with tf.GradientTape() as tape:
            tape.watch(x)
            if init is not None:
                tape.watch(init)
            outs = layer(x, mask=mask, initial_state=init)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            loss = sum(tf.reduce_sum(tf.cast(o, tf.float32) * c) for o, c in zip(outs, cotangents))
        return outs, tape.gradient(loss, [x] + (init or []) + layer.trainable_weights)
    return run


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_pre_padded_text_classifier_trains_like_keras(rng, caplog, kind):
    """Keras' text-classification recipe: pad_sequences (padding="pre" by default), then
    Embedding(mask_zero=True): fit runs the fused kernel and trains every weight as Keras'
    layer does."""
    sequences = [[3, 7, 2], [5, 1, 4, 4, 9, 2], [8], [6, 6, 2, 3]]
    tokens = keras.utils.pad_sequences(sequences, maxlen=T)
    y = rng.uniform(-1, 1, (4, 1)).astype(np.float32)

    def build(layer_cls, extra):
        keras.utils.set_random_seed(5)
        model = keras.Sequential([keras.Input((T,), dtype="int32"),
                                  keras.layers.Embedding(10, I, mask_zero=True),
                                  layer_cls(H, **extra), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
        return model

    ours_cls, theirs_cls, _ = KINDS[kind]
    ours, theirs = build(ours_cls, {}), build(theirs_cls, dict(use_cudnn=False))
    ours.set_weights(theirs.get_weights())
    with caplog.at_level("INFO", logger="tf_lstm_ops"):
        ours.fit(tokens, y, epochs=2, batch_size=4, verbose=0, shuffle=False)
    theirs.fit(tokens, y, epochs=2, batch_size=4, verbose=0, shuffle=False)
    assert "tf_lstm_ops" not in caplog.text
    assert_all_close(ours.get_weights(), theirs.get_weights(), atol=1e-5, what="weight")


def _relu6(x):
    return keras.activations.relu(x, max_value=6.0)


FALLBACKS = [
    # (kind, constructor arguments, the reason the warning names, training)
    ("lstm", dict(activation="selu"), "activation='selu'", False),
    ("lstm", dict(recurrent_activation="log_sigmoid"), "recurrent_activation", False),
    ("lstm", dict(activation=keras.ops.gelu), "activation='gelu'", False),  # tanh approximation
    ("lstm", dict(activation=_relu6), "activation='_relu6'", False),
    ("lstm", dict(use_cudnn=False), "use_cudnn", False),
    ("lstm", dict(unroll=True), "unroll", False),
    ("gru", dict(recurrent_activation="mish"), "recurrent_activation", False),
    ("rnn_tanh", dict(activation="leaky_relu"), "activation='leaky_relu'", False),
    ("rnn_tanh", dict(unroll=True), "unroll", False),
]


@pytest.mark.parametrize("kind, kwargs, reason, training", FALLBACKS,
                         ids=["%s-%s" % (f[0], "-".join(f[1])) for f in FALLBACKS])
def test_configurations_the_kernel_cannot_serve_run_keras(rng, caplog, kind, kwargs, reason,
                                                         training):
    """Everything Keras accepts is accepted: a configuration the fused kernel cannot serve runs
    Keras' own implementation, with one warning per layer naming the reason, and gives Keras'
    outputs, gradients, weights and config."""
    ours_cls, theirs_cls, extra = KINDS[kind]
    args = dict(extra, **kwargs)
    ours = ours_cls(H, return_sequences=True, **args)
    theirs = theirs_cls(H, return_sequences=True, **args)
    same_random_weights(rng, [ours, theirs], (B, T, I))
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    cot = cotangents_for(rng, [(B, T, H)])
    with caplog.at_level("WARNING", logger="tf_lstm_ops"):
        outs, grads = run_with_grads(ours, x, None, None, cot, training=training)
        run_with_grads(ours, x, None, None, cot, training=training)
    outs_k, grads_k = run_with_grads(theirs, x, None, None, cot, training=training)
    assert_all_close(outs, outs_k, what="output")
    assert_all_close(grads, grads_k, what="gradient")
    warnings = [r.getMessage() for r in caplog.records if r.name == "tf_lstm_ops"]
    assert len(warnings) == 1 and reason in warnings[0], warnings
    config, config_k = ours.get_config(), theirs.get_config()
    config.pop("name"), config_k.pop("name")
    assert config == config_k


def test_recurrent_dropout_at_inference_runs_the_kernel(rng, caplog):
    # recurrent_dropout acts only while training: inference keeps the fused kernel.
    ours, theirs = make_pair("lstm", recurrent_dropout=0.3, return_sequences=True)
    same_random_weights(rng, [ours, theirs], (B, T, I))
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    with caplog.at_level("WARNING", logger="tf_lstm_ops"):
        np.testing.assert_allclose(ours(x, training=False), theirs(x, training=False), atol=ATOL)
    assert not [r for r in caplog.records if r.name == "tf_lstm_ops"]


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (tlk.CudnnGRU, dict(num_proj=2), "num_proj"),
        (tlk.CudnnLSTM, dict(num_proj=3), "num_proj"),
        (tlk.CudnnRNN, dict(rnn_mode="lstmp"), "rnn_mode"),
    ],
)
def test_invalid_cudnn_layer_arguments_fail_at_construction(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(H, **kwargs)


def test_what_keras_rejects_is_rejected():
    # An error stays only where Keras raises one itself.
    for cls in (tlk.LSTM, keras.layers.LSTM):
        with pytest.raises(ValueError):
            cls(H, activation="no_such_activation")


@pytest.mark.parametrize("activation", ["tanh", tf.tanh, keras.activations.tanh, keras.ops.tanh])
def test_accepted_activation_spellings(activation):
    assert tlk.LSTM(H, activation=activation).activation is not None
    assert tlk.SimpleRNN(H, activation=activation)._rnn_mode == "rnn_tanh"
    assert tlk.SimpleRNN(H, activation=tf.nn.relu)._rnn_mode == "rnn_relu"


# Keras' activations the kernel fuses, each spelled as users spell it (docs/cudnn_rnn.md §4.7).
FUSED_ACTIVATIONS = ["tanh", "sigmoid", "relu", "hard_sigmoid", None, "elu", "softsign", "swish",
                     "gelu", tf.nn.silu, keras.ops.elu]


def _activation_id(a):
    return getattr(a, "__name__", str(a))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("activation", FUSED_ACTIVATIONS, ids=_activation_id)
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_fused_activations_run_the_kernel_and_equal_keras(rng, caplog, kind, activation, graph):
    """Each fused activation as `activation` and (LSTM, GRU) as `recurrent_activation`, with a
    pre-padded mask, go_backwards and return_state, in float64 (so that rounding cannot hide a
    wrong term: unbounded gates amplify it): the kernel runs (no fallback warning; the op with
    activations in the graph) and outputs, states and every gradient equal Keras'."""
    variants = [dict(activation=activation)]
    if kind != "rnn_tanh":
        variants.append(dict(recurrent_activation=activation))
    for args in variants:
        ours, theirs = make_pair(kind, return_sequences=True, return_state=True,
                                 go_backwards=bool(graph), dtype="float64", **args)
        same_random_weights(rng, [ours, theirs], (B, T, I), scale=1.5)
        x = rng.uniform(-1.5, 1.5, (B, T, I))
        init = [rng.uniform(-1, 1, (B, H)) for _ in range(n_states(kind))]
        mask = mask_patterns(rng)["pre"]
        shapes = [(B, T, H)] + [(B, H)] * n_states(kind)
        cot = cotangents_for(rng, shapes)  # float32, exact in float64
        with caplog.at_level("INFO", logger="tf_lstm_ops"):
            if graph:
                run = tf.function(run_with_grads_graph(ours))
                outs, grads = run(tf.constant(x), tf.constant(mask), cot,
                                  [tf.constant(s) for s in init])
            else:
                outs, grads = run_with_grads(ours, x, init, mask, cot)
        assert "tf_lstm_ops" not in caplog.text, args
        outs_k, grads_k = run_with_grads(theirs, x, init, mask, cot)
        # TF's float64 gelu (erfc) is off by up to 1.7e-7 relative (ours: 1e-15, against
        # Python's math.erfc): a looser bound there
        tol = 1e-6 if _activation_id(activation) == "gelu" else 1e-9
        assert_all_close([np.asarray(o) for o in outs], outs_k, atol=tol, rtol=tol,
                         what="output")
        assert_all_close([np.asarray(g) for g in grads], grads_k, atol=tol, rtol=tol,
                         what="gradient")
    # the last layer's activations: cuDNN's own ones run the op's cuDNN cells (no activation
    # attributes), any other the op with them
    cudnn = _activation_id(activation) in (("tanh", "relu") if kind == "rnn_tanh" else
                                           ("sigmoid",))
    graph = tf.function(lambda x: ours(x)).get_concrete_function(tf.constant(x)).graph
    attrs = [(op.get_attr("activation"), op.get_attr("recurrent_activation"))
             for op in graph.get_operations() if op.type.endswith("KerasRNN")]
    assert attrs and all((a, r) == (b"", b"") for a, r in attrs) == cudnn, attrs


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_fused_activations_are_as_accurate_as_keras_in_float32(rng, kind):
    """float32 against the float64 computation of the same layer (a stable one: small weights,
    so that the errors measure rounding, not a chaotic recurrence): the RMS error of ours,
    pooled over the outputs and every gradient, is at most Keras' own float32 layer's (x 1.25:
    the two sum in different orders; + 1e-8, a sixth of float32's unit roundoff, below which
    one rounding more or less decides, e.g. a slope of fl(1/6) times dh where Keras divides dh
    by 6), for every fused activation."""
    b, t, i, h = 8, 12, 6, 8
    for activation in FUSED_ACTIVATIONS:
        args = dict(activation=activation)
        if kind != "rnn_tanh":
            args["recurrent_activation"] = "hard_sigmoid" if activation == "sigmoid" else "sigmoid"
        layers = {}
        for name, dtype in (("ours", "float32"), ("keras", "float32"), ("truth", "float64")):
            cls = KINDS[kind][0] if name == "ours" else KINDS[kind][1]
            extra = dict(use_cudnn=False) if name != "ours" and kind != "rnn_tanh" else {}
            layers[name] = cls(h, return_sequences=True, dtype=dtype, **args, **extra)
        same_random_weights(rng, list(layers.values()), (b, t, i), scale=0.4)
        x = rng.uniform(-1, 1, (b, t, i)).astype(np.float32)
        cot = cotangents_for(rng, [(b, t, h)])
        results = {name: run_with_grads(layer, x, None, None, cot)
                   for name, layer in layers.items()}
        truth = results["truth"][0] + results["truth"][1]

        def rms(name):
            got = results[name][0] + results[name][1]
            errors = [((np.asarray(a, np.float64) - e) / max(1e-3, float(np.max(np.abs(e)))))
                      .ravel() for a, e in zip(got, truth)]
            return float(np.sqrt(np.mean(np.concatenate(errors) ** 2)))

        assert rms("ours") <= 1.25 * rms("keras") + 1e-8, (
            _activation_id(activation), rms("ours"), rms("keras"))


def test_every_layer_disables_jit():
    from keras.src.trainers.trainer import model_supports_jit

    layers = [tlk.LSTM(H), tlk.GRU(H), tlk.SimpleRNN(H), tlk.CudnnLSTM(H), tlk.CudnnGRU(H),
              tlk.LSTMBlockCell(H), tlk.CudnnRNN(H, rnn_mode="rnn_relu")]
    assert all(layer.supports_jit is False for layer in layers)
    inputs = keras.Input((T, I))
    h = tlk.LSTM(H, return_sequences=True)(inputs)
    h = keras.layers.RNN(tlk.LSTMBlockCell(H))(h)
    model = keras.Model(inputs, h)
    assert not model_supports_jit(model)
    with pytest.warns(UserWarning, match="doesn't support `jit_compile=True`"):
        model.compile(loss="mse", jit_compile=True)  # Keras turns XLA off
    assert model.jit_compile is False


# ------------------------------------------------------------------------------------------------
# Bidirectional
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mask_pattern", [None, "post", "pre", "holes"])
@pytest.mark.parametrize("return_sequences", [False, True])
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_bidirectional_equals_keras(rng, kind, return_sequences, mask_pattern):
    """keras.layers.Bidirectional around ours (it forces zero_output_for_mask and builds the
    backward copy from our config) equals Bidirectional around Keras' layer."""
    ours_layer, theirs_layer = make_pair(kind, return_sequences=return_sequences,
                                         return_state=True)
    ours = keras.layers.Bidirectional(ours_layer)
    theirs = keras.layers.Bidirectional(theirs_layer)
    assert type(ours.backward_layer) is type(ours_layer) and ours.backward_layer.go_backwards
    same_random_weights(rng, [ours, theirs], (B, T, I))
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    out_shape = (B, T, 2 * H) if return_sequences else (B, 2 * H)
    cot = cotangents_for(rng, [out_shape] + [(B, H)] * (2 * n_states(kind)))
    mask = None if mask_pattern is None else mask_patterns(rng)[mask_pattern]
    outs, grads = run_with_grads(ours, x, None, mask, cot)
    outs_k, grads_k = run_with_grads(theirs, x, None, mask, cot)
    assert_all_close(outs, outs_k, what="output")
    assert_all_close(grads, grads_k, what="gradient")


# ------------------------------------------------------------------------------------------------
# mixed precision
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_mixed_precision_policy(rng, kind, policy):
    """Computes in the policy's compute dtype with float32 variables; close to the float32
    result of Keras' layer with the same weights, outputs and gradients."""
    ours, _ = make_pair(kind, return_sequences=True, return_state=True, dtype=policy)
    _, theirs = make_pair(kind, return_sequences=True, return_state=True)
    same_random_weights(rng, [ours, theirs], (B, T, I), scale=0.5)
    assert all(w.dtype == "float32" for w in ours.weights)
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    cot = cotangents_for(rng, [(B, T, H)] + [(B, H)] * n_states(kind))
    outs, grads = run_with_grads(ours, x, None, right_padded(LENS), cot)
    compute = policy.split("_")[1]
    assert all(str(o.dtype) == compute for o in outs)
    assert grads[-1].dtype == np.float32  # variable gradients are float32
    outs_k, grads_k = run_with_grads(theirs, x, None, right_padded(LENS), cot)
    tol = 3e-3 if policy == "mixed_float16" else 3e-2
    assert_all_close([o.astype(np.float32) for o in outs], outs_k, atol=tol, rtol=tol)
    assert_all_close([g.astype(np.float32) for g in grads], grads_k, atol=4 * tol, rtol=4 * tol)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_relu"])
def test_float64_policy_equals_keras(rng, kind):
    ours, theirs = make_pair(kind, return_sequences=True, return_state=True, dtype="float64")
    same_random_weights(rng, [ours, theirs], (B, T, I))
    x = rng.uniform(-1, 1, (B, T, I))
    outs = [np.asarray(o) for o in ours(x, mask=tf.constant(right_padded(LENS)))]
    outs_k = [np.asarray(o) for o in theirs(x, mask=tf.constant(right_padded(LENS)))]
    assert all(o.dtype == np.float64 for o in outs)
    assert_all_close(outs, outs_k, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_cudnn_layer(rng, policy):
    """CudnnLSTM under a mixed policy: float32 params, compute-dtype outputs and states close to
    the float32 layer with the same params."""
    mixed = tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, num_proj=3, return_sequences=True,
                          return_state=True, dtype=policy)
    plain = tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, num_proj=3, return_sequences=True,
                          return_state=True)
    for layer in (mixed, plain):
        layer.build((B, T, I))
    assert mixed.params.dtype == "float32"
    mixed.set_weights(plain.get_weights())
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    mask = tf.constant(right_padded(LENS))
    outs = mixed(x, mask=mask)
    assert all(o.dtype == policy.split("_")[1] for o in outs)
    tol = 5e-3 if policy == "mixed_float16" else 4e-2
    assert_all_close([np.asarray(tf.cast(o, tf.float32)) for o in outs],
                     [np.asarray(o) for o in plain(x, mask=mask)], atol=tol, rtol=tol)


def test_mixed_float16_model_fit(rng):
    """A model under the global mixed_float16 policy (Keras wraps the optimizer in a
    LossScaleOptimizer) trains: finite, decreasing loss."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inputs = keras.Input((T, I))
        h = tlk.LSTM(8, return_sequences=True)(inputs)
        h = tlk.GRU(8)(h)
        outputs = keras.layers.Dense(1, dtype="float32")(h)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x = rng.uniform(-1, 1, (16, T, I)).astype(np.float32)
    y = x.sum(axis=(1, 2))[:, None].astype(np.float32) * 0.1
    loss = model.fit(x, y, epochs=8, batch_size=16, verbose=0).history["loss"]
    assert np.all(np.isfinite(loss)) and loss[-1] < loss[0]


# ------------------------------------------------------------------------------------------------
# LSTMBlockCell in keras.layers.RNN
# ------------------------------------------------------------------------------------------------

def keras_lstm_to_block_cell(kernel, recurrent_kernel, bias, forget_bias):
    """Keras LSTM weights (IFCO blocks) -> LSTMBlockCell weights (ICFO, forget_bias folded)."""
    perm = np.concatenate([np.arange(H) + g * H for g in (0, 2, 1, 3)])
    w = np.concatenate([kernel, recurrent_kernel], 0)[:, perm]
    b = bias[perm].copy()
    b[2 * H:3 * H] -= forget_bias
    return w, b, perm


@pytest.mark.parametrize("forget_bias", [0.0, 1.0])
def test_block_cell_in_rnn_equals_keras_lstm(rng, forget_bias):
    """RNN(LSTMBlockCell) with Keras' LSTM weights rearranged: same outputs (masked, generic
    loop) and gradients as keras.layers.LSTM."""
    theirs = keras.layers.LSTM(H, return_sequences=True, return_state=True, use_cudnn=False)
    ws = same_random_weights(rng, [theirs], (B, T, I))
    ours = keras.layers.RNN(tlk.LSTMBlockCell(H, forget_bias=forget_bias),
                            return_sequences=True, return_state=True)
    ours.build((B, T, I))
    w, b, perm = keras_lstm_to_block_cell(*ws, forget_bias)
    ours.set_weights([w, b])
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    init = [rng.uniform(-1, 1, (B, H)).astype(np.float32) for _ in range(2)]
    cot = cotangents_for(rng, [(B, T, H), (B, H), (B, H)])
    mask = right_padded(LENS)
    outs, (dx, dh, dc, dw, db) = run_with_grads(ours, x, init, mask, cot)
    outs_k, (dx_k, dh_k, dc_k, dk_k, drk_k, db_k) = run_with_grads(theirs, x, init, mask, cot)
    assert_all_close(outs, outs_k, what="output")
    assert_all_close([dx, dh, dc, dw, db],
                     [dx_k, dh_k, dc_k, np.concatenate([dk_k, drk_k], 0)[:, perm], db_k[perm]],
                     what="gradient")


class PeepholeReferenceCell(keras.layers.Layer):
    """LSTMBlockCell's math in Keras ops (for autodiff gradients), sharing the cell's weights;
    the clip's gradient is straight-through, as TF's."""

    def __init__(self, cell, **kwargs):
        super().__init__(**kwargs)
        self.cell = cell
        self.state_size = [H, H]

    def call(self, x, states):
        c = self.cell
        h_prev, c_prev = states
        g = keras.ops.matmul(keras.ops.concatenate([x, h_prev], 1), c.kernel) + c.bias
        gi, gc, gf, go = keras.ops.split(g, 4, axis=1)
        i = keras.ops.sigmoid(gi + c_prev * c.w_i_diag)
        f = keras.ops.sigmoid(gf + c.forget_bias + c_prev * c.w_f_diag)
        cs = i * keras.ops.tanh(gc) + f * c_prev
        cs = cs + keras.ops.stop_gradient(keras.ops.clip(cs, -c.cell_clip, c.cell_clip) - cs)
        o = keras.ops.sigmoid(go + cs * c.w_o_diag)
        h = o * keras.ops.tanh(cs)
        return h, [h, cs]


def test_block_cell_peephole_and_clip(rng):
    """Peepholes + cell_clip + forget_bias: forward equals the float64 NumPy reference of the
    block ops, gradients equal autodiff through the same math in Keras ops."""
    cell = tlk.LSTMBlockCell(H, forget_bias=0.7, cell_clip=0.4, use_peephole=True)
    ours = keras.layers.RNN(cell, return_sequences=True, return_state=True)
    ours.build((B, T, I))
    ws = [rng.uniform(-1.5, 1.5, np.shape(w)).astype(np.float32) for w in ours.get_weights()]
    ours.set_weights(ws)
    assert [w.name for w in cell.weights] == ["kernel", "bias", "w_i_diag", "w_f_diag",
                                              "w_o_diag"]
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    init = [rng.uniform(-1, 1, (B, H)).astype(np.float32) for _ in range(2)]
    expected = ref.block_lstm(T, x.transpose(1, 0, 2).astype(np.float64), init[1], init[0],
                              ws[0], ws[2], ws[3], ws[4], ws[1], forget_bias=0.7, cell_clip=0.4,
                              use_peephole=True, layout="ICFO")
    assert np.max(np.abs(expected["cs"])) >= 0.4 - 1e-6  # the clip is active
    cot = cotangents_for(rng, [(B, T, H), (B, H), (B, H)])
    outs, grads = run_with_grads(ours, x, init, None, cot)
    np.testing.assert_allclose(outs[0], expected["h"].transpose(1, 0, 2), atol=ATOL)
    np.testing.assert_allclose(outs[2], expected["cs"][-1], atol=ATOL)
    reference = keras.layers.RNN(PeepholeReferenceCell(cell), return_sequences=True,
                                 return_state=True)
    outs_r, grads_r = run_with_grads(reference, x, init, None, cot)
    assert_all_close(outs, outs_r, what="output")
    assert_all_close(grads[:3], grads_r[:3], what="gradient")  # x, h0, c0
    by_name = dict(zip([w.path for w in ours.trainable_weights], grads[3:]))
    by_name_r = dict(zip([w.path for w in reference.trainable_weights], grads_r[3:]))
    assert by_name.keys() == by_name_r.keys() and len(by_name) == 5
    for k in by_name:
        np.testing.assert_allclose(by_name[k], by_name_r[k], atol=ATOL, rtol=1e-5, err_msg=k)


def test_block_cell_config_and_mixed_bfloat16(rng):
    cell = tlk.LSTMBlockCell(4, forget_bias=0.5, cell_clip=2.0, use_peephole=True,
                             dtype="mixed_bfloat16")
    clone = tlk.LSTMBlockCell.from_config(cell.get_config())
    assert clone.get_config() == cell.get_config()
    assert clone.dtype_policy.name == "mixed_bfloat16"
    mixed = keras.layers.RNN(clone, return_sequences=True, dtype="mixed_bfloat16")
    plain = keras.layers.RNN(tlk.LSTMBlockCell(4, forget_bias=0.5, cell_clip=2.0,
                                               use_peephole=True), return_sequences=True)
    ws = same_random_weights(rng, [mixed, plain], (2, 3, 5), scale=0.5)
    assert all(w.dtype == "float32" for w in clone.weights) and len(ws) == 5
    x = rng.uniform(-1, 1, (2, 3, 5)).astype(np.float32)
    y = mixed(x)
    assert y.dtype == tf.bfloat16
    np.testing.assert_allclose(np.asarray(tf.cast(y, tf.float32)), np.asarray(plain(x)),
                               atol=3e-2)


# ------------------------------------------------------------------------------------------------
# multi-layer CudnnRNN layers
# ------------------------------------------------------------------------------------------------

CUDNN_CONFIGS = {
    "lstm-L2-bidi-proj": dict(rnn_mode="lstm", num_layers=2, bidirectional=True, num_proj=2,
                              units=4),
    "gru-L2-bidi": dict(rnn_mode="gru", num_layers=2, bidirectional=True, units=3),
    "lstm-L3": dict(rnn_mode="lstm", num_layers=3, units=3),
    "relu-L1-time-major": dict(rnn_mode="rnn_relu", num_layers=1, units=3, time_major=True),
}


@pytest.mark.parametrize("name", list(CUDNN_CONFIGS))
def test_params_size_matches_the_op(name):
    cfg = dict(CUDNN_CONFIGS[name])
    cfg.pop("time_major", None)
    units = cfg.pop("units")
    expected = tf_lstm_ops.raw.CudnnRNNParamsSize(
        num_layers=cfg["num_layers"], num_units=units, input_size=I, T=tf.float32, S=tf.int32,
        rnn_mode=cfg["rnn_mode"],
        direction="bidirectional" if cfg.get("bidirectional") else "unidirectional",
        num_proj=cfg.get("num_proj") or 0)
    got = tlk.params_size(cfg["rnn_mode"], cfg["num_layers"], units, I,
                          cfg.get("bidirectional", False), cfg.get("num_proj") or 0)
    assert got == int(expected[0])
    layer = tlk.CudnnRNN(units, **cfg)
    layer.build((B, T, I))
    assert layer.params.shape == (got,)


@pytest.mark.parametrize("name", list(CUDNN_CONFIGS))
def test_cudnn_layer_equals_the_raw_op(rng, name):
    """Outputs, states and gradients of the layer (masked, initial states) equal a direct
    tf_lstm_ops.raw.CudnnRNNV3 call (time-major) with the layer's params."""
    cfg = dict(CUDNN_CONFIGS[name])
    units = cfg.pop("units")
    time_major = cfg.get("time_major", False)
    layer = tlk.CudnnRNN(units, return_sequences=True, return_state=True, **cfg)
    lstm = cfg["rnn_mode"] == "lstm"
    D = 2 if cfg.get("bidirectional") else 1
    LD, Hr = cfg["num_layers"] * D, cfg.get("num_proj") or units
    x_bm = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    x = x_bm.transpose(1, 0, 2) if time_major else x_bm
    mask = right_padded(LENS)
    init = [rng.uniform(-1, 1, (LD, B, Hr)).astype(np.float32)]
    if lstm:
        init.append(rng.uniform(-1, 1, (LD, B, units)).astype(np.float32))
    cot = cotangents_for(rng, [(B, T, D * Hr)] + [np.shape(s) for s in init])
    if time_major:
        cot[0] = tf.transpose(cot[0], [1, 0, 2])
    layer.build(x.shape)
    layer.params.assign(rng.uniform(-0.6, 0.6, layer.params.shape).astype(np.float32))
    outs, grads = run_with_grads(layer, x, init, mask.T if time_major else mask, cot)

    xt = tf.constant(x_bm.transpose(1, 0, 2))
    init_t = [tf.constant(s) for s in init]
    params = tf.constant(layer.params.numpy())
    with tf.GradientTape() as tape:
        tape.watch([xt, params] + init_t)
        out = tf_lstm_ops.raw.CudnnRNNV3(
            input=xt, input_h=init_t[0], input_c=init_t[1] if lstm else tf.constant(0.0),
            params=params, sequence_lengths=tf.constant(LENS, tf.int32),
            rnn_mode=cfg["rnn_mode"],
            direction="bidirectional" if D == 2 else "unidirectional",
            num_proj=cfg.get("num_proj") or 0, is_training=True, time_major=True)
        raw = [out.output, out.output_h] + ([out.output_c] if lstm else [])
        raw_cot = [tf.transpose(cot[0], [1, 0, 2]) if not time_major else cot[0]] + cot[1:]
        loss = sum(tf.reduce_sum(o * c) for o, c in zip(raw, raw_cot))
    g = tape.gradient(loss, [xt, params] + init_t)
    y = np.asarray(raw[0]) if time_major else np.asarray(raw[0]).transpose(1, 0, 2)
    assert_all_close(outs, [y] + [np.asarray(s) for s in raw[1:]], what="output")
    dx = np.asarray(g[0]) if time_major else np.asarray(g[0]).transpose(1, 0, 2)
    assert_all_close([grads[0]] + grads[1:1 + len(init)] + [grads[-1]],
                     [dx] + [np.asarray(t) for t in g[2:]] + [np.asarray(g[1])],
                     what="gradient")
    # return_sequences=False: the top layer's final h ([forward, backward] for bidirectional)
    layer.return_sequences = False
    last = np.asarray(layer(x, initial_state=init,
                            mask=tf.constant(mask.T if time_major else mask))[0])
    h_top = np.asarray(raw[1])[-D:]
    np.testing.assert_allclose(last, np.concatenate(list(h_top), -1), atol=ATOL)


def keras_to_canonical(mode, kernel, recurrent_kernel, bias):
    """One Keras LSTM / GRU(reset_after) layer's weights -> canonical (weights, biases)."""
    G = 4 if mode == "lstm" else 3
    order = range(4) if mode == "lstm" else (1, 0, 2)  # cuDNN gate g is Keras gate order[g]
    blocks = lambda m: [m[..., k * H:(k + 1) * H] for k in order]  # noqa: E731
    weights = [w.T for w in blocks(kernel)] + [r.T for r in blocks(recurrent_kernel)]
    if mode == "lstm":
        biases = [np.zeros(H, np.float32)] * G + blocks(bias)
    else:
        biases = blocks(bias[0]) + blocks(bias[1])
    return weights, biases


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_cudnn_layer_equals_stacked_keras_bidirectional_layers(rng, mode):
    """CudnnLSTM/CudnnGRU(num_layers=2, bidirectional=True) with set_canonical_weights from two
    stacked keras.layers.Bidirectional(LSTM/GRU) equals them (masked; Bidirectional zeroes the
    masked outputs, as cuDNN); get_canonical_weights gives back what was set."""
    keras_cls = keras.layers.LSTM if mode == "lstm" else keras.layers.GRU
    stack = [keras.layers.Bidirectional(keras_cls(H, return_sequences=True, use_cudnn=False))
             for _ in range(2)]
    stack[0].build((B, T, I))
    stack[1].build((B, T, 2 * H))
    kw = []
    for bi in stack:
        bi.set_weights([rng.uniform(-0.8, 0.8, np.shape(w)).astype(np.float32)
                        for w in bi.get_weights()])
        kw += bi.get_weights()  # forward kernel, recurrent, bias, then backward's
    cls = tlk.CudnnLSTM if mode == "lstm" else tlk.CudnnGRU
    ours = cls(H, num_layers=2, bidirectional=True, return_sequences=True)
    ours.build((B, T, I))
    weights, biases = [], []
    for p in range(4):  # pseudo-layer = layer * 2 + direction = Keras' weight order
        w, b = keras_to_canonical(mode, *kw[3 * p:3 * p + 3])
        weights += w
        biases += b
    ours.set_canonical_weights(weights, biases)
    got_w, got_b = ours.get_canonical_weights()
    assert_all_close(got_w, weights, atol=0, rtol=0, what="weight")
    assert_all_close(got_b, biases, atol=0, rtol=0, what="bias")
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    mask = tf.constant(right_padded([5, 2, 4]))
    expected = stack[1](stack[0](x, mask=mask), mask=mask)
    np.testing.assert_allclose(np.asarray(ours(x, mask=mask)), np.asarray(expected), atol=ATOL)


def test_cudnn_canonical_weights_round_trip_and_shape_errors(rng):
    layer = tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, num_proj=2)
    with pytest.raises(ValueError, match="not built"):
        layer.get_canonical_weights()
    layer.build((None, None, I))
    w_shapes, b_shapes = layer.canonical_shapes()
    assert len(w_shapes) == 4 * 9 and len(b_shapes) == 4 * 8
    assert w_shapes[:9] == [(4, I)] * 4 + [(4, 2)] * 4 + [(2, 4)]
    assert w_shapes[18] == (4, 4)  # layer 1 reads [forward, backward] projected outputs
    weights = [rng.uniform(-1, 1, s).astype(np.float32) for s in w_shapes]
    biases = [rng.uniform(-1, 1, s).astype(np.float32) for s in b_shapes]
    layer.set_canonical_weights(weights, biases)
    got_w, got_b = layer.get_canonical_weights()
    assert_all_close(got_w + got_b, weights + biases, atol=0, rtol=0)
    with pytest.raises(ValueError, match="expected weight shapes"):
        layer.set_canonical_weights(weights[:-1], biases)


def test_cudnn_initialisation_like_keras():
    """Initial canonical weights follow Keras' initialisers: zero input biases, forget gate
    recurrent bias 1 (unit_forget_bias), orthogonal recurrent blocks."""
    layer = tlk.CudnnLSTM(H, num_layers=1)
    layer.build((None, None, I))
    weights, biases = layer.get_canonical_weights()
    np.testing.assert_array_equal(np.concatenate(biases[:4]), 0.0)
    np.testing.assert_array_equal(biases[5], 1.0)
    recurrent = np.concatenate([r.T for r in weights[4:8]], 1)  # Keras' [H, 4H]
    np.testing.assert_allclose(recurrent @ recurrent.T, np.eye(H), atol=1e-5)


def test_cudnn_dropout_between_layers(rng):
    layer = tlk.CudnnGRU(H, num_layers=2, dropout=0.5, seed=3, return_sequences=True)
    x = tf.constant(rng.uniform(-1, 1, (B, T, I)).astype(np.float32))
    inference = np.asarray(layer(x, training=False))
    np.testing.assert_array_equal(np.asarray(layer(x, training=False)), inference)
    with tf.GradientTape() as tape:
        trained = layer(x, training=True)
        loss = tf.reduce_sum(trained)
    grad = tape.gradient(loss, layer.params)
    assert np.max(np.abs(np.asarray(trained) - inference)) > 1e-3
    assert np.all(np.isfinite(np.asarray(grad))) and np.any(np.asarray(grad) != 0)


def test_cudnn_layer_in_a_model_trains():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((T, I)),
        tlk.CudnnLSTM(4, num_layers=2, bidirectional=True, num_proj=3, return_sequences=True),
        tlk.CudnnGRU(4),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
    x = np.random.default_rng(0).uniform(-1, 1, (16, T, I)).astype(np.float32)
    y = x.mean(axis=(1, 2))[:, None]
    loss = model.fit(x, y, epochs=10, batch_size=8, verbose=0).history["loss"]
    assert loss[-1] < 0.5 * loss[0]


# ------------------------------------------------------------------------------------------------
# XLA
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh"])
def test_layers_compiled_by_xla_run_keras_implementation(rng, caplog, kind):
    """Under tf.function(jit_compile=True) the custom op has no kernel: the layer takes Keras'
    XLA-compilable loop, with Keras' outputs and gradients and one warning."""
    ours, theirs = make_pair(kind, return_sequences=True)
    same_random_weights(rng, [ours, theirs], (B, T, I))
    x = rng.uniform(-1, 1, (B, T, I)).astype(np.float32)
    cot = cotangents_for(rng, [(B, T, H)])
    with caplog.at_level("WARNING", logger="tf_lstm_ops"):
        outs, grads = tf.function(run_with_grads_graph(ours), jit_compile=True)(
            tf.constant(x), None, cot)
    outs_k, grads_k = run_with_grads(theirs, x, None, None, cot)
    assert_all_close([np.asarray(o) for o in outs], outs_k, what="output")
    assert_all_close([np.asarray(g) for g in grads], grads_k[:1] + grads_k[-3:], what="gradient")
    warnings = [r.getMessage() for r in caplog.records if r.name == "tf_lstm_ops"]
    assert len(warnings) == 1 and "XLA" in warnings[0], warnings


def test_model_compile_jit_compile_trains_like_keras(rng):
    def build(module, extra):
        inputs = keras.Input((T, I))
        h = module.LSTM(H, return_sequences=True, **extra)(inputs)
        h = module.GRU(H, **extra)(h)
        model = keras.Model(inputs, keras.layers.Dense(2)(h))
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse", jit_compile=True)
        return model

    ours, theirs = build(tlk, {}), build(keras.layers, dict(use_cudnn=False))
    ours.set_weights(theirs.get_weights())
    x = rng.uniform(-1, 1, (4, T, I)).astype(np.float32)
    y = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    ours.fit(x, y, epochs=2, batch_size=4, verbose=0, shuffle=False)
    theirs.fit(x, y, epochs=2, batch_size=4, verbose=0, shuffle=False)
    assert_all_close(ours.get_weights(), theirs.get_weights(), atol=1e-5, what="weight")


def test_raw_op_compiled_by_xla_names_the_op_and_the_way_out():
    x = tf.zeros([T, B, I])
    params = tf.zeros([tlk.params_size("lstm", 1, H, I)])
    call = tf.function(lambda: tf_lstm_ops.raw.CudnnRNNV3(
        input=x, input_h=tf.zeros([1, B, H]), input_c=tf.zeros([1, B, H]), params=params,
        sequence_lengths=tf.fill([B], T)), jit_compile=True)
    with pytest.raises(tf.errors.UnimplementedError,
                       match=r"TfLstm>CudnnRNNV3 has no XLA kernel.*tf_lstm_ops\.keras"):
        call()


BAD_MASKS = {  # for inputs [B, T, I]
    "more_steps": np.ones((B, T + 1), bool),
    "no_steps": np.ones((B, 0), bool),
    "more_examples": np.ones((B + 1, T), bool),
    "rank1": np.ones((B,), bool),
}


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("mask", list(BAD_MASKS))
@pytest.mark.parametrize("make", [lambda: tlk.LSTM(H), lambda: tlk.GRU(H),
                                  lambda: tlk.SimpleRNN(H), lambda: tlk.CudnnLSTM(H)],
                         ids=["LSTM", "GRU", "SimpleRNN", "CudnnLSTM"])
def test_a_mask_that_does_not_fit_the_inputs_is_an_error(rng, make, mask, graph):
    """Its lengths would describe other steps: never a silent result. Eagerly and where only the
    data shows it, InvalidArgumentError; a static mismatch in a graph fails while tracing."""
    layer = make()
    x = tf.constant(rng.uniform(-1, 1, (B, T, I)).astype(np.float32))
    call = tf.function(lambda x, m: layer(x, mask=m)) if graph else (
        lambda x, m: layer(x, mask=m))
    static = graph and mask in ("more_examples", "rank1")  # Keras' RNN checks shapes statically
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError) if static
                       else tf.errors.InvalidArgumentError):
        call(x, tf.constant(BAD_MASKS[mask]))
