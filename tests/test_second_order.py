"""Second derivatives and JVPs through both families, in float64: the CudnnRNN family (the
gradients of the Backprop ops, tf_lstm_ops/_gradients/cudnn_rnn_composite.py) against finite
differences of our own first derivatives (the kernels'), of the forward op, and against
keras.layers, whose loop is differentiable twice; the LSTM block family (its gradient ops'
gradients: the fused BlockLSTMFullGradGrad on the CPU, the composite elsewhere,
tf_lstm_ops/_gradients/block_lstm_composite.py) against finite differences and the composite."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_lstm_ops.keras as tlk
from tf_lstm_ops import raw


def model_inputs(rng, mode, L=1, direction="unidirectional", time_major=True, proj=0, H=2, I=2,
                 T=3, B=2):
    D = 2 if direction == "bidirectional" else 1
    Hr = proj or H
    size = int(raw.CudnnRNNParamsSize(num_layers=L, num_units=H, input_size=I, T=tf.float64,
                                      S=tf.int64, rnn_mode=mode, direction=direction,
                                      num_proj=proj)[0])

    def state(n):
        return tf.constant(0.5 * rng.standard_normal((L * D, B, n) if time_major else
                                                     (B, L * D, n)))

    x = tf.constant(rng.standard_normal((T, B, I) if time_major else (B, T, I)))
    out_shape = (T, B, D * Hr) if time_major else (B, T, D * Hr)
    return (dict(input=x, input_h=state(Hr), input_c=state(H),
                 params=tf.constant(0.5 * rng.standard_normal(size))),
            tf.constant(rng.standard_normal(out_shape)))


def first_derivative(forward, dy, mode):
    """θ -> the gradient of a loss using every output w.r.t. θ = (input, input_h, input_c,
    params), flattened: what the registered gradient (the Backprop op) computes."""

    @tf.function
    def grad(x, h, c, p):
        with tf.GradientTape() as tape:
            tape.watch([x, h, c, p])
            output, output_h, output_c = forward(x, h, c, p)
            loss = tf.reduce_sum(output * dy) + tf.reduce_sum(tf.sin(output_h))
            if mode == "lstm":
                loss += tf.reduce_sum(output_c ** 2)
        grads = tape.gradient(loss, [x, h, c, p], unconnected_gradients="zero")
        return tf.concat([tf.reshape(g, [-1]) for g in grads], 0)

    return grad


def assert_second_derivative_matches(forward, inputs, dy, mode):
    theta = [inputs[k] for k in ("input", "input_h", "input_c", "params")]
    analytic, numeric = tf.test.compute_gradient(first_derivative(forward, dy, mode), theta,
                                                 delta=1e-5)
    for a, n in zip(analytic, numeric):
        np.testing.assert_allclose(a, n, atol=2e-7)


def assert_directional_second_derivative_matches(rng, forward, inputs, dy, mode):
    """<w, H d> for random w, d: the double backpropagation against central differences of the
    first derivative along d (a cheaper check than the whole Hessian, for larger models)."""
    theta = [inputs[k] for k in ("input", "input_h", "input_c", "params")]
    grad = first_derivative(forward, dy, mode)
    w = tf.constant(rng.standard_normal(grad(*theta).shape))
    d = [tf.constant(rng.standard_normal(t.shape)) for t in theta]
    with tf.GradientTape() as tape:
        tape.watch(theta)
        projection = tf.reduce_sum(grad(*theta) * w)
    analytic = sum(float(tf.reduce_sum(g * e)) for g, e in
                   zip(tape.gradient(projection, theta, unconnected_gradients="zero"), d))
    eps = 1e-5
    plus = grad(*[t + eps * e for t, e in zip(theta, d)])
    minus = grad(*[t - eps * e for t, e in zip(theta, d)])
    numeric = float(tf.reduce_sum((plus - minus) / (2 * eps) * w))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6)


def v3(mode, lengths, **attrs):
    def forward(x, h, c, p):
        out = raw.CudnnRNNV3(input=x, input_h=h, input_c=c, params=p, sequence_lengths=lengths,
                             rnn_mode=mode, is_training=True, **attrs)
        return out.output, out.output_h, out.output_c
    return forward


CASES = [  # (mode, L, direction, time_major, num_proj, lengths)
    ("lstm", 1, "unidirectional", True, 0, [3, 3]),
    ("gru", 1, "unidirectional", True, 0, [3, 3]),
    ("rnn_tanh", 1, "unidirectional", False, 0, [3, 1]),
    ("rnn_relu", 1, "unidirectional", True, 0, [2, 3]),
    ("lstm", 2, "bidirectional", False, 1, [2, 1]),
    ("gru", 2, "bidirectional", True, 0, [1, 0]),
    # LSTM without projection: rebuilt with BlockLSTMV2 (reverse_sequence, gathered states)
    ("lstm", 2, "bidirectional", True, 0, [3, 0]),
    ("lstm", 1, "bidirectional", False, 0, [1, 3]),
]


@pytest.mark.parametrize("mode,L,direction,time_major,proj,lengths", CASES,
                         ids=["%s-L%d-%s-%s-P%d" % (c[0], c[1], c[2][:3], "tm" if c[3] else "bm",
                                                    c[4]) for c in CASES])
def test_v3_second_derivatives_match_finite_differences(rng, mode, L, direction, time_major,
                                                        proj, lengths):
    inputs, dy = model_inputs(rng, mode, L, direction, time_major, proj, T=max(lengths))
    forward = v3(mode, tf.constant(lengths), direction=direction, num_proj=proj,
                 time_major=time_major)
    if L == 1:
        assert_second_derivative_matches(forward, inputs, dy, mode)
    else:
        for _ in range(3):
            assert_directional_second_derivative_matches(rng, forward, inputs, dy, mode)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_zero_width_input_second_derivatives_match_finite_differences(rng, mode):
    # I = 0: W is [G*H, 0] (the composite once took it for skip input's identity)
    inputs, dy = model_inputs(rng, mode, direction="bidirectional", I=0, T=3)
    forward = v3(mode, tf.constant([3, 2]), direction="bidirectional")
    assert_second_derivative_matches(forward, inputs, dy, mode)


def test_lstm_skip_input_second_derivatives_match_finite_differences(rng):
    inputs, dy = model_inputs(rng, "lstm", direction="bidirectional", T=3)
    forward = v3("lstm", tf.constant([3, 2]), direction="bidirectional", input_mode="skip_input")
    assert_second_derivative_matches(forward, inputs, dy, "lstm")


@pytest.mark.parametrize("op", ["CudnnRNN", "CudnnRNNV2", "tf.raw_ops.CudnnRNNV3"])
def test_v1_v2_and_tfs_own_names_have_second_derivatives(rng, op):
    # TF's own CudnnRNNV3 name: TF's registered gradient calls its CudnnRNNBackpropV3 (our CPU
    # kernel), whose gradient is ours.
    mode = "gru" if op == "CudnnRNNV2" else "lstm"
    inputs, dy = model_inputs(rng, mode, T=2)
    if op.startswith("tf.raw_ops"):
        fn = lambda **a: tf.raw_ops.CudnnRNNV3(sequence_lengths=tf.constant([2, 1]), **a)  # noqa
    else:
        fn = getattr(raw, op)

    def forward(x, h, c, p):
        out = fn(input=x, input_h=h, input_c=c, params=p, rnn_mode=mode, is_training=True)
        return out[0], out[1], out[2]

    assert_second_derivative_matches(forward, inputs, dy, mode)


def test_jvps_through_the_forward_op_match_finite_differences(rng):
    inputs, _ = model_inputs(rng, "lstm", L=2, direction="bidirectional")
    tangents = {k: tf.constant(rng.standard_normal(v.shape)) for k, v in inputs.items()}
    lengths = tf.constant([3, 2])

    def forward(values):
        return raw.CudnnRNNV3(sequence_lengths=lengths, rnn_mode="lstm",
                              direction="bidirectional", is_training=True, **values)[:3]

    with tf.autodiff.ForwardAccumulator(list(inputs.values()), list(tangents.values())) as acc:
        outputs = forward(inputs)
    eps = 1e-6
    plus = forward({k: v + eps * tangents[k] for k, v in inputs.items()})
    minus = forward({k: v - eps * tangents[k] for k, v in inputs.items()})
    for out, p, m in zip(outputs, plus, minus):
        np.testing.assert_allclose(acc.jvp(out), (p - m) / (2 * eps), atol=1e-8)


LAYERS = ["LSTM", "GRU", "SimpleRNN"]


@pytest.fixture
def no_fallback(caplog):
    """Fails the test if one of our layers logged a fallback to Keras' loop (a warning): the
    comparisons with keras.layers below must run our ops, not Keras' own code twice."""
    with caplog.at_level("WARNING", logger="tf_lstm_ops"):
        yield
    assert not [r.getMessage() for r in caplog.records if r.name == "tf_lstm_ops"]


