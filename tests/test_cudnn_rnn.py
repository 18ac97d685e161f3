"""CudnnRNN / V2 / V3 and their Backprop ops on CPU against the float64 reference
(tools/references/cudnn_rnn.py): through tf_lstm_ops.raw.* and through TF's own tf.raw_ops.* (whose
CPU kernels the plugin provides), plus tape gradients, tf.test.compute_gradient, signatures and
dropout."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

from tools.references import cudnn_rnn as R
from tools.references.cudnn_rnn import TOL, assert_close

MODES = R.MODES
DIRS = ("unidirectional", "bidirectional")
WHERE = ("plugin", "tf")
T_, B_, I_, H_, P_ = 4, 3, 3, 4, 2
LENS = [4, 1, 3]


@pytest.fixture(scope="module", autouse=True)
def plugin():
    import tf_lstm_ops

    tf_lstm_ops.load_library()
    return tf_lstm_ops


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

def make_case(rng, cfg, T, B, dtype, time_major=True):
    """Random inputs and cotangents, rounded to dtype (the reference sees the rounded values)."""
    inp = R.rounded(R.random_inputs(rng, cfg, T, B, time_major), dtype)
    cot = R.rounded(R.random_cotangents(rng, cfg, T, B, time_major), dtype)
    return inp, cot


def forward(where, version, cfg, inp, dtype, lens=None, time_major=True, **extra):
    name = {1: "CudnnRNN", 2: "CudnnRNNV2", 3: "CudnnRNNV3"}[version]
    kw = R.tf_forward_inputs(cfg, inp, dtype, lens, version, time_major)
    return R.get_op(where, name)(**kw, **R.tf_attrs(cfg, version, time_major, **extra)), kw


def backprop(where, version, cfg, kw, fwd, cot, dtype, time_major=True, **extra):
    name = {1: "CudnnRNNBackprop", 2: "CudnnRNNBackpropV2", 3: "CudnnRNNBackpropV3"}[version]
    args = dict(kw)
    args.update(output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                output_backprop=R.to_tf(cot["dy"], dtype),
                output_h_backprop=R.to_tf(cot["dh"], dtype),
                output_c_backprop=(R.to_tf(cot["dc"], dtype) if cfg.is_lstm
                                   else tf.zeros([], R.tf_dtype(dtype))),
                reserve_space=fwd.reserve_space)
    if version >= 2:
        args["host_reserved"] = fwd.host_reserved
    return R.get_op(where, name)(**args, **R.tf_attrs(cfg, version, time_major, **extra))


def check_forward(cfg, out, ref, dtype, is_training=True, version=3):
    tol = TOL[dtype]
    assert out.output.dtype == R.tf_dtype(dtype)
    assert_close(out.output, ref["output"], tol, "output")
    assert_close(out.output_h, ref["output_h"], tol, "output_h")
    if cfg.is_lstm:
        assert_close(out.output_c, ref["output_c"], tol, "output_c")
    else:
        assert out.output_c.shape == () and float(out.output_c) == 0.0, out.output_c
    if is_training:
        assert out.reserve_space.shape.rank == 1
        assert out.reserve_space.dtype == R.tf_dtype(dtype)
    else:
        assert out.reserve_space.shape == ()
    if version == 2:
        assert out.host_reserved.dtype == tf.int8
        if is_training:
            assert out.host_reserved.numpy().tolist() == [0, 0]
        else:
            assert out.host_reserved.shape == ()
    if version == 3:
        assert out.host_reserved.dtype == tf.int8 and out.host_reserved.shape == ()


def check_backprop(cfg, grads, ref, dtype):
    tol = TOL[dtype]
    assert_close(grads.input_backprop, ref["input_backprop"], tol, "input_backprop")
    assert_close(grads.input_h_backprop, ref["input_h_backprop"], tol, "input_h_backprop")
    assert_close(grads.params_backprop, ref["params_backprop"], tol, "params_backprop")
    if cfg.is_lstm:
        assert_close(grads.input_c_backprop, ref["input_c_backprop"], tol, "input_c_backprop")
    else:
        assert grads.input_c_backprop.shape == () and float(grads.input_c_backprop) == 0.0


def ref_forward(cfg, inp, lens=None, time_major=True):
    return R.forward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                     seq_lengths=lens, time_major=time_major)


def ref_backward(cfg, inp, cot, lens=None, time_major=True, **kw):
    return R.backward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                      cot["dy"], cot["dh"], cot["dc"], seq_lengths=lens, time_major=time_major,
                      **kw)


def padded_positions_are_zero(x, lens, time_major):
    x = R.to_np(x)
    x = x if time_major else x.transpose(1, 0, 2)
    return all(np.all(x[n:, b] == 0.0) for b, n in enumerate(lens))


# ----------------------------------------------------------------------------------------------
# signatures, output names, dtypes
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", R.OP_NAMES)
def test_signature_matches_tf_raw_ops(name):
    ours = inspect.signature(R.get_op("plugin", name))
    theirs = inspect.signature(getattr(tf.raw_ops, name))
    assert ours == theirs, "%s: %s != %s" % (name, ours, theirs)
    with pytest.raises(TypeError):  # positional use is rejected like tf.raw_ops
        R.get_op("plugin", name)(tf.zeros([1]))


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("dtype", R.DTYPE_NAMES)
def test_forward_and_backprop_output_names_and_dtypes(rng, version, dtype):
    cfg = R.Cfg("lstm", 1, 2, 3)
    inp, cot = make_case(rng, cfg, 2, 2, dtype)
    results = {}
    for where in WHERE:
        fwd, kw = forward(where, version, cfg, inp, dtype)
        bp = backprop(where, version, cfg, kw, fwd, cot, dtype)
        results[where] = (fwd, bp)
        for t in list(fwd[:4]) + list(bp):
            assert t.dtype == R.tf_dtype(dtype)
    fwd_names = ("output", "output_h", "output_c", "reserve_space") + (
        ("host_reserved",) if version > 1 else ())
    bp_names = ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop")
    for where in WHERE:
        assert type(results[where][0])._fields == fwd_names
        assert type(results[where][1])._fields == bp_names
    ref = ref_forward(cfg, inp)
    ref_b = ref_backward(cfg, inp, cot)
    for where in WHERE:
        check_forward(cfg, results[where][0], ref, dtype, version=version)
        check_backprop(cfg, results[where][1], ref_b, dtype)


# ----------------------------------------------------------------------------------------------
# V3 forward + Backprop: every mode x direction x projection x layout x var-len x dtype
# ----------------------------------------------------------------------------------------------

def _main_cases():
    cases = []
    for dtype in R.DTYPE_NAMES:
        for mode in MODES:
            for direction in DIRS:
                for proj in ((0, P_) if mode == "lstm" else (0,)):
                    for time_major in (True, False):
                        for varlen in (False, True):
                            for L in ((1, 2) if dtype in ("float32", "float64") else (1,)):
                                cases.append((dtype, mode, direction, proj, time_major, varlen, L))
    return cases


MAIN = _main_cases()
MAIN_IDS = ["%s-%s-%s-P%d-%s-%s-L%d" % (c[0], c[1], c[2][:3], c[3], "tm" if c[4] else "bm",
                                        "var" if c[5] else "full", c[6]) for c in MAIN]


@pytest.mark.parametrize("dtype,mode,direction,proj,time_major,varlen,L", MAIN, ids=MAIN_IDS)
def test_v3_forward_and_backprop_match_reference(rng, dtype, mode, direction, proj, time_major,
                                                 varlen, L):
    cfg = R.Cfg(mode, L, H_, I_, direction, num_proj=proj)
    inp, cot = make_case(rng, cfg, T_, B_, dtype, time_major)
    lens = LENS if varlen else None
    fwd, kw = forward("plugin", 3, cfg, inp, dtype, lens, time_major)
    check_forward(cfg, fwd, ref_forward(cfg, inp, lens, time_major), dtype)
    if varlen:
        assert padded_positions_are_zero(fwd.output, lens, time_major)
    grads = backprop("plugin", 3, cfg, kw, fwd, cot, dtype, time_major)
    check_backprop(cfg, grads, ref_backward(cfg, inp, cot, lens, time_major), dtype)
    if varlen:
        assert padded_positions_are_zero(grads.input_backprop, lens, time_major)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_batch_major_states_are_reinterpreted_not_transposed(rng, where, mode):
    """time_major=False labels the states [B, L*D, n] but reads/writes their memory as [L*D, B, n]
    (TF's quirk, docs/cudnn_rnn.md §3): a batch-major call whose states hold the time-major state
    memory equals the time-major call, with no transposition."""
    cfg = R.Cfg(mode, 2, 3, 2, "bidirectional")
    T, B = 3, 2
    inp, cot = make_case(rng, cfg, T, B, "float64")
    lens = [3, 1]
    tm, kw_tm = forward(where, 3, cfg, inp, "float64", lens, True)
    bm_inp = dict(inp, input=inp["input"].transpose(1, 0, 2),
                  input_h=inp["input_h"].reshape(B, 4, 3),
                  input_c=None if inp["input_c"] is None else inp["input_c"].reshape(B, 4, 3))
    bm, kw_bm = forward(where, 3, cfg, bm_inp, "float64", lens, False)
    np.testing.assert_array_equal(bm.output.numpy(), tm.output.numpy().transpose(1, 0, 2))
    assert bm.output_h.shape == (B, 4, 3)
    np.testing.assert_array_equal(bm.output_h.numpy().reshape(-1), tm.output_h.numpy().reshape(-1))
    if cfg.is_lstm:
        np.testing.assert_array_equal(bm.output_c.numpy().reshape(-1),
                                      tm.output_c.numpy().reshape(-1))
    bm_cot = dict(cot, dy=cot["dy"].transpose(1, 0, 2), dh=cot["dh"].reshape(B, 4, 3),
                  dc=None if cot["dc"] is None else cot["dc"].reshape(B, 4, 3))
    g_tm = backprop(where, 3, cfg, kw_tm, tm, cot, "float64", True)
    g_bm = backprop(where, 3, cfg, kw_bm, bm, bm_cot, "float64", False)
    np.testing.assert_allclose(g_bm.input_backprop.numpy(),
                               g_tm.input_backprop.numpy().transpose(1, 0, 2), atol=1e-13, rtol=0)
    np.testing.assert_allclose(g_bm.input_h_backprop.numpy().reshape(-1),
                               g_tm.input_h_backprop.numpy().reshape(-1), atol=1e-13, rtol=0)
    np.testing.assert_allclose(g_bm.params_backprop.numpy(), g_tm.params_backprop.numpy(),
                               atol=1e-13, rtol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("time_major", [True, False])
def test_v3_three_layers_and_tf_raw_ops(rng, mode, direction, time_major):
    proj = 2 if mode == "lstm" and direction == "bidirectional" else 0
    cfg = R.Cfg(mode, 3, 3, 2, direction, num_proj=proj)
    inp, cot = make_case(rng, cfg, 3, 2, "float64", time_major)
    lens = [3, 2]
    ref_f = ref_forward(cfg, inp, lens, time_major)
    ref_b = ref_backward(cfg, inp, cot, lens, time_major)
    for where in WHERE:
        fwd, kw = forward(where, 3, cfg, inp, "float64", lens, time_major)
        check_forward(cfg, fwd, ref_f, "float64")
        check_backprop(cfg, backprop(where, 3, cfg, kw, fwd, cot, "float64", time_major), ref_b,
                       "float64")


INPUT_MODE_CASES = [(m, d, im, same) for m in MODES for d in DIRS
                    for im, same in (("skip_input", True), ("auto_select", True),
                                     ("auto_select", False))]


@pytest.mark.parametrize("mode,direction,input_mode,i_equals_h", INPUT_MODE_CASES)
def test_input_modes(rng, mode, direction, input_mode, i_equals_h):
    H = 3
    cfg = R.Cfg(mode, 2, H, H if i_equals_h else 2, direction, input_mode)
    assert cfg.skip == i_equals_h
    for dtype in ("float64", "float32"):
        inp, cot = make_case(rng, cfg, 3, 2, dtype)
        assert inp["params"].size == R.cfg_params_size(cfg)
        fwd, kw = forward("plugin", 3, cfg, inp, dtype, [3, 1])
        check_forward(cfg, fwd, ref_forward(cfg, inp, [3, 1]), dtype)
        check_backprop(cfg, backprop("plugin", 3, cfg, kw, fwd, cot, dtype),
                       ref_backward(cfg, inp, cot, [3, 1]), dtype)


# ----------------------------------------------------------------------------------------------
# V1 / V2, is_training
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_v1_v2_forward_and_backprop(rng, where, version, mode, direction, dtype):
    cfg = R.Cfg(mode, 2, 3, 2, direction)
    inp, cot = make_case(rng, cfg, 3, 2, dtype)
    fwd, kw = forward(where, version, cfg, inp, dtype)
    check_forward(cfg, fwd, ref_forward(cfg, inp), dtype, version=version)
    check_backprop(cfg, backprop(where, version, cfg, kw, fwd, cot, dtype),
                   ref_backward(cfg, inp, cot), dtype)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("mode", MODES)
def test_inference_mode_same_outputs_dummy_reserve(rng, where, version, mode):
    """Inference keeps no saved gates (the CPU engine writes none): the same outputs, also for
    rows past their length (V3) and at batches that multiply the weights unpacked (B <= 3) or
    packed."""
    cfg = R.Cfg(mode, 2, 3, 2, "bidirectional")
    for batch, lens in ((2, [3, 1]), (5, [3, 0, 2, 3, 1])):
        inp, _ = make_case(rng, cfg, 3, batch, "float64")
        lens = lens if version == 3 else None
        ref = ref_forward(cfg, inp, lens)
        for dropout in (0.0, 0.5):  # is_training=False ignores dropout
            fwd, _ = forward(where, version, cfg, inp, "float64", lens, is_training=False,
                             dropout=dropout)
            check_forward(cfg, fwd, ref, "float64", is_training=False, version=version)


@pytest.mark.parametrize("mode", ["rnn_relu", "rnn_tanh", "gru"])
def test_non_lstm_input_c_is_not_read(rng, mode):
    cfg = R.Cfg(mode, 1, 3, 2, "bidirectional")
    inp, cot = make_case(rng, cfg, 3, 2, "float64")
    ref = ref_forward(cfg, inp)
    base = R.tf_forward_inputs(cfg, inp, "float64")
    for input_c in (tf.zeros([0], tf.float64), tf.constant(np.full((2, 2, 3), 7.0)),
                    tf.constant(5.0, tf.float64)):
        kw = dict(base, input_c=input_c)
        fwd = R.get_op("plugin", "CudnnRNNV3")(**kw, **R.tf_attrs(cfg))
        check_forward(cfg, fwd, ref, "float64")
        grads = backprop("plugin", 3, cfg, kw, fwd, cot, "float64")
        check_backprop(cfg, grads, ref_backward(cfg, inp, cot), "float64")


# ----------------------------------------------------------------------------------------------
# variable lengths: zero-length sequences and padding
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRS)
@pytest.mark.parametrize("time_major", [True, False])
def test_zero_length_sequences(rng, mode, direction, time_major):
    cfg = R.Cfg(mode, 2, 3, 2, direction)
    T, B = 3, 3
    lens = [0, 3, 0]
    inp, cot = make_case(rng, cfg, T, B, "float64", time_major)
    fwd, kw = forward("plugin", 3, cfg, inp, "float64", lens, time_major)
    check_forward(cfg, fwd, ref_forward(cfg, inp, lens, time_major), "float64")
    assert padded_positions_are_zero(fwd.output, lens, time_major)
    # output_h/c = input_h/c for the empty sequences (checked directly in the time-major layout)
    if time_major:
        for b in (0, 2):
            np.testing.assert_array_equal(fwd.output_h.numpy()[:, b], inp["input_h"][:, b])
            if cfg.is_lstm:
                np.testing.assert_array_equal(fwd.output_c.numpy()[:, b], inp["input_c"][:, b])
    grads = backprop("plugin", 3, cfg, kw, fwd, cot, "float64", time_major)
    ref = ref_backward(cfg, inp, cot, lens, time_major)
    check_backprop(cfg, grads, ref, "float64")
    assert padded_positions_are_zero(grads.input_backprop, lens, time_major)
    if time_major:  # pass-through: d input_h = d output_h for the empty sequences
        for b in (0, 2):
            np.testing.assert_array_equal(grads.input_h_backprop.numpy()[:, b], cot["dh"][:, b])
            if cfg.is_lstm:
                np.testing.assert_array_equal(grads.input_c_backprop.numpy()[:, b],
                                              cot["dc"][:, b])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("time_major", [True, False])
def test_padding_content_and_padded_cotangents_are_ignored(rng, mode, time_major):
    cfg = R.Cfg(mode, 2, 3, 2, "bidirectional")
    T, B = 4, 3
    lens = [2, 4, 1]
    inp, cot = make_case(rng, cfg, T, B, "float64", time_major)
    fwd, kw = forward("plugin", 3, cfg, inp, "float64", lens, time_major)
    grads = backprop("plugin", 3, cfg, kw, fwd, cot, "float64", time_major)
    junk_inp, junk_cot = dict(inp), dict(cot)
    x, dy = inp["input"].copy(), cot["dy"].copy()
    for b, n in enumerate(lens):
        sl = (slice(n, None), b) if time_major else (b, slice(n, None))
        x[sl] = 1e3
        dy[sl] = -1e3
    junk_inp["input"], junk_cot["dy"] = x, dy
    fwd2, kw2 = forward("plugin", 3, cfg, junk_inp, "float64", lens, time_major)
    grads2 = backprop("plugin", 3, cfg, kw2, fwd2, junk_cot, "float64", time_major)
    for a, b in zip(list(fwd[:3]) + list(grads), list(fwd2[:3]) + list(grads2)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# ----------------------------------------------------------------------------------------------
# tape gradients (TF's registered gradient for tf.raw_ops, ours for the plugin ops)
# ----------------------------------------------------------------------------------------------

def tape_gradients(where, version, cfg, inp, cot, dtype, lens=None, time_major=True, **extra):
    kw = R.tf_forward_inputs(cfg, inp, dtype, lens, version, time_major)
    name = {1: "CudnnRNN", 2: "CudnnRNNV2", 3: "CudnnRNNV3"}[version]
    sources = [kw["input"], kw["input_h"], kw["input_c"], kw["params"]]
    with tf.GradientTape() as tape:
        tape.watch(sources)
        out = R.get_op(where, name)(**kw, **R.tf_attrs(cfg, version, time_major, **extra))
        loss = tf.reduce_sum(out.output * R.to_tf(cot["dy"], dtype))
        loss += tf.reduce_sum(out.output_h * R.to_tf(cot["dh"], dtype))
        if cfg.is_lstm:
            loss += tf.reduce_sum(out.output_c * R.to_tf(cot["dc"], dtype))
    return tape.gradient(loss, sources)


TAPE_CASES = [(m, d, p, tm, v) for m in MODES for d in DIRS
              for p in ((0, 2) if m == "lstm" else (0,))
              for tm, v in ((True, False), (False, True))]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("mode,direction,proj,time_major,varlen", TAPE_CASES)
def test_v3_tape_gradient_matches_reference(rng, where, mode, direction, proj, time_major, varlen):
    cfg = R.Cfg(mode, 2, 3, 2, direction, num_proj=proj)
    inp, cot = make_case(rng, cfg, 3, 3, "float64", time_major)
    lens = [3, 1, 2] if varlen else None
    dx, dh, dc, dp = tape_gradients(where, 3, cfg, inp, cot, "float64", lens, time_major)
    ref = ref_backward(cfg, inp, cot, lens, time_major)
    assert_close(dx, ref["input_backprop"], 1e-10, "input")
    assert_close(dh, ref["input_h_backprop"], 1e-10, "input_h")
    assert_close(dp, ref["params_backprop"], 1e-10, "params")
    if cfg.is_lstm:
        assert_close(dc, ref["input_c_backprop"], 1e-10, "input_c")
    elif dc is not None:
        assert np.all(R.to_np(dc) == 0.0)


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_v1_v2_tape_gradient_matches_reference(rng, where, version, mode):
    cfg = R.Cfg(mode, 2, 3, 2, "bidirectional")
    inp, cot = make_case(rng, cfg, 3, 2, "float64")
    dx, dh, dc, dp = tape_gradients(where, version, cfg, inp, cot, "float64")
    ref = ref_backward(cfg, inp, cot)
    assert_close(dx, ref["input_backprop"], 1e-10, "input")
    assert_close(dh, ref["input_h_backprop"], 1e-10, "input_h")
    assert_close(dp, ref["params_backprop"], 1e-10, "params")
    if cfg.is_lstm:
        assert_close(dc, ref["input_c_backprop"], 1e-10, "input_c")


@pytest.mark.parametrize("version,mode,proj", [(v, m, 0) for v in (1, 2, 3)
                                               for m in ("lstm", "gru", "rnn_relu")]
                         + [(3, "lstm", 2)])  # (num_proj is a V3 attribute)
def test_inference_forward_is_differentiated_by_recomputing(rng, version, mode, proj):
    """A forward run with is_training=False keeps no reserve space (what a Keras layer runs at
    training=False); its gradient recomputes the training forward without dropout, so it equals
    the reference's gradient of the dropout-free model, eagerly and in a tf.function (the dropout
    attribute of two layers would change every value if it were applied)."""
    cfg = R.Cfg(mode, 2, 3, 2, "bidirectional", num_proj=proj)
    inp, cot = make_case(rng, cfg, 3, 3, "float64")
    ref = ref_backward(cfg, inp, cot)
    extra = dict(is_training=False, dropout=0.5)
    eager = tape_gradients("plugin", version, cfg, inp, cot, "float64", **extra)
    graph = tf.function(lambda: tape_gradients("plugin", version, cfg, inp, cot, "float64",
                                               **extra))()
    for got in (eager, graph):
        dx, dh, dc, dp = got
        assert_close(dx, ref["input_backprop"], 1e-10, "input")
        assert_close(dh, ref["input_h_backprop"], 1e-10, "input_h")
        assert_close(dp, ref["params_backprop"], 1e-10, "params")
        if cfg.is_lstm:
            assert_close(dc, ref["input_c_backprop"], 1e-10, "input_c")


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_inference_forward_second_derivatives_equal_training_ones(rng, mode):
    """The recomputed forward is differentiable again: a Hessian-vector product w.r.t. the params
    through an is_training=False forward equals the one through the training forward."""
    cfg = R.Cfg(mode, 1, 3, 2, "unidirectional")
    inp, cot = make_case(rng, cfg, 3, 2, "float64")
    kw = R.tf_forward_inputs(cfg, inp, "float64", None, 3, True)
    params = tf.Variable(kw.pop("params"))
    tangent = tf.constant(rng.standard_normal(params.shape))

    def hvp(is_training):
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                out = R.get_op("plugin", "CudnnRNNV3")(
                    params=params, **kw, **R.tf_attrs(cfg, 3, True, is_training=is_training))
                loss = tf.reduce_sum(tf.sin(out.output))
            grad = inner.gradient(loss, params)
            projected = tf.reduce_sum(grad * tangent)
        return outer.gradient(projected, params)

    np.testing.assert_allclose(hvp(False).numpy(), hvp(True).numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("where", WHERE)
def test_tape_gradient_of_output_only_and_inside_tf_function(rng, where):
    """Unused outputs get zero upstream gradients; the same inside a tf.function."""
    cfg = R.Cfg("lstm", 1, 3, 2, "bidirectional")
    inp, cot = make_case(rng, cfg, 3, 2, "float64")
    kw = R.tf_forward_inputs(cfg, inp, "float64", [3, 2])
    dy = R.to_tf(cot["dy"], "float64")
    op = R.get_op(where, "CudnnRNNV3")

    def grads(x, h, c, p):
        with tf.GradientTape() as tape:
            tape.watch([x, h, c, p])
            out = op(input=x, input_h=h, input_c=c, params=p,
                     sequence_lengths=kw["sequence_lengths"], **R.tf_attrs(cfg))
            loss = tf.reduce_sum(out.output * dy)
        return tape.gradient(loss, [x, h, c, p])

    zero = dict(cot, dh=np.zeros_like(cot["dh"]), dc=np.zeros_like(cot["dc"]))
    ref = ref_backward(cfg, inp, zero, [3, 2])
    args = [kw["input"], kw["input_h"], kw["input_c"], kw["params"]]
    for fn in (grads, tf.function(grads)):
        got = fn(*args)
        for g, k in zip(got, ("input", "input_h", "input_c", "params")):
            assert_close(g, ref[k + "_backprop"], 1e-10, k)


# ----------------------------------------------------------------------------------------------
# tf.test.compute_gradient, float64
# ----------------------------------------------------------------------------------------------

GRADCHECK_CASES = [(m, d, p, v) for m in MODES for d in DIRS
                   for p in ((0, 2) if m == "lstm" else (0,))
                   for v in (False, True)]


@pytest.mark.parametrize("mode,direction,proj,varlen", GRADCHECK_CASES,
                         ids=["%s-%s-P%d-%s" % (c[0], c[1][:3], c[2], "var" if c[3] else "full")
                              for c in GRADCHECK_CASES])
def test_compute_gradient(rng, mode, direction, proj, varlen):
    # alternate between TF's op (TF's registered gradient) and ours, and between 1 and 2 layers
    k = GRADCHECK_CASES.index((mode, direction, proj, varlen))
    where, L = WHERE[k % 2], 1 + (k // 2) % 2
    time_major = (k // 4) % 2 == 0
    cfg = R.Cfg(mode, L, 3, 2, direction, num_proj=proj)
    T, B = 3, 2
    inp = R.random_inputs(rng, cfg, T, B, time_major)
    lens = tf.constant([3, 1] if varlen else [3, 3], tf.int32)
    op = R.get_op(where, "CudnnRNNV3")
    attrs = R.tf_attrs(cfg, 3, time_major)
    c_const = tf.zeros([], tf.float64)

    def f(x, h, p, c=c_const):
        out = op(input=x, input_h=h, input_c=c, params=p, sequence_lengths=lens, **attrs)
        parts = [tf.reshape(out.output, [-1]), tf.reshape(out.output_h, [-1])]
        if cfg.is_lstm:
            parts.append(tf.reshape(out.output_c, [-1]))
        return tf.concat(parts, 0)

    args = [tf.constant(inp["input"]), tf.constant(inp["input_h"]), tf.constant(inp["params"])]
    if cfg.is_lstm:
        args.append(tf.constant(inp["input_c"]))
    theoretical, numerical = tf.test.compute_gradient(f, args, delta=1e-5)
    for name, a, b in zip(("input", "input_h", "params", "input_c"), theoretical, numerical):
        assert a.shape == b.shape and a.size > 0, name
        err = float(np.max(np.abs(a - b)))
        assert err <= 1e-6, "%s (%s, L=%d): max |theoretical - numerical| = %.3g" % (
            name, where, L, err)


# ----------------------------------------------------------------------------------------------
# dropout
# ----------------------------------------------------------------------------------------------

def dropout_probe(rng, L, p, T=8, B=4, H=8):
    """An rnn_relu net whose dropout masks can be read off its output: layer 0 has positive
    weights and inputs (so its output Y0 > 0), layers >= 1 have W = identity, R = 0, b_W = 0.5,
    b_R = 0, so their output is Y_{l-1} * mask / (1 - p) + 0.5."""
    cfg = R.Cfg("rnn_relu", L, H, H)
    ws, bs = R.canonical_shapes(cfg)
    weights = [np.abs(rng.uniform(0.1, 0.5, ws[0])), np.abs(rng.uniform(0.0, 0.3, ws[1]))]
    biases = [rng.uniform(0.1, 0.5, (H,)), rng.uniform(0.0, 0.5, (H,))]
    for _ in range(1, L):
        weights += [np.eye(H), np.zeros((H, H))]
        biases += [np.full(H, 0.5), np.zeros(H)]
    params = R.canonical_to_params(cfg, weights, biases)
    inp = dict(input=rng.uniform(0.1, 1.0, (T, B, H)), input_h=rng.uniform(0.0, 0.5, (L, B, H)),
               input_c=None, params=params)
    return cfg, inp


def recover_masks(cfg, inp, output, p):
    """Layer-by-layer mask recovery from the probe net's final output (L = 2 only)."""
    assert cfg.L == 2
    one = R.Cfg("rnn_relu", 1, cfg.H, cfg.I)
    ws, bs = R.params_to_canonical(cfg, inp["params"])
    y0 = R.forward(one, inp["input"], inp["input_h"][:1], None,
                   R.canonical_to_params(one, ws[:2], bs[:2]))["output"]
    ratio = (R.to_np(output) - 0.5) * (1 - p) / y0
    mask = np.round(ratio)
    assert np.all(np.abs(ratio - mask) < 1e-9), "output is not Y0 * {0, 1} / (1 - p)"
    assert set(np.unique(mask)) <= {0.0, 1.0}
    return mask


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("p", [0.25, 0.5])
def test_dropout_is_inverted_bernoulli_between_layers_and_backprop_uses_same_masks(rng, where, p):
    cfg, inp = dropout_probe(rng, 2, p)
    fwd, kw = forward(where, 3, cfg, inp, "float64", dropout=p, seed=3, seed2=5)
    mask = recover_masks(cfg, inp, fwd.output, p)
    kept = mask.mean()
    assert abs(kept - (1 - p)) < 0.15, "kept fraction %.3f for dropout %.2f" % (kept, p)
    ref = R.forward(cfg, inp["input"], inp["input_h"], None, inp["params"], dropout=p,
                    dropout_masks=[mask])
    assert_close(fwd.output, ref["output"], 1e-10, "output")
    assert_close(fwd.output_h, ref["output_h"], 1e-10, "output_h")
    cot = R.random_cotangents(rng, cfg, 8, 4)
    grads = backprop(where, 3, cfg, kw, fwd, cot, "float64", dropout=p, seed=3, seed2=5)
    check_backprop(cfg, grads, R.backward(cfg, inp["input"], inp["input_h"], None, inp["params"],
                                          cot["dy"], cot["dh"], None, dropout=p,
                                          dropout_masks=[mask]), "float64")
    # V1 and V2 drop as well
    for version in (1, 2):
        out, _ = forward(where, version, cfg, inp, "float64", dropout=p)
        recover_masks(cfg, inp, out.output, p)


