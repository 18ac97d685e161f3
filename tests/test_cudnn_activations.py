"""CudnnRNNV3Keras and its Backprop (docs/cudnn_rnn.md §4.7): the CudnnRNN cells with
Keras' element-wise activations, against the float64 NumPy reference written from the semantics
(tools/references/cudnn_rnn.py), in every mode, multi-layer, bidirectional, with projection,
sequence lengths and both layouts; float32; tf.test.compute_gradient in float64 (first order,
and through the Backprop op's gradient, the second); a reserve space from other activations is
rejected; bad attribute values are InvalidArgumentErrors naming them."""

import numpy as np
import pytest
import tensorflow as tf

from conftest import assert_gradients_to_second_order
from tools.references import cudnn_rnn as R

ACTS = tuple(R.ACTIVATIONS)
T, B, I, H = 4, 3, 3, 4


def op(name):
    """The op by name; the *V3Keras ops with their operand masks and zoneout weights none ([0])
    unless given."""
    from tf_lstm_ops._loader import library

    f = library.op(name)
    if not name.endswith("V3Keras"):
        return f

    def without_masks(**kwargs):
        dtype = tf.convert_to_tensor(kwargs["input"]).dtype
        for mask in ("input_masks", "recurrent_masks", "zoneout_h_weights", "zoneout_c_weights"):
            kwargs.setdefault(mask, tf.zeros([0], dtype))
        return f(**kwargs)

    return without_masks


def run_forward(cfg, inputs, lengths, time_major, dtype, is_training=True):
    f = op("CudnnRNNV3Keras")
    c = inputs["input_c"] if cfg.is_lstm else np.zeros(())
    return f(input=tf.constant(inputs["input"], dtype), input_h=tf.constant(inputs["input_h"], dtype),
             input_c=tf.constant(c, dtype), params=tf.constant(inputs["params"], dtype),
             sequence_lengths=tf.constant(lengths, tf.int32), rnn_mode=cfg.rnn_mode,
             input_mode=cfg.input_mode, direction=cfg.direction, num_proj=cfg.num_proj,
             time_major=time_major, is_training=is_training, activation=cfg.activation,
             recurrent_activation=cfg.recurrent_activation)


def run_backward(cfg, inputs, lengths, time_major, dtype, out, cot):
    b = op("CudnnRNNBackpropV3Keras")
    c = inputs["input_c"] if cfg.is_lstm else np.zeros(())
    dc = cot["dc"] if cfg.is_lstm else np.zeros(())
    return b(input=tf.constant(inputs["input"], dtype), input_h=tf.constant(inputs["input_h"], dtype),
             input_c=tf.constant(c, dtype), params=tf.constant(inputs["params"], dtype),
             sequence_lengths=tf.constant(lengths, tf.int32), output=out.output,
             output_h=out.output_h, output_c=out.output_c,
             output_backprop=tf.constant(cot["dy"], dtype),
             output_h_backprop=tf.constant(cot["dh"], dtype),
             output_c_backprop=tf.constant(dc, dtype), reserve_space=out.reserve_space,
             host_reserved=out.host_reserved, rnn_mode=cfg.rnn_mode, input_mode=cfg.input_mode,
             direction=cfg.direction, num_proj=cfg.num_proj, time_major=time_major,
             activation=cfg.activation, recurrent_activation=cfg.recurrent_activation)


def configs():
    """(cfg, time_major): every activation as the candidate's and as the gates', each mode; and
    the structural variants (layers, directions, projection) with a few pairs."""
    out = []
    for act in ACTS:
        out.append((R.Cfg("rnn_tanh", 1, H, I, activation=act), True))
        out.append((R.Cfg("gru", 1, H, I, activation=act, recurrent_activation="sigmoid"), False))
        out.append((R.Cfg("gru", 1, H, I, activation="tanh", recurrent_activation=act), True))
        out.append((R.Cfg("lstm", 1, H, I, activation=act, recurrent_activation="sigmoid"), False))
        out.append((R.Cfg("lstm", 1, H, I, activation="tanh", recurrent_activation=act), True))
    out += [
        (R.Cfg("lstm", 2, H, I, "bidirectional", activation="relu",
               recurrent_activation="hard_sigmoid"), True),
        (R.Cfg("lstm", 1, H, I, num_proj=2, activation="elu", recurrent_activation="silu"),
         False),
        (R.Cfg("gru", 2, H, I, "bidirectional", activation="softsign",
               recurrent_activation="hard_sigmoid_keras2"), False),
        (R.Cfg("rnn_relu", 2, H, H, "bidirectional", "skip_input", activation="gelu"), True),
    ]
    return out