def op_types(function, *args):
    return {op.type for op in function.get_concrete_function(*args).graph.get_operations()}


def layer_pair(rng, name, **kwargs):
    ours = getattr(tlk, name)(3, return_sequences=True, dtype="float64", **kwargs)
    theirs = getattr(keras.layers, name)(3, return_sequences=True, dtype="float64", **kwargs)
    x = tf.constant(rng.standard_normal((2, 4, 2)))
    ours.build(x.shape)
    theirs.build(x.shape)
    theirs.set_weights(ours.get_weights())
    return ours, theirs, x


@pytest.mark.parametrize("name", LAYERS)
def test_hessian_vector_products_through_the_layers_equal_keras(rng, name, no_fallback):
    ours, theirs, x = layer_pair(rng, name)
    vectors = [tf.constant(rng.standard_normal(w.shape)) for w in ours.trainable_variables]

    def hvp(layer):
        @tf.function
        def run(x):
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    loss = tf.reduce_sum(tf.sin(layer(x)))
                grads = inner.gradient(loss, layer.trainable_variables)
                projection = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vectors)])
            return outer.gradient(projection, layer.trainable_variables)
        return run

    ours_hvp = hvp(ours)
    # the fused op, the Backprop op and the weight conversion (and its adjoint) all ran
    assert {"TfLstm>KerasRNN", "TfLstm>CudnnRNNBackpropV3Keras", "TfLstm>KerasToCudnnParams",
            "TfLstm>CudnnParamsToKeras"} <= op_types(ours_hvp, x)
    for a, b in zip(ours_hvp(x), hvp(theirs)(x)):
        np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("name", LAYERS)