@pytest.mark.parametrize("mode", MODES)
def test_dropout_zero_single_layer_and_inference(rng, mode):
    """dropout=0 is no dropout; a 1-layer net is unaffected by dropout (there is no layer
    boundary); a 2-layer net is affected in training and not in inference."""
    cfg1 = R.Cfg(mode, 1, 3, 2, "bidirectional")
    inp1, _ = make_case(rng, cfg1, 4, 3, "float64")
    ref1 = ref_forward(cfg1, inp1)
    for dropout in (0.0, 0.7):
        fwd, _ = forward("plugin", 3, cfg1, inp1, "float64", dropout=dropout)
        check_forward(cfg1, fwd, ref1, "float64")
    cfg2 = R.Cfg(mode, 2, 3, 2, "bidirectional")
    inp2, _ = make_case(rng, cfg2, 4, 3, "float64")
    ref2 = ref_forward(cfg2, inp2)
    fwd, _ = forward("plugin", 3, cfg2, inp2, "float64", dropout=0.0)
    check_forward(cfg2, fwd, ref2, "float64")
    fwd, _ = forward("plugin", 3, cfg2, inp2, "float64", dropout=0.7, seed=1)
    assert np.max(np.abs(fwd.output.numpy() - ref2["output"])) > 1e-3
    fwd, _ = forward("plugin", 3, cfg2, inp2, "float64", dropout=0.7, seed=1, is_training=False)
    check_forward(cfg2, fwd, ref2, "float64", is_training=False)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", WHERE)