def _id(param):
    cfg, time_major = param
    return "%s-L%d-%s-%s-%s%s%s" % (cfg.rnn_mode, cfg.L, cfg.direction[:3], cfg.activation,
                                    cfg.recurrent_activation or "-", "-P" if cfg.num_proj else "",
                                    "-tm" if time_major else "-bm")


CONFIGS = configs()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CONFIGS, ids=[_id(c) for c in CONFIGS])
def test_forward_and_backprop_equal_the_reference(rng, case, dtype):
    cfg, time_major = case
    inputs = R.random_inputs(rng, cfg, T, B, time_major, scale=1.5)
    lengths = np.array([T, 2, 0][:B])
    cot = R.random_cotangents(rng, cfg, T, B, time_major)
    want = R.forward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                     inputs["params"], lengths, time_major)
    want_grads = R.backward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                            inputs["params"], cot["dy"], cot["dh"], cot["dc"], lengths,
                            time_major)
    tol = R.TOL[dtype]
    for is_training in (True, False):
        out = run_forward(cfg, inputs, lengths, time_major, dtype, is_training)
        for name in ("output", "output_h", "output_c"):
            expected = want[name]
            scale = max(1.0, float(np.max(np.abs(expected)))) if np.size(expected) else 1.0
            np.testing.assert_allclose(getattr(out, name).numpy(), expected, atol=tol * scale,
                                       err_msg="%s training=%s" % (name, is_training))
    grads = run_backward(cfg, inputs, lengths, time_major, dtype, out_training(
        cfg, inputs, lengths, time_major, dtype), cot)
    for name in ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop"):
        expected = want_grads[name]
        scale = max(1.0, float(np.max(np.abs(expected)))) if np.size(expected) else 1.0
        np.testing.assert_allclose(getattr(grads, name).numpy(), expected, atol=tol * scale * 4,
                                   err_msg=name)


def out_training(cfg, inputs, lengths, time_major, dtype):
    return run_forward(cfg, inputs, lengths, time_major, dtype, True)


def test_spelling_out_cudnns_activations_is_cudnns_op(rng):
    """activation='tanh', recurrent_activation='sigmoid' (relu for rnn_relu) is V3 itself: the
    same results bit for bit, and the same reserve space (V3's Backprop accepts it)."""
    for cfg in (R.Cfg("lstm", 1, H, I, activation="tanh", recurrent_activation="sigmoid"),
                R.Cfg("gru", 1, H, I, recurrent_activation="sigmoid"),
                R.Cfg("rnn_relu", 1, H, I, activation="relu")):
        inputs = R.random_inputs(rng, cfg, T, B)
        lengths = np.array([T, 1, 3])
        ours = run_forward(cfg, inputs, lengths, True, "float32")
        c = inputs["input_c"] if cfg.is_lstm else np.zeros(())
        v3 = op("CudnnRNNV3")(
            input=tf.constant(inputs["input"], tf.float32),
            input_h=tf.constant(inputs["input_h"], tf.float32),
            input_c=tf.constant(c, tf.float32), params=tf.constant(inputs["params"], tf.float32),
            sequence_lengths=tf.constant(lengths, tf.int32), rnn_mode=cfg.rnn_mode)
        for a, b in zip(ours[:4], v3[:4]):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_reserve_space_of_other_activations_is_rejected(rng):
    cfg = R.Cfg("lstm", 1, H, I, activation="relu", recurrent_activation="sigmoid")
    inputs = R.random_inputs(rng, cfg, T, B)
    lengths = np.array([T, T, T])
    cot = R.random_cotangents(rng, cfg, T, B)
    out = run_forward(cfg, inputs, lengths, True, "float32")
    for other in (R.Cfg("lstm", 1, H, I, activation="elu", recurrent_activation="sigmoid"),
                  R.Cfg("lstm", 1, H, I)):
        with pytest.raises(tf.errors.InvalidArgumentError, match="reserve_space"):
            run_backward(other, inputs, lengths, True, "float32", out, cot)


@pytest.mark.parametrize("attrs, match", [
    (dict(activation="swish"), "activation must be '' .cuDNN's. or one of tanh, sigmoid"),
    (dict(activation="Tanh"), "but is 'Tanh'"),
    (dict(recurrent_activation="gelu_tanh"), "recurrent_activation must be"),
    (dict(rnn_mode="rnn_tanh", recurrent_activation="sigmoid"),
     "recurrent_activation is for rnn_mode 'lstm' and 'gru' only"),
])
def test_bad_activation_attrs_name_the_attribute(attrs, match):
    args = dict(input=tf.zeros([2, 1, 3]), input_h=tf.zeros([1, 1, 4]), input_c=tf.zeros([1, 1, 4]),
                params=tf.zeros([200]), sequence_lengths=tf.constant([2]), rnn_mode="lstm")
    args.update(attrs)
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        op("CudnnRNNV3Keras")(**args)