def test_a_gradient_penalty_through_the_layers_equals_keras(rng, name, no_fallback):
    ours, theirs, x = layer_pair(rng, name)
    mask = tf.constant([[True] * 4, [True, True, False, False]])

    def penalty_gradient(layer):
        @tf.function
        def run(x):
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    inner.watch(x)
                    score = tf.reduce_sum(layer(x, mask=mask) ** 2)
                penalty = tf.reduce_sum(inner.gradient(score, x) ** 2)  # WGAN-GP style
            return outer.gradient(penalty, layer.trainable_variables)
        return run(x)

    for a, b in zip(penalty_gradient(ours), penalty_gradient(theirs)):
        np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("name", LAYERS)
def test_forward_mode_through_the_layers_equals_keras(rng, name, no_fallback):
    ours, theirs, x = layer_pair(rng, name)
    tangent = tf.constant(rng.standard_normal(x.shape))

    def jvp(layer):
        with tf.autodiff.ForwardAccumulator(x, tangent) as acc:
            y = layer(x)
        return acc.jvp(y)

    np.testing.assert_allclose(jvp(ours), jvp(theirs), atol=1e-12)


def test_sixteen_bit_second_derivatives_follow_float64(rng):
    inputs, dy = model_inputs(rng, "gru")
    lengths = tf.constant([3, 2])

    def hessian_vector(dtype):
        theta = [tf.cast(inputs[k], dtype) for k in ("input", "input_h", "input_c", "params")]
        with tf.GradientTape() as outer:
            outer.watch(theta)
            with tf.GradientTape() as inner:
                inner.watch(theta)
                out = raw.CudnnRNNV3(input=theta[0], input_h=theta[1], input_c=theta[2],
                                     params=theta[3], sequence_lengths=lengths, rnn_mode="gru",
                                     is_training=True)
                loss = tf.reduce_sum(out.output * tf.cast(dy, dtype))
            grad = inner.gradient(loss, theta[3])
            projection = tf.reduce_sum(grad * grad)
        return tf.cast(outer.gradient(projection, theta[3]), tf.float64)

    np.testing.assert_allclose(hessian_vector(tf.float16), hessian_vector(tf.float64),
                               atol=0.05, rtol=0.05)


# Dropout between layers: the composite replays the masks the forward drew, read from its reserve
# space (CudnnRNNDropoutKept, docs/cudnn_rnn.md §5.3, §7.4).
DROPOUT_CASES = [  # (mode, L, direction, time_major, num_proj, lengths, dropout)
    ("lstm", 2, "bidirectional", False, 0, [3, 1], 0.5),  # rebuilt with BlockLSTMV2
    ("lstm", 3, "unidirectional", True, 1, [3, 2], 0.3),  # projection: the scan
    ("gru", 2, "bidirectional", True, 0, [2, 3], 0.5),
    ("rnn_relu", 3, "unidirectional", False, 0, [3, 3], 0.6),
    ("gru", 2, "unidirectional", True, 0, [3, 0], 1.0),  # every input of layer 1 dropped
]


@pytest.fixture
def fixed_dropout_masks(monkeypatch):
    """Kernels built from here on draw their first call's masks on every call
    (TF_CUDNN_RESET_RND_GEN_STATE, docs/cudnn_rnn.md §5.3), so the first derivative is one
    function of θ that finite differences can probe."""
    monkeypatch.setenv("TF_CUDNN_RESET_RND_GEN_STATE", "1")


@pytest.mark.parametrize("mode,L,direction,time_major,proj,lengths,dropout", DROPOUT_CASES,
                         ids=["%s-L%d-%s-%s-P%d-%g" % (c[0], c[1], c[2][:3], "tm" if c[3] else
                                                       "bm", c[4], c[6]) for c in DROPOUT_CASES])
def test_second_derivatives_with_dropout_between_layers_match_finite_differences(
        rng, fixed_dropout_masks, mode, L, direction, time_major, proj, lengths, dropout):
    inputs, dy = model_inputs(rng, mode, L, direction, time_major, proj, T=3)
    forward = v3(mode, tf.constant(lengths), direction=direction, num_proj=proj,
                 time_major=time_major, dropout=dropout, seed=7, seed2=11)
    grad = first_derivative(forward, dy, mode)
    theta = [inputs[k] for k in ("input", "input_h", "input_c", "params")]
    np.testing.assert_array_equal(grad(*theta), grad(*theta))  # the masks are fixed
    for _ in range(2):
        assert_directional_second_derivative_matches(rng, forward, inputs, dy, mode)


