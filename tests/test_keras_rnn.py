"""KerasRNN (docs/cudnn_rnn.md §6.6): CudnnRNNV3Keras on Keras' weights as Keras stores them,
which the Keras layers run. Its results and gradients (to second order) against CudnnRNNV3Keras
on the same weights converted by KerasToCudnnParams (itself checked against the float64
reference and Keras elsewhere), for every mode, both bias layouts, batches read in place and
packed, lengths, masks, zoneout and Keras' activations; and every bad weight as an
InvalidArgumentError naming it."""

import numpy as np
import pytest
import tensorflow as tf

from tf_lstm_ops._loader import library
from tools.references import cudnn_rnn as R

GATES = R.GATES


def make_case(rng, mode, B, I=3, H=4, T=5, bias_rows=1, time_major=False, lengths=False,
              masks=False, zoneout=False, activation="", recurrent_activation="",
              reset_after=True, dtype="float64"):
    """KerasRNN's arguments as tensors, and its attributes."""
    G = GATES[mode] * H
    lstm = mode == "lstm"
    x_shape = (T, B, I) if time_major else (B, T, I)
    state = (1, B, H) if time_major else (B, 1, H)

    def t(v):
        return tf.constant(R.round_to(np.asarray(v, np.float64), dtype), R.tf_dtype(dtype))

    empty = t(np.zeros([0]))
    zone_shape = (T, B, H) if time_major else (B, T, H)
    args = dict(
        input=t(rng.uniform(-1, 1, x_shape)),
        input_h=t(rng.uniform(-0.8, 0.8, state)),
        input_c=t(rng.uniform(-1, 1, state) if lstm else np.zeros(())),
        kernel=t(rng.uniform(-0.5, 0.5, (I, G))),
        recurrent_kernel=t(rng.uniform(-0.5, 0.5, (H, G))),
        bias=t(rng.uniform(-0.5, 0.5, (G,) if bias_rows == 1 else (2, G))),
        sequence_lengths=tf.constant(
            rng.integers(0, T + 1, B) if lengths else np.full(B, T), tf.int32),
        input_masks=t(rng.integers(0, 2, (GATES[mode], B, I)) * 1.25) if masks else empty,
        recurrent_masks=t(rng.integers(0, 2, (GATES[mode], B, H)) * 1.25) if masks else empty,
        zoneout_h_weights=t(rng.integers(0, 2, zone_shape)) if zoneout else empty,
        zoneout_c_weights=t(rng.integers(0, 2, zone_shape)) if zoneout and lstm else empty,
    )
    attrs = dict(rnn_mode=mode, time_major=time_major, activation=activation,
                 recurrent_activation=recurrent_activation, reset_after=reset_after)
    return args, attrs


def keras_rnn(args, attrs, is_training=True):
    return library.op("KerasRNN")(**args, **attrs, is_training=is_training)


def converted(args, attrs, is_training=True):
    """The same run on CudnnRNNV3Keras with the weights as params."""
    args = dict(args)
    params = library.op("KerasToCudnnParams")(
        kernel=args.pop("kernel"), recurrent_kernel=args.pop("recurrent_kernel"),
        bias=args.pop("bias"), rnn_mode=attrs["rnn_mode"])
    return library.op("CudnnRNNV3Keras")(**args, params=params, **attrs,
                                         is_training=is_training)


DIFFERENTIABLE = ("input", "input_h", "input_c", "kernel", "recurrent_kernel", "bias")


def cotangent(y, k):
    """A fixed, varied weight per element of output k."""
    return tf.reshape(tf.cos(tf.cast(tf.range(tf.size(y)), y.dtype) * 0.7 + k), tf.shape(y))


def gradients(run, args, attrs, is_training, second_order=False):
    """d<w, outputs>/d(differentiable inputs) (and, second_order, the gradient of their squared
    norm) with fixed random cotangents w."""
    lstm = attrs["rnn_mode"] == "lstm"
    watched = [args[k] for k in DIFFERENTIABLE if lstm or k != "input_c"]
    with tf.GradientTape() as outer:
        outer.watch(watched)
        with tf.GradientTape() as tape:
            tape.watch(watched)
            out = run(args, attrs, is_training)
            ys = [out.output, out.output_h] + ([out.output_c] if lstm else [])
            loss = tf.add_n([tf.reduce_sum(y * cotangent(y, k)) for k, y in enumerate(ys)])
        first = tape.gradient(loss, watched)
        norm = tf.add_n([tf.reduce_sum(g * g) for g in first])
    second = outer.gradient(norm, watched) if second_order else []
    return [g.numpy() for g in first], [g.numpy() for g in second]