def test_dropout_backprop_and_tape_gradient_are_finite(rng, mode, where):
    proj = 2 if mode == "lstm" else 0
    cfg = R.Cfg(mode, 3, 3, 2, "bidirectional", num_proj=proj)
    inp, cot = make_case(rng, cfg, 3, 2, "float32")
    fwd, kw = forward(where, 3, cfg, inp, "float32", [3, 2], dropout=0.5, seed=7)
    grads = backprop(where, 3, cfg, kw, fwd, cot, "float32", dropout=0.5, seed=7)
    for g, k in zip(grads, ("input", "input_h", "input_c", "params")):
        expected = kw[k].shape if (cfg.is_lstm or k != "input_c") else []
        assert g.shape == expected, k
        assert np.all(np.isfinite(g.numpy())), k
    assert padded_positions_are_zero(grads.input_backprop, [3, 2], True)
    # tape gradient through a dropout forward: finite, and differs from the no-dropout one
    sources = [kw["input"], kw["params"]]
    with tf.GradientTape() as tape:
        tape.watch(sources)
        out = R.get_op(where, "CudnnRNNV3")(**kw, **R.tf_attrs(cfg), dropout=0.5, seed=7)
        loss = tf.reduce_sum(out.output * R.to_tf(cot["dy"], "float32"))
    dx, dp = tape.gradient(loss, sources)
    assert np.all(np.isfinite(dx.numpy())) and np.all(np.isfinite(dp.numpy()))
    nodrop = ref_backward(cfg, inp, dict(cot, dh=0 * cot["dh"], dc=None if cot["dc"] is None
                                         else 0 * cot["dc"]), [3, 2])
    assert np.max(np.abs(dp.numpy() - nodrop["params_backprop"])) > 1e-3