def test_forward_over_reverse_with_dropout_equals_reverse_over_reverse(rng, fixed_dropout_masks):
    """An HVP as a JVP of the gradient (ForwardAccumulator around the tape) and as the gradient
    of a gradient: the same H·d (H is symmetric), both through the replayed masks."""
    inputs, dy = model_inputs(rng, "gru", L=2, direction="bidirectional", T=3)
    forward = v3("gru", tf.constant([3, 2]), direction="bidirectional", dropout=0.5, seed=5)
    params = inputs["params"]
    d = tf.constant(rng.standard_normal(params.shape))

    def gradient(p):
        with tf.GradientTape() as tape:
            tape.watch(p)
            output, _, _ = forward(inputs["input"], inputs["input_h"], inputs["input_c"], p)
            loss = tf.reduce_sum(tf.sin(output) * dy)
        return tape.gradient(loss, p)

    with tf.autodiff.ForwardAccumulator(params, d) as acc:
        grad = gradient(params)
    forward_over_reverse = acc.jvp(grad)
    with tf.GradientTape() as outer:
        outer.watch(params)
        projection = tf.reduce_sum(gradient(params) * d)
    np.testing.assert_allclose(forward_over_reverse, outer.gradient(projection, params),
                               rtol=1e-9, atol=1e-12)