GRAD_CASES = [
    R.Cfg("lstm", 1, 3, 2, activation="elu", recurrent_activation="hard_sigmoid"),
    R.Cfg("gru", 1, 3, 2, activation="gelu", recurrent_activation="softsign"),
    R.Cfg("rnn_tanh", 1, 3, 2, activation="silu"),
]


@pytest.mark.parametrize("cfg", GRAD_CASES, ids=lambda c: c.rnn_mode)
def test_first_and_second_order_gradients_in_float64(rng, cfg):
    """compute_gradient through the registered gradient (the fused Backprop op) and through its
    gradient (the composite of TensorFlow ops), against finite differences."""
    inputs = R.random_inputs(rng, cfg, 3, 2, scale=1.2)
    x0 = tf.constant(inputs["input"])
    h0 = tf.constant(inputs["input_h"])
    c0 = tf.constant(inputs["input_c"] if cfg.is_lstm else np.zeros(()))
    p0 = tf.constant(inputs["params"])
    lengths = tf.constant([3, 2], tf.int32)
    attrs = dict(rnn_mode=cfg.rnn_mode, activation=cfg.activation,
                 recurrent_activation=cfg.recurrent_activation)
    dy = tf.constant(rng.uniform(-1, 1, (3, 2, 3)))

    def loss(x, h, p):
        out = op("CudnnRNNV3Keras")(input=x, input_h=h, input_c=c0, params=p,
                                               sequence_lengths=lengths, **attrs)
        return tf.reduce_sum(out.output * dy) + tf.reduce_sum(out.output_h ** 2)

    assert_gradients_to_second_order(loss, [x0, h0, p0])


def _v3_forward_cases():
    from test_cudnn_validation import FORWARD_CASES

    return [c for c in FORWARD_CASES if c[1] == 3]


V3_CASES = _v3_forward_cases()


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", V3_CASES, ids=[c[0] for c in V3_CASES])
def test_every_bad_v3_input_is_rejected_with_activations_too(case, mode):
    """The op validates as V3 (tests/test_cudnn_validation.py's cases, each one bad input or
    attribute), eagerly and in a tf.function with unknown shapes: an InvalidArgumentError
    naming it."""
    from test_cudnn_validation import expect_invalid

    _, version, build, names = case
    kwargs = dict(build(version), activation="elu")
    expect_invalid(op("CudnnRNNV3Keras"), kwargs, mode, names)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("sizes", [(0, 2, 3, 4), (3, 0, 3, 4), (3, 2, 0, 4), (3, 2, 3, 0)],
                         ids=["T0", "B0", "I0", "H0"])
@pytest.mark.parametrize("rnn_mode", ["lstm", "gru", "rnn_tanh"])
def test_empty_dimensions_are_valid_with_activations(rnn_mode, sizes, mode):
    """Empty time, batch, input or units: correctly shaped results, the final states the
    initial ones where nothing runs, and a backprop of the right shapes (never an error)."""
    from test_cudnn_validation import call

    T_, B_, I_, H_ = sizes
    cfg = R.Cfg(rnn_mode, 1, H_, I_, activation="silu",
                recurrent_activation="hard_sigmoid" if rnn_mode != "rnn_tanh" else "")
    inputs = R.random_inputs(np.random.default_rng(0), cfg, T_, B_)
    c = inputs["input_c"] if cfg.is_lstm else np.zeros(())
    kw = dict(input=tf.constant(inputs["input"], tf.float32),
              input_h=tf.constant(inputs["input_h"], tf.float32), input_c=tf.constant(c, tf.float32),
              params=tf.constant(inputs["params"], tf.float32),
              sequence_lengths=tf.constant([T_] * B_, tf.int32), rnn_mode=rnn_mode,
              activation=cfg.activation, recurrent_activation=cfg.recurrent_activation)
    out = call(op("CudnnRNNV3Keras"), kw, mode)
    want = R.forward(cfg, inputs["input"], inputs["input_h"], inputs["input_c"],
                     inputs["params"], [T_] * B_)
    for name in ("output", "output_h"):
        np.testing.assert_allclose(np.asarray(getattr(out, name)), want[name], atol=1e-5)