def assert_close(got, want, dtype, what):
    tol = {"float64": 1e-12, "float32": 2e-6, "half": 2e-3, "bfloat16": 2e-2}[dtype]
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, np.abs(want).max()) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale, err_msg=what)


CASES = [
    dict(mode=mode, B=B, bias_rows=rows, time_major=tm, lengths=lengths)
    for mode in GATES
    for B, rows, tm, lengths in ((1, 1, False, False), (2, 2, True, True), (5, 1, True, False),
                                 (6, 2, False, True))
] + [
    dict(mode="lstm", B=3, masks=True, lengths=True),
    dict(mode="lstm", B=7, masks=True, zoneout=True, activation="relu",
         recurrent_activation="hard_sigmoid"),
    dict(mode="rnn_tanh", B=1, zoneout=True, masks=True, activation="elu"),
    dict(mode="rnn_relu", B=4, masks=True, lengths=True),
    dict(mode="gru", B=2, masks=True, zoneout=True, bias_rows=2, activation="softsign"),
    dict(mode="lstm", B=1, I=0, H=4),  # zero-width input
    dict(mode="lstm", B=20, I=33, H=40, T=3),  # partial tiles, several unit slices
    # The GRU's gates are in Keras' order z, r, h where it reads Keras' weights (cuDNN's: r, z,
    # h): every path that names a gate, with Keras' masks per gate and resetting before.
    dict(mode="gru", B=3, masks=True, lengths=True, reset_after=False),
    dict(mode="gru", B=9, I=5, H=24, T=6, bias_rows=2, time_major=True, lengths=True,
         reset_after=False, zoneout=True),
    dict(mode="gru", B=20, I=33, H=40, T=3, bias_rows=2),
    dict(mode="gru", B=16, I=8, H=20, masks=True, activation="relu",
         recurrent_activation="hard_sigmoid"),
]


def case_id(case):
    return "-".join("%s%s" % (k, v) for k, v in case.items())


@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_equals_cudnn_rnn_v3_keras_on_the_converted_weights(rng, case, dtype, is_training):
    args, attrs = make_case(rng, dtype=dtype, **case)
    got, want = keras_rnn(args, attrs, is_training), converted(args, attrs, is_training)
    names = ("output", "output_h") + (("output_c",) if case["mode"] == "lstm" else ())
    for name in names:
        assert_close(getattr(got, name), getattr(want, name), dtype, name)
    if is_training:  # the same reserve space: the Backprop of either reads the other's
        assert got.reserve_space.shape == want.reserve_space.shape


@pytest.mark.parametrize("dtype", ["half", "bfloat16"])
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_16_bit_storage(rng, mode, dtype):
    args, attrs = make_case(rng, mode, B=2, lengths=True, dtype=dtype)
    got, want = keras_rnn(args, attrs), converted(args, attrs)
    assert got.output.dtype == R.tf_dtype(dtype)
    assert_close(got.output, want.output, dtype, "output")
    assert_close(got.output_h, want.output_h, dtype, "output_h")


@pytest.mark.parametrize("is_training", [True, False])
@pytest.mark.parametrize("case", [CASES[k] for k in (0, 5, 10, 14, 16, 17, 18, 20, 21, 22, 25)],
                         ids=case_id)
def test_gradients_to_second_order_equal_the_converted_run(rng, case, is_training):
    args, attrs = make_case(rng, dtype="float64", **case)
    first, second = gradients(keras_rnn, args, attrs, is_training, second_order=True)
    first_want, second_want = gradients(converted, args, attrs, is_training, second_order=True)
    for k, (g, w) in enumerate(zip(first + second, first_want + second_want)):
        assert_close(g, w, "float64", "gradient %d" % k)


def test_gradient_of_a_function_and_of_unknown_lengths(rng):
    args, attrs = make_case(rng, "lstm", B=3, lengths=True, dtype="float64")

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float64),
                                  tf.TensorSpec([None], tf.int32)])
    def grad(x, lengths):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = keras_rnn(dict(args, input=x, sequence_lengths=lengths), attrs)
            loss = tf.reduce_sum(out.output ** 2) + tf.reduce_sum(out.output_c)
        return tape.gradient(loss, x)

    x = args["input"]
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = converted(args, attrs)
        loss = tf.reduce_sum(out.output ** 2) + tf.reduce_sum(out.output_c)
    assert_close(grad(x, args["sequence_lengths"]), tape.gradient(loss, x), "float64", "dx")