def test_an_hvp_through_a_training_cudnn_layer_with_dropout(rng, fixed_dropout_masks):
    """tlk.CudnnGRU with two layers and dropout between them, in training mode (the masks
    drawn and replayed): its HVP w.r.t. the weights against central differences of its
    gradient (the seed is this test's own, so the kernel that keeps one mask is a new one)."""
    layer = tlk.CudnnGRU(3, num_layers=2, dropout=0.5, seed=91, return_sequences=True,
                         dtype="float64")
    x = tf.constant(rng.standard_normal((2, 4, 3)))
    layer(x, training=True)
    weights = layer.trainable_variables
    direction = [tf.constant(rng.standard_normal(w.shape)) for w in weights]

    def gradient():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.sin(layer(x, training=True)))
        return tape.gradient(loss, weights)

    with tf.GradientTape() as outer:
        projection = tf.add_n([tf.reduce_sum(g * d) for g, d in zip(gradient(), direction)])
    hvp = outer.gradient(projection, weights)
    original = [w.numpy() for w in weights]
    eps = 1e-6
    shifted = []
    for sign in (1, -1):
        for w, value, d in zip(weights, original, direction):
            w.assign(value + sign * eps * d.numpy())
        shifted.append(gradient())
    for w, value in zip(weights, original):
        w.assign(value)
    for analytic, plus, minus in zip(hvp, *shifted):
        np.testing.assert_allclose(analytic, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_the_composite_replays_the_forwards_dropout_masks(rng, version):
    """The second derivatives' forward, given the masks read from the reserve space, is the
    forward the op ran (one session run: one call, one draw of masks)."""
    from tf_lstm_ops._gradients import cudnn_rnn_composite as composite

    mode, L, direction = ("gru", 3, "bidirectional") if version < 3 else ("lstm", 2,
                                                                          "unidirectional")
    values, dy = model_inputs(rng, mode, L, direction, time_major=version < 3, T=4, B=3)
    with tf.Graph().as_default() as graph:
        inputs = {k: tf.constant(v.numpy()) for k, v in values.items()}
        dy = tf.constant(dy.numpy())
        attrs = dict(rnn_mode=mode, direction=direction, dropout=0.3, is_training=True)
        if version == 3:
            attrs.update(sequence_lengths=tf.constant([4, 0, 2]), time_major=False)
        out = getattr(raw, {1: "CudnnRNN", 2: "CudnnRNNV2", 3: "CudnnRNNV3"}[version])(
            **inputs, **attrs)
        tf.gradients(out[0], inputs["params"], dy)
        backprop = next(op for op in graph.get_operations() if "Backprop" in op.type)
        model = composite._Model(backprop, version)
        kept = composite._forward_dropout_masks(backprop, model, attrs.get("sequence_lengths"),
                                                backprop.inputs[11 if version == 3 else 10])
        lengths = attrs.get("sequence_lengths")
        replay = model.forward(*backprop.inputs[:4], lengths, kept)
        with tf.compat.v1.Session() as session:
            values = session.run([out[0], out[1], replay[0], replay[1], kept])
    np.testing.assert_allclose(values[2], values[0], atol=1e-12)
    np.testing.assert_allclose(values[3], values[1], atol=1e-12)
    assert 0 < values[4].mean() < 1  # some inputs dropped, some kept


def test_tfs_cudnn_kernels_dropout_on_a_gpu_is_a_clear_error():
    """TF's own CudnnRNN names run TF's cuDNN kernels on a GPU: their reserve space holds cuDNN's
    masks, which nothing can read back."""
    from tf_lstm_ops._gradients import cudnn_rnn_composite as composite

    class Op:
        type, device, outputs = "CudnnRNNBackpropV3", "/device:GPU:0", ()

    class Model:
        dropout, L = 0.5, 2

    with pytest.raises(NotImplementedError, match="cuDNN's dropout masks"):
        composite._forward_dropout_masks(Op(), Model(), None, None)


# ---- the LSTM block family ------------------------------------------------------------------

BLOCK_INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")


def block_inputs(rng, T=3, B=2, I=2, H=2):
    shapes = dict(x=(T, B, I), cs_prev=(B, H), h_prev=(B, H), w=(I + H, 4 * H), wci=(H,),
                  wcf=(H,), wco=(H,), b=(4 * H,))
    return {k: tf.constant((0.5 if k == "w" else 1.0) * rng.standard_normal(s))
            for k, s in shapes.items()}


def block_forward(op_name, seq_len_max, use_peephole, **attrs):
    op = getattr(raw, op_name)

    def forward(values):
        return op(seq_len_max=tf.constant(seq_len_max, tf.int64), use_peephole=use_peephole,
                  **attrs, **values)
    return forward


@pytest.mark.parametrize("op_name,seq_len_max,use_peephole,attrs", [
    ("BlockLSTMV2", 3, True, dict(cell_clip=0.0)),
    ("BlockLSTMV2", 2, False, dict(cell_clip=0.0)),
    ("BlockLSTM", 2, True, dict(forget_bias=0.5, cell_clip=10.0)),  # a clip that never acts
    ("BlockLSTM", 0, True, dict(forget_bias=1.0, cell_clip=0.0)),
])
def test_block_lstm_second_derivatives_match_finite_differences(rng, op_name, seq_len_max,
                                                                use_peephole, attrs):
    # through the tape: the forward's gradient is BlockLSTMFullGrad, whose gradient is the
    # composite; every one of the seven outputs enters the loss
    values = block_inputs(rng)
    forward = block_forward(op_name, seq_len_max, use_peephole, **attrs)
    weights = [tf.constant(rng.standard_normal((3, 2, 2))) for _ in range(7)]

    @tf.function
    def first(*theta):
        with tf.GradientTape() as tape:
            tape.watch(theta)
            outputs = forward(dict(zip(BLOCK_INPUTS, theta)))
            loss = tf.add_n([tf.reduce_sum(tf.sin(o) * w) for o, w in zip(outputs, weights)])
        grads = tape.gradient(loss, list(theta), unconnected_gradients="zero")
        return tf.concat([tf.reshape(g, [-1]) for g in grads], 0)

    analytic, numeric = tf.test.compute_gradient(first, [values[k] for k in BLOCK_INPUTS],
                                                 delta=1e-5)
    for a, n in zip(analytic, numeric):
        np.testing.assert_allclose(a, n, atol=2e-7)


def block_grad_op_inputs(rng, layout, use_peephole, T=3, B=2, I=2, H=2):
    """Inputs of a sequence gradient op: a real forward's activations (so gates lie in (0, 1))
    and random output gradients."""
    values = block_inputs(rng, T, B, I, H)
    op = raw.BlockLSTMV2 if layout == "IFCO" else raw.BlockLSTM
    outputs = op(seq_len_max=tf.constant(T, tf.int64), use_peephole=use_peephole, cell_clip=0.0,
                 **values)
    grads = {name + "_grad": tf.constant(rng.standard_normal((T, B, H)))
             for name in ("i", "cs", "f", "o", "ci", "co", "h")}
    return values, dict(zip(("i", "cs", "f", "o", "ci", "co", "h"), outputs)), grads


@pytest.mark.parametrize("op_name,layout,use_peephole", [("BlockLSTMGrad", "ICFO", True),
                                                         ("BlockLSTMGradV2", "IFCO", False),
                                                         ("BlockLSTMFullGrad", "ICFO", False),
                                                         ("BlockLSTMFullGrad", "IFCO", True)])
def test_block_gradient_ops_gradients_match_finite_differences(rng, op_name, layout,
                                                               use_peephole):
    # each gradient op as a function of all its inputs (activations and output gradients
    # included), against finite differences of the op itself
    from tf_lstm_ops._loader import library

    values, activations, grads = block_grad_op_inputs(rng, layout, use_peephole)
    if op_name != "BlockLSTMFullGrad":
        grads = {k: grads[k] for k in ("cs_grad", "h_grad")}
    kwargs = dict(values, **activations, **grads)
    names = list(kwargs)
    attrs = dict(use_peephole=use_peephole)
    if op_name == "BlockLSTMFullGrad":
        attrs["gate_layout"] = layout
    op = library.op(op_name)

    def grad_op(*tensors):
        out = op(seq_len_max=tf.constant(2, tf.int64), **dict(zip(names, tensors)), **attrs)
        return tf.concat([tf.reshape(t, [-1]) for t in out], 0)

    analytic, numeric = tf.test.compute_gradient(tf.function(grad_op),
                                                 [kwargs[k] for k in names], delta=1e-5)
    for name, a, n in zip(names, analytic, numeric):
        np.testing.assert_allclose(a, n, atol=1e-8, err_msg=name)


@pytest.mark.parametrize("use_peephole", [False, True])
def test_lstm_block_cell_grad_has_a_gradient(rng, use_peephole):
    values, activations, grads = block_grad_op_inputs(rng, "ICFO", use_peephole, T=1)
    kwargs = dict(values, **{k: v[0] for k, v in activations.items() if k != "h"},
                  cs_grad=grads["cs_grad"][0], h_grad=grads["h_grad"][0])
    kwargs["x"] = kwargs["x"][0]
    names = list(kwargs)

    def grad_op(*tensors):
        out = raw.LSTMBlockCellGrad(use_peephole=use_peephole, **dict(zip(names, tensors)))
        return tf.concat([tf.reshape(t, [-1]) for t in out], 0)

    analytic, numeric = tf.test.compute_gradient(tf.function(grad_op),
                                                 [kwargs[k] for k in names], delta=1e-5)
    for name, a, n in zip(names, analytic, numeric):
        np.testing.assert_allclose(a, n, atol=1e-8, err_msg=name)


def assert_jvp_matches_central_differences(loss, theta, direction):
    """ForwardAccumulator's JVP of the scalar loss(*theta) along `direction`, against central
    differences."""
    with tf.autodiff.ForwardAccumulator(theta, direction) as acc:
        value = loss(*theta)
    eps = 1e-6
    numeric = (loss(*[t + eps * d for t, d in zip(theta, direction)])
               - loss(*[t - eps * d for t, d in zip(theta, direction)])) / (2 * eps)
    np.testing.assert_allclose(acc.jvp(value), numeric, rtol=1e-7)


def test_lstm_block_cell_jvp_matches_finite_differences(rng):
    values = block_inputs(rng, T=1)
    values["x"] = values["x"][0]
    theta = [values[k] for k in BLOCK_INPUTS]
    direction = [tf.constant(rng.standard_normal(t.shape)) for t in theta]

    def loss(*t):
        out = raw.LSTMBlockCell(use_peephole=True, cell_clip=0.0, **dict(zip(BLOCK_INPUTS, t)))
        return tf.reduce_sum(tf.sin(out.h)) + tf.reduce_sum(out.cs ** 2)

    assert_jvp_matches_central_differences(loss, theta, direction)


def test_block_lstm_sixteen_bit_second_derivatives_run(rng):
    values = {k: tf.cast(v, tf.float16) for k, v in block_inputs(rng).items()}
    with tf.GradientTape() as outer:
        outer.watch(values["w"])
        with tf.GradientTape() as inner:
            inner.watch(values["w"])
            out = raw.BlockLSTMV2(seq_len_max=tf.constant(3, tf.int64), **values)
            loss = tf.reduce_sum(out.h)
        penalty = tf.reduce_sum(inner.gradient(loss, values["w"]) ** 2)
    second = outer.gradient(penalty, values["w"])
    assert second.dtype == tf.float16 and np.all(np.isfinite(second.numpy()))


# The fused gradient of the backward (BlockLSTMFullGradGrad, docs/block_lstm.md §7.2): on the
# CPU the block family's second derivatives run it instead of the composite.

FULL_GRAD_INPUTS = BLOCK_INPUTS + ("i", "cs", "f", "o", "ci", "co", "h") + tuple(
    k + "_grad" for k in ("i", "cs", "f", "o", "ci", "co", "h"))


def full_grad_grad_args(rng, layout, use_peephole, T=4, B=3, I=3, H=5, zero=()):
    """Every input of BlockLSTMFullGradGrad: a real forward's activations, random output
    gradients and random cotangents d_*_grad of the eight results (zero for those in `zero`)."""
    values, activations, grads = block_grad_op_inputs(rng, layout, use_peephole, T, B, I, H)
    args = dict(values, **activations, **grads)
    for name in BLOCK_INPUTS:
        value = values[name]
        args["d_%s_grad" % name] = (tf.zeros_like(value) if name in zero else
                                    tf.constant(rng.standard_normal(value.shape)))
    return args


def composite_full_grad_grad(args, seq_len_max, layout, use_peephole):
    """The same gradient through the composite backward (a reverse tf.scan) and the tape."""
    from tf_lstm_ops._gradients.block_lstm_composite import sequence_grad

    primals = [args[k] for k in FULL_GRAD_INPUTS]
    with tf.GradientTape() as tape:
        tape.watch(primals)
        out = sequence_grad(tf.constant(seq_len_max, tf.int64), primals[:8], primals[8:15],
                            primals[15:], use_peephole, layout)
    return tape.gradient(out, primals, output_gradients=[args["d_%s_grad" % k]
                                                         for k in BLOCK_INPUTS],
                         unconnected_gradients="zero")


def fused_full_grad_grad(args, seq_len_max, layout, use_peephole):
    from tf_lstm_ops._loader import library

    return library.op("BlockLSTMFullGradGrad")(
        seq_len_max=tf.constant(seq_len_max, tf.int64), use_peephole=use_peephole,
        gate_layout=layout, **args)


@pytest.mark.parametrize("layout,use_peephole,seq_len_max,zero", [
    ("IFCO", True, 4, ()),
    ("ICFO", True, 4, ()),
    ("IFCO", False, 4, ()),
    ("IFCO", True, 2, ()),  # steps past seq_len_max: zero results
    ("ICFO", False, 1, ()),
    ("IFCO", True, 0, ()),
    ("IFCO", True, 4, ("x",)),  # the zero cotangents whose products the kernel skips
    ("ICFO", True, 3, ("w",)),
    ("IFCO", False, 4, ("x", "w", "h_prev", "cs_prev")),
])
def test_the_fused_gradient_of_the_backward_equals_the_composite(rng, layout, use_peephole,
                                                                  seq_len_max, zero):
    args = full_grad_grad_args(rng, layout, use_peephole, zero=zero)
    fused = fused_full_grad_grad(args, seq_len_max, layout, use_peephole)
    expected = composite_full_grad_grad(args, seq_len_max, layout, use_peephole)
    for name, got, want in zip(FULL_GRAD_INPUTS, fused, expected):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12, err_msg=name)
    assert not np.any(fused[7].numpy())  # b: the backward never reads it