def bad(rng, mode="lstm", **changes):
    args, attrs = make_case(rng, mode, B=2)
    args.update({k: tf.constant(v, tf.float64) for k, v in changes.items()})
    return args, attrs


@pytest.mark.parametrize("changes,message", [
    (dict(kernel=np.zeros([3])), "kernel must be rank 2"),
    (dict(kernel=np.zeros([4, 16])), r"kernel.*\[4,16\]"),
    (dict(kernel=np.zeros([3, 12])), r"kernel.*\[3,12\]"),
    (dict(recurrent_kernel=np.zeros([4, 4, 4])), "recurrent_kernel must be rank 2"),
    (dict(recurrent_kernel=np.zeros([5, 16])), r"recurrent_kernel.*\[5,16\]"),
    (dict(recurrent_kernel=np.zeros([4, 20])), r"recurrent_kernel.*\[4,20\]"),
    (dict(bias=np.zeros([])), "bias must be rank 1"),
    (dict(bias=np.zeros([2, 2, 16])), "bias must be rank 1"),
    (dict(bias=np.zeros([15])), r"bias.*\[15\]"),
    (dict(bias=np.zeros([3, 16])), r"bias.*\[3,16\]"),
    (dict(input_h=np.zeros([2, 2, 4]), input_c=np.zeros([2, 2, 4])),
     r"input_h must have shape \[batch_size, 1, num_units\].*one layer"),
])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_weights_name_the_argument(rng, mode, changes, message):
    # (in a function of unknown shapes: the kernel's check, not shape inference's)
    args, attrs = bad(rng, **changes)
    run = (lambda kw: keras_rnn(kw, attrs).output) if mode == "eager" else tf.function(
        lambda kw: keras_rnn(kw, attrs).output,
        input_signature=[{k: tf.TensorSpec(None, v.dtype) for k, v in args.items()}])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        run(args)


@pytest.mark.parametrize("changes,message", [
    (dict(kernel=np.zeros([3])), "kernel must be rank 2"),
    (dict(kernel=np.zeros([3, 16])), r"kernel.*\[3,16\]"),  # an LSTM's, not a GRU's 3 gates
    (dict(recurrent_kernel=np.zeros([4, 16])), r"recurrent_kernel.*\[4,16\]"),
    (dict(recurrent_kernel=np.zeros([0, 12])), r"recurrent_kernel.*\[0,12\]"),
    (dict(bias=np.zeros([13])), r"bias.*\[13\]"),
    (dict(bias=np.zeros([3, 12])), r"bias.*\[3,12\]"),
])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_bad_gru_weights_name_the_argument(rng, mode, changes, message):
    # The GRU (three gates, read in Keras' order) checks its weights the same way.
    args, attrs = bad(rng, "gru", **changes)
    run = (lambda kw: keras_rnn(kw, attrs).output) if mode == "eager" else tf.function(
        lambda kw: keras_rnn(kw, attrs).output,
        input_signature=[{k: tf.TensorSpec(None, v.dtype) for k, v in args.items()}])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        run(args)


def test_static_shapes(rng):
    args, attrs = make_case(rng, "lstm", B=2, dtype="float32")

    @tf.function
    def shapes(**kw):
        out = keras_rnn(kw, attrs)
        return out

    concrete = shapes.get_concrete_function(**args)
    outputs = concrete.structured_outputs
    assert outputs.output.shape.as_list() == [2, 5, 4]
    assert outputs.output_h.shape.as_list() == [2, 1, 4]
    assert outputs.output_c.shape.as_list() == [2, 1, 4]


def backprop_args(args, attrs, out, rng):
    dtype = args["input"].dtype
    cot = {name: tf.constant(rng.uniform(-1, 1, getattr(out, name).shape), dtype)
           for name in ("output", "output_h", "output_c")}
    return dict(args, output=out.output, output_h=out.output_h, output_c=out.output_c,
                output_backprop=cot["output"], output_h_backprop=cot["output_h"],
                output_c_backprop=cot["output_c"], reserve_space=out.reserve_space,
                host_reserved=out.host_reserved, **attrs)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_backprop_equals_cudnn_backprop_on_the_converted_weights(rng, case, dtype):
    # KerasRNNBackprop reads the weights in place and writes their gradients in Keras' layout
    # (the GRU's gates in Keras' order); the reference is CudnnRNNBackpropV3Keras on the params and
    # CudnnParamsToKeras of its params gradient.
    args, attrs = make_case(rng, dtype=dtype, **case)
    bargs = backprop_args(args, attrs, keras_rnn(args, attrs), rng)
    got = library.op("KerasRNNBackprop")(**bargs)
    ref = dict(bargs)
    kernel, recurrent_kernel, bias = (ref.pop(k) for k in ("kernel", "recurrent_kernel", "bias"))
    ref["params"] = library.op("KerasToCudnnParams")(
        kernel=kernel, recurrent_kernel=recurrent_kernel, bias=bias, rnn_mode=case["mode"])
    want = library.op("CudnnRNNBackpropV3Keras")(**ref)
    want_weights = library.op("CudnnParamsToKeras")(
        params=want.params_backprop, rnn_mode=case["mode"], input_size=kernel.shape[0],
        num_units=recurrent_kernel.shape[0], bias_rows=bias.shape.rank)
    names = ["input_backprop", "input_h_backprop"] + (
        ["input_c_backprop"] if case["mode"] == "lstm" else [])
    for name in names:
        assert_close(getattr(got, name), getattr(want, name), dtype, name)
    for name, w in zip(("kernel_backprop", "recurrent_kernel_backprop", "bias_backprop"),
                       want_weights):
        assert getattr(got, name).shape == w.shape
        assert_close(getattr(got, name), w, dtype, name)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_relu"])
@pytest.mark.parametrize("T,B", [(0, 3), (4, 0)])
def test_empty_runs_pass_the_states_through_and_give_zero_weight_gradients(rng, mode, T, B):
    args, attrs = make_case(rng, mode, B=B, T=T, bias_rows=2)
    out = keras_rnn(args, attrs)
    np.testing.assert_array_equal(out.output_h, args["input_h"])
    got = library.op("KerasRNNBackprop")(**backprop_args(args, attrs, out, rng))
    for name in ("kernel", "recurrent_kernel", "bias"):
        grad = getattr(got, name + "_backprop")
        assert grad.shape == args[name].shape
        np.testing.assert_array_equal(grad, 0)


def test_backprop_checks_the_reserve_space_and_names_bad_weights(rng):
    args, attrs = make_case(rng, "lstm", B=2)
    bargs = backprop_args(args, attrs, keras_rnn(args, attrs), rng)
    with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
        library.op("KerasRNNBackprop")(**dict(bargs, reserve_space=bargs["reserve_space"][:-1]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"recurrent_kernel.*\[4,15\]"):
        library.op("KerasRNNBackprop")(
            **dict(bargs, recurrent_kernel=tf.zeros([4, 15], tf.float64)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"output_backprop"):
        library.op("KerasRNNBackprop")(
            **dict(bargs, output_backprop=tf.zeros([2, 4, 4], tf.float64)))


@pytest.mark.parametrize("op_name", ["KerasRNN", "KerasRNNBackprop"])
@pytest.mark.parametrize("rnn_mode", ["lstm", "gru"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("what,message", [
    ("input rank 2", "input must be rank 3"),
    ("batch mismatch", "input_h"),
    ("length past T", r"sequence_lengths\[1\] must be in \[0, max_time = 5\]"),
    ("negative length", r"sequence_lengths\[0\] must be in \[0, max_time = 5\]"),
    ("lengths of another batch", "sequence_lengths"),
    ("input_c mismatch", "input_c"),
])
def test_bad_inputs_of_both_ops_name_the_argument(rng, op_name, rnn_mode, mode, what, message):
    # (an empty T or B is valid: test_empty_runs_...; bad weights: test_bad_weights_...)
    if rnn_mode == "gru" and what == "input_c mismatch":
        pytest.skip("a GRU has no cell state")
    args, attrs = make_case(rng, rnn_mode, B=2)
    if op_name == "KerasRNNBackprop":
        args = backprop_args(args, attrs, keras_rnn(args, attrs), rng)
        attrs = {}
    lengths = {"length past T": [5, 6], "negative length": [-1, 5],
               "lengths of another batch": [5, 5, 5]}
    if what in lengths:
        args["sequence_lengths"] = tf.constant(lengths[what], tf.int32)
    elif what == "input rank 2":
        args["input"] = args["input"][0]
    elif what == "batch mismatch":
        args["input_h"] = tf.zeros([3, 1, 4], tf.float64)
    else:
        args["input_c"] = tf.zeros([2, 1, 5], tf.float64)

    static = dict(attrs, **{k: v for k, v in args.items() if not tf.is_tensor(v)})
    args = {k: v for k, v in args.items() if tf.is_tensor(v)}

    def run(kw):
        return library.op(op_name)(**kw, **static)[0]

    if mode == "function":  # unknown shapes: the kernel's checks, not shape inference's
        run = tf.function(run, input_signature=[
            {k: tf.TensorSpec(None, v.dtype) for k, v in args.items()}])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        run(args)