@pytest.mark.parametrize("dtype,tolerance", [(tf.float32, 1e-5), (tf.float16, 2e-2),
                                             (tf.bfloat16, 8e-2)])
def test_the_fused_gradient_of_the_backward_in_every_dtype(rng, dtype, tolerance):
    # computed in float32 (16-bit storage), compared with the float64 composite on the same
    # rounded inputs, relative to each result's largest value
    args = full_grad_grad_args(rng, "IFCO", True)
    narrow = {k: tf.cast(v, dtype) for k, v in args.items()}
    fused = fused_full_grad_grad(narrow, 3, "IFCO", True)
    expected = composite_full_grad_grad({k: tf.cast(v, tf.float64) for k, v in narrow.items()},
                                        3, "IFCO", True)
    for name, got, want in zip(FULL_GRAD_INPUTS, fused, expected):
        assert got.dtype == dtype
        scale = max(1.0, float(np.max(np.abs(want))))
        np.testing.assert_allclose(tf.cast(got, tf.float64), want, atol=tolerance * scale,
                                   err_msg=name)


def test_block_second_derivatives_run_the_fused_op_on_the_cpu(rng):
    values = block_inputs(rng)

    @tf.function
    def hvp(w):
        with tf.GradientTape() as outer:
            outer.watch(w)
            with tf.GradientTape() as inner:
                inner.watch(w)
                out = raw.BlockLSTMV2(seq_len_max=tf.constant(3, tf.int64),
                                      **dict(values, w=w))
                loss = tf.reduce_sum(tf.sin(out.h))
            projection = tf.reduce_sum(inner.gradient(loss, w) * w)
        return outer.gradient(projection, w)

    assert "TfLstm>BlockLSTMFullGradGrad" in op_types(hvp, values["w"])


def test_the_fused_ops_own_gradient_matches_finite_differences(rng):
    # third order: the fused op's registered gradient (the composite's) against finite
    # differences of the fused op itself, w.r.t. one input of each kind (a forward input, a
    # peephole, an activation, an output gradient, cotangents); the rest held fixed
    args = full_grad_grad_args(rng, "IFCO", True, T=2, B=1, I=1, H=2)
    names = ["x", "w", "wci", "f", "h_grad", "d_w_grad", "d_cs_prev_grad"]

    @tf.function
    def fused(*tensors):
        out = fused_full_grad_grad(dict(args, **dict(zip(names, tensors))), 2, "IFCO", True)
        return tf.concat([tf.reshape(t, [-1]) for t in out], 0)

    analytic, numeric = tf.test.compute_gradient(fused, [args[k] for k in names], delta=1e-5)
    for name, a, n in zip(names, analytic, numeric):
        np.testing.assert_allclose(a, n, atol=1e-8, err_msg=name)


@pytest.mark.parametrize("name,shape,message", [
    ("d_w_grad", (7, 20), "d_w_grad must have shape [input_size + cell_size, cell_size * 4]"),
    ("d_x_grad", (4, 3), "d_x_grad must be rank 3"),
    ("d_wco_grad", (4,), "d_wco_grad must have shape [cell_size]"),
    ("h_grad", (4, 3, 6), "h_grad must have shape [time, batch_size, cell_size]"),
    ("d_b_grad", (), "d_b_grad must be rank 1"),
])
def test_the_fused_gradient_of_the_backward_names_a_bad_input(rng, name, shape, message):
    args = full_grad_grad_args(rng, "IFCO", True)
    args[name] = tf.zeros(shape, tf.float64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        fused_full_grad_grad(args, 4, "IFCO", True)


def test_the_fused_gradient_of_the_backward_checks_seq_len_max(rng):
    args = full_grad_grad_args(rng, "IFCO", False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="seq_len_max must be between 0"):
        fused_full_grad_grad(args, 5, "IFCO", False)


def test_the_fused_path_is_chosen_only_where_it_has_a_kernel():
    from tf_lstm_ops._gradients._common import device_type, has_kernel_where, runs_on_cpu

    class Placed:  # a graph op: its device; eager: none, its outputs' device
        def __init__(self, device="", outputs=()):
            self.outputs = list(outputs)
            if device is not None:
                self.device = device

    assert runs_on_cpu(Placed("/job:localhost/replica:0/task:0/device:CPU:0"))
    assert not runs_on_cpu(Placed("/job:localhost/replica:0/task:0/device:GPU:0"))
    assert not runs_on_cpu(Placed("/device:GPU:1"))
    assert runs_on_cpu(Placed(None, [tf.constant(1.0)]))  # eager, ran here (no GPU)
    # no device type: whether the process sees a GPU
    no_gpu = not tf.config.list_logical_devices("GPU")
    assert runs_on_cpu(Placed("/job:worker/task:0")) == no_gpu
    assert runs_on_cpu(Placed("")) == no_gpu
    # the fused op: on the CPU always, on a GPU where the library has GPU kernels (a CUDA build)
    assert device_type(Placed("/device:GPU:1")) == "GPU"
    assert has_kernel_where("BlockLSTMFullGradGrad", Placed("/device:CPU:0"))
    assert has_kernel_where("BlockLSTMFullGradGrad", Placed("/device:GPU:0")) == has_kernel_where(
        "BlockLSTMV2", Placed("/device:GPU:0"))


@pytest.mark.parametrize("T,B,I,H,L", [(0, 2, 3, 4, 0), (3, 0, 3, 4, 2), (3, 2, 0, 4, 3),
                                       (1, 0, 0, 2, 1), (3, 2, 3, 0, 2), (2, 2, 1, 3, 0)])
def test_the_fused_gradient_of_the_backward_with_empty_sizes(rng, eager_or_function, T, B, I, H,
                                                             L):
    args = full_grad_grad_args(rng, "IFCO", True, T=T, B=B, I=I, H=H)
    fused = eager_or_function(lambda **a: fused_full_grad_grad(a, L, "IFCO", True), **args)
    fused = list(fused.values())  # the 22 results by name, in order
    expected = composite_full_grad_grad(args, L, "IFCO", True)
    for name, got, want in zip(FULL_GRAD_INPUTS, fused, expected):
        assert got.shape == args[name].shape, name
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12, err_msg=name)


def test_the_fused_gradient_of_the_backward_never_reads_steps_past_seq_len_max(rng):
    args = full_grad_grad_args(rng, "ICFO", True, T=5)
    clean = fused_full_grad_grad(args, 3, "ICFO", True)
    poisoned = dict(args)
    for name in FULL_GRAD_INPUTS[8:] + ("d_x_grad",):
        value = args[name].numpy().copy()
        value[3:] = np.nan
        poisoned[name] = tf.constant(value)
    for name, got, want in zip(FULL_GRAD_INPUTS, fused_full_grad_grad(poisoned, 3, "ICFO", True),
                               clean):
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_block_lstm_jvp_matches_finite_differences(rng):
    # forward mode through BlockLSTMV2: TensorFlow transposes the registered gradient, whose own
    # gradient is the fused BlockLSTMFullGradGrad on the CPU
    values = block_inputs(rng, T=4)
    theta = [values[k] for k in BLOCK_INPUTS]
    direction = [tf.constant(rng.standard_normal(t.shape)) for t in theta]

    def loss(*t):
        out = raw.BlockLSTMV2(seq_len_max=tf.constant(3, tf.int64), use_peephole=True,
                              cell_clip=0.0, **dict(zip(BLOCK_INPUTS, t)))
        return tf.reduce_sum(tf.sin(out.h)) + tf.reduce_sum(out.cs ** 2)

    assert_jvp_matches_central_differences(loss, theta, direction)


def test_hessians_the_way_tensorflow_computes_them(rng):
    # tape.jacobian of a gradient (vectorised by pfor, eagerly and in a tf.function) and
    # tf.hessians in a TF1 graph, through BlockLSTMV2, against finite differences of the gradient
    values = block_inputs(rng)

    def loss(w):
        out = raw.BlockLSTMV2(seq_len_max=tf.constant(3, tf.int64), cell_clip=0.0,
                              use_peephole=False, **dict(values, w=w))
        return tf.reduce_sum(tf.sin(out.h))

    def gradient(w):
        with tf.GradientTape() as tape:
            tape.watch(w)
            value = loss(w)
        return tape.gradient(value, w)

    def hessian(w):
        with tf.GradientTape() as outer:
            outer.watch(w)
            g = gradient(w)
        return outer.jacobian(g, w)

    w = values["w"].numpy()
    numeric = np.zeros(w.shape + w.shape)
    for index in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[index] = 1e-6
        numeric[(Ellipsis,) + index] = (gradient(tf.constant(w + d))
                                        - gradient(tf.constant(w - d))).numpy() / 2e-6
    np.testing.assert_allclose(hessian(tf.constant(w)), numeric, atol=1e-8)
    np.testing.assert_allclose(tf.function(hessian)(tf.constant(w)), numeric, atol=1e-8)
    with tf.Graph().as_default():
        w_in = tf.compat.v1.placeholder(tf.float64, w.shape)
        graph_values = {k: tf.constant(v.numpy()) for k, v in values.items() if k != "w"}
        out = raw.BlockLSTMV2(seq_len_max=tf.constant(3, tf.int64), cell_clip=0.0,
                              use_peephole=False, w=w_in, **graph_values)
        hessian_op = tf.hessians(tf.reduce_sum(tf.sin(out.h)), w_in)[0]
        with tf.compat.v1.Session() as session:
            np.testing.assert_allclose(session.run(hessian_op, {w_in: w}), numeric, atol=1e-8)


def test_a_vectorised_hessian_through_our_lstm_equals_keras(rng, no_fallback):
    # tape.jacobian vectorises (pfor) through our layer; keras.layers.LSTM's loop cannot be
    # vectorised, so its Hessian comes from the jacobian's while_loop
    ours, theirs, x = layer_pair(rng, "LSTM")

    def hessian(layer, vectorise):
        kernel = layer.trainable_variables[0]
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                loss = tf.reduce_sum(tf.sin(layer(x)))
            grad = inner.gradient(loss, kernel)
        return outer.jacobian(grad, kernel, experimental_use_pfor=vectorise)

    np.testing.assert_allclose(tf.function(hessian)(ours, True),
                               tf.function(hessian)(theirs, False), atol=1e-10)
