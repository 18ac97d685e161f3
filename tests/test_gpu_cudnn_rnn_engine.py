"""The CudnnRNN GPU engine (cc/cudnn_rnn/gpu_engine.h) without a GPU: the self-test module built
with nvcc (tools/gpu_selftest/build.py) runs the engine on its HostBackend (the same engine code,
the CUDA calls executed on the CPU) and tools/gpu_selftest/cudnn_rnn_checks.py compares it with the
float64 reference in every dtype, and with the CPU TensorFlow op, whose reserve-space format it
shares."""

import dataclasses

import numpy as np
import pytest

from tools.references import cudnn_rnn as R

from tools.gpu_selftest import cudnn_rnn_checks as C  # noqa: E402  (pytest.ini: repo on sys.path)

CASES = C.engine_cases()


@pytest.fixture
def mod(selftest_module):
    """conftest.py's session-wide self-test module (skips without nvcc)."""
    return selftest_module


@pytest.fixture
def alloc():
    return C.NumpyAllocator()


# ------------------------------------------------------------------------------------------------
# against the float64 reference, every dtype
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_backward_match_reference(mod, alloc, rng, case, dtype):
    C.check_case(mod, alloc, case, dtype, rng)


def test_cases_cover_the_grid():
    seen = {(c.mode, c.num_proj > 0, c.direction, c.num_layers, c.time_major, c.lengths is None)
            for c in CASES}
    for mode in R.MODES:
        for proj in ((False, True) if mode == "lstm" else (False,)):
            for direction in ("unidirectional", "bidirectional"):
                for layers in (1, 2):
                    for tm in (True, False):
                        for full in (True, False):
                            assert (mode, proj, direction, layers, tm, full) in seen
    assert {c.mode for c in CASES if c.skip_input} == set(R.MODES)
    assert {c.mode for c in CASES if c.dropout_active} == set(R.MODES)
    assert all(0 in c.lengths and c.time in c.lengths for c in CASES if c.lengths)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", C.empty_cases(), ids=[c.name for c in C.empty_cases()])
def test_empty_time_or_batch(mod, alloc, rng, case, dtype):
    C.check_empty(mod, alloc, case, dtype, rng)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("mode", R.MODES)
def test_reserve_header_mismatch_gives_nan(mod, alloc, rng, mode, dtype):
    case = C.Case(mode, 2, 4, 3, "bidirectional", 2 if mode == "lstm" else 0,
                  lengths=C.VARLEN, dropout=0.5 if mode == "gru" else 0.0)
    C.check_header_mismatch(mod, alloc, case, dtype, rng)


DETERMINISM_CASES = [
    C.Case("lstm", 2, 4, 3, "bidirectional", 2, time_major=False, lengths=C.VARLEN,
           dropout=0.5, seed=11),
    C.Case("gru", 1, 4, 3, time_major=False, lengths=C.VARLEN, input_masks=True,
           recurrent_masks=True),
    C.Case("gru", 2, 4, 3, "bidirectional", lengths=C.VARLEN, reset_after=False),
    C.Case("gru", 1, 4, 3, lengths=C.VARLEN, input_masks=True, recurrent_masks=True,
           reset_after=False),
    C.Case("lstm", 1, 4, 3, time_major=False, lengths=C.VARLEN, recurrent_masks=True,
           zoneout_h=C.PER_ELEMENT, zoneout_c=0.9),
]


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", DETERMINISM_CASES, ids=[c.name for c in DETERMINISM_CASES])
def test_deterministic(mod, alloc, rng, case, dtype):
    C.check_deterministic(mod, alloc, case, dtype, rng)


# ------------------------------------------------------------------------------------------------
# operand masks (Keras' recurrent dropout): the cases are in CASES (C.mask_cases()), checked
# against the float64 reference above in every dtype; the host's 3-row batches take the
# persistent forward there, so here the per-step forward too (and zoneout's, below)
# ------------------------------------------------------------------------------------------------

MASK_CASES = C.mask_cases()
ZONEOUT_CASES = C.zoneout_cases()  # (their section is below)


def test_mask_cases_cover_the_grid():
    masked = [c for c in CASES if c.masked and not c.zoned]
    assert masked == MASK_CASES
    seen = {(c.mode, c.reset_after, c.input_masks, c.recurrent_masks, c.time_major,
             c.lengths is None) for c in masked}
    for mode, reset_after in [(m, True) for m in R.MODES] + [("gru", False)]:
        for which in ((True, False), (False, True), (True, True)):
            for tm in (True, False):
                for full in (True, False):
                    assert (mode, reset_after, *which, tm, full) in seen
    assert {c.mode for c in masked if c.activation} == set(R.MODES)
    assert all(c.num_layers == 1 and c.direction == "unidirectional" and not c.num_proj
               and not c.skip_input for c in masked)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", MASK_CASES + ZONEOUT_CASES,
                         ids=[c.name for c in MASK_CASES + ZONEOUT_CASES])
def test_masked_or_zoned_per_step_forward_matches_reference(mod, alloc, rng, monkeypatch, case,
                                                            dtype):
    monkeypatch.setenv(PERSISTENT_ENV, "0")
    assert _path(mod, case, dtype)["path"] == "per_step"
    C.check_case(mod, alloc, case, dtype, rng)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("mode", R.MODES)
def test_mask_presence_enters_reserve_header(mod, alloc, rng, mode, dtype):
    # a backward without one of the forward's masks gets NaN (check_header_mismatch)
    case = C.Case(mode, 1, 4, 3, lengths=C.VARLEN, input_masks=True, recurrent_masks=True)
    C.check_header_mismatch(mod, alloc, case, dtype, rng)


def test_masked_runs_take_more_scratch(mod):
    # (16-bit: a masked copy of h_prev in T replaces the T mirror of h, which may weigh the same)
    kw = C.Case("gru", 1, 4, 3, time=5).model_kwargs()
    for dtype in ("float32", "float64"):
        for which in ("forward", "backward"):
            size = getattr(mod, "rnn_%s_scratch_bytes" % which)
            plain = size("host", dtype, **kw)
            for masks in (dict(input_masks=1), dict(recurrent_masks=1)):
                assert size("host", dtype, **kw, **masks) > plain, (dtype, which, masks)


@pytest.mark.parametrize("change", [dict(num_layers=2), dict(direction="bidirectional"),
                                    dict(num_proj=2), dict(skip_input=True, input_size=4)],
                         ids=["layers", "bidirectional", "projection", "skip_input"])
@pytest.mark.parametrize("mask", C.MASK_NAMES + C.ZONEOUT_NAMES)
def test_masks_only_for_keras_models(mod, change, mask):
    # (zoneout's weights too; zoneout_c's modes: test_zoneout_c_only_for_lstm)
    kw = dataclasses.replace(C.Case("lstm", 1, 4, 3), **change).model_kwargs()
    assert mod.rnn_forward_scratch_bytes("host", "float32", **kw) > 0
    what = "zoneout" if mask in C.ZONEOUT_NAMES else "operand masks"
    with pytest.raises(ValueError, match=what):
        mod.rnn_forward_scratch_bytes("host", "float32", **kw, **{mask: 1})


# ------------------------------------------------------------------------------------------------
# the GRU resetting before (Keras' GRU(reset_after=False), docs/cudnn_rnn.md §4.8): its cases are
# in CASES (C.reset_before_cases(); with operand masks in C.mask_cases()), checked against the
# float64 reference above in every dtype; the persistent forward and the CPU op below take some
# ------------------------------------------------------------------------------------------------

def test_reset_before_cases_cover_the_grid():
    rb = [c for c in CASES if not c.reset_after]
    assert rb and all(c.mode == "gru" for c in rb)
    plain = [c for c in rb if not c.masked]
    seen = {(c.direction, c.num_layers, c.time_major, c.lengths is None) for c in plain}
    for direction in ("unidirectional", "bidirectional"):
        for layers in (1, 2):
            for tm in (True, False):
                for full in (True, False):
                    assert (direction, layers, tm, full) in seen
    assert any(c.skip_input for c in plain) and any(c.dropout_active for c in plain)
    keras = [c for c in rb if c.activation or c.recurrent_activation]
    assert any(c.num_layers == 2 and c.direction == "bidirectional" for c in keras)
    assert any(c.masked for c in keras)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_reset_after_enters_reserve_header(mod, alloc, rng, masked, dtype):
    # a backward told reset_after=True on a reset-before forward's reserve space gets NaN
    # (check_header_mismatch; test_reserve_header_mismatch_gives_nan does the converse)
    case = (C.Case("gru", 1, 4, 3, lengths=C.VARLEN, input_masks=True, recurrent_masks=True,
                   reset_after=False) if masked else
            C.Case("gru", 2, 4, 3, "bidirectional", lengths=C.VARLEN, dropout=0.5,
                   reset_after=False))
    C.check_header_mismatch(mod, alloc, case, dtype, rng)


def test_reset_before_only_for_gru(mod):
    for mode in ("lstm", "rnn_relu", "rnn_tanh"):
        kw = dict(C.Case(mode, 1, 4, 3).model_kwargs(), reset_after=False)
        with pytest.raises(ValueError, match="reset_after"):
            mod.rnn_forward_scratch_bytes("host", "float32", **kw)


def test_scratch_sizes(mod):
    """The host backend reserves no cuBLAS workspace, the CUDA one 32 MiB more; sizes grow with
    the run and are 256-byte multiples."""
    kw = C.Case("lstm", 2, 4, 3, "bidirectional", 2, lengths=C.VARLEN).model_kwargs()
    for dtype in C.DTYPES:
        for which in ("forward", "backward"):
            size = getattr(mod, "rnn_%s_scratch_bytes" % which)
            host, cuda = size("host", dtype, **kw), size("cuda", dtype, **kw)
            assert host > 0 and host % 256 == 0
            assert cuda == host + (32 << 20)
            assert size("host", dtype, **dict(kw, time=8)) > host
    with pytest.raises(ValueError):
        mod.rnn_forward_scratch_bytes("tpu", "float32", **kw)
    with pytest.raises(ValueError):
        mod.rnn_forward_scratch_bytes("host", "int8", **kw)
    with pytest.raises(ValueError):
        mod.rnn_workspace_bytes("float32", **dict(kw, lengths=[5, 0, 1]))


# ------------------------------------------------------------------------------------------------
# zoneout (docs/cudnn_rnn.md §4.9): its cases are in CASES (C.zoneout_cases()), checked against
# the float64 reference above in every dtype on the persistent forward, and on the per-step one
# with the masked cases; here the extreme weights, and what the reserve header and the bindings
# say
# ------------------------------------------------------------------------------------------------

def test_zoneout_cases_cover_the_grid():
    zoned = [c for c in CASES if c.zoned]
    assert zoned == ZONEOUT_CASES

    def kind(w):
        return None if w is None else "per_element" if w == C.PER_ELEMENT else "one"

    seen = {(c.mode, c.reset_after, kind(c.zoneout_h), kind(c.zoneout_c), c.time_major,
             c.lengths is None) for c in zoned}
    models = [(m, True) for m in R.MODES] + [("gru", False)]
    for mode, reset_after in models:
        whiches = ([("per_element", None), (None, "per_element"), ("per_element", "per_element")]
                   if mode == "lstm" else [("per_element", None)])
        for zh, zc in whiches:
            for tm in (True, False):
                for full in (True, False):
                    assert (mode, reset_after, zh, zc, tm, full) in seen
            # one weight: time-major with lengths, batch-major without
            one = (zh and "one", zc and "one")
            assert (mode, reset_after, *one, True, False) in seen
            assert (mode, reset_after, *one, False, True) in seen
    assert {(c.mode, c.reset_after) for c in zoned if c.masked and c.activation} >= {
        ("lstm", True), ("gru", True), ("gru", False), ("rnn_tanh", True)}
    assert any(c.masked and c.mode == "rnn_relu" for c in zoned)
    assert all(c.num_layers == 1 and c.direction == "unidirectional" and not c.num_proj
               and not c.skip_input and (c.mode == "lstm" or c.zoneout_c is None)
               for c in zoned)


def _zoned_both(case, w):
    return dataclasses.replace(case, zoneout_h=w, zoneout_c=w if case.mode == "lstm" else None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("model", [("lstm", True), ("gru", True), ("gru", False),
                                   ("rnn_tanh", True)], ids=["lstm", "gru", "gru-reset-before",
                                                             "rnn_tanh"])
def test_zoneout_extremes(mod, alloc, rng, model, dtype):
    # Weights 1 carry the new states: the run of the same (Keras') cells without zoneout.
    # Weights 0 hold the initial states: the outputs are h_0, the cells get no gradient, and
    # dL/dh_0 (dL/dc_0) is the sum of every step's and the final state's.
    mode, reset_after = model
    case = C.Case(mode, 1, 4, 3, lengths=C.VARLEN, activation="tanh",
                  recurrent_activation="" if mode.startswith("rnn") else "sigmoid",
                  reset_after=reset_after)
    inp, cot = C.make_inputs(rng, case, dtype)
    plain = C.run_forward(mod, alloc, case, dtype, inp)
    plain_grads = C.run_backward(mod, alloc, case, dtype, inp, cot, plain["workspace_buffer"])
    ones, zeros = _zoned_both(case, 1.0), _zoned_both(case, 0.0)
    zin = dict(inp, **C.random_zoneout(rng, ones))
    fwd = C.run_forward(mod, alloc, ones, dtype, zin)
    grads = C.run_backward(mod, alloc, ones, dtype, zin, cot, fwd["workspace_buffer"])
    tol = _path_tol(dtype)
    for k in ("output", "output_h", "output_c"):
        if plain[k] is not None:
            C.assert_close(fwd[k], plain[k], tol, k)
    for k, v in plain_grads.items():
        if v is not None:
            C.assert_close(grads[k], v, tol, k)

    zin = dict(inp, **C.random_zoneout(rng, zeros))
    fwd = C.run_forward(mod, alloc, zeros, dtype, zin)
    grads = C.run_backward(mod, alloc, zeros, dtype, zin, cot, fwd["workspace_buffer"])
    h0 = inp["input_h"][0]
    out = fwd["output"]  # time-major
    for b, n in enumerate(case.lengths):
        assert np.array_equal(out[:n, b], np.broadcast_to(h0[b], out[:n, b].shape)), b
    assert np.array_equal(fwd["output_h"], inp["input_h"])
    dh0 = cot["dh"][0] + sum(np.where(t < np.array(case.lengths)[:, None], cot["dy"][t], 0.0)
                             for t in range(case.time))
    C.assert_close(grads["input_h_backprop"][0], dh0, tol, "input_h_backprop")
    if mode == "lstm":
        assert np.array_equal(fwd["output_c"], inp["input_c"])
        assert np.array_equal(grads["input_c_backprop"], cot["dc"])
    assert np.all(grads["params_backprop"] == 0.0) and np.all(grads["input_backprop"] == 0.0)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("mode", R.MODES)
def test_zoneout_enters_reserve_header(mod, alloc, rng, mode, dtype):
    # a backward without one of the forward's zoneouts, or with one value for its per-element
    # weights, gets NaN (check_header_mismatch)
    case = C.Case(mode, 1, 4, 3, lengths=C.VARLEN, zoneout_h=C.PER_ELEMENT,
                  zoneout_c=0.9 if mode == "lstm" else None)
    C.check_header_mismatch(mod, alloc, case, dtype, rng)


def test_zoneout_scratch(mod):
    # The weights in the compute type: staged for 16-bit storage, and for float/double per element
    # when batch-major; read in place otherwise. Backward, LSTM's and the plain RNN's direct term
    # of dL/dh_prev needs a buffer of its own (GRU has one).
    for mode in R.MODES:
        tm = C.Case(mode, 1, 4, 3, time=5).model_kwargs()
        bm = dict(tm, time_major=False)
        for which in ("forward", "backward"):
            size = getattr(mod, "rnn_%s_scratch_bytes" % which)
            direct = which == "backward" and mode != "gru"
            for per_element in (True, False):
                zoned = dict(zoneout_h=1, zoneout_h_per_element=per_element)
                assert size("host", "half", **tm, **zoned) > size("host", "half", **tm)
                for dtype in ("float32", "float64"):
                    plain = size("host", dtype, **tm)
                    got = size("host", dtype, **tm, **zoned)
                    assert got > plain if direct else got == plain, (mode, which, dtype)
                    staged = per_element or direct
                    got, plain = size("host", dtype, **bm, **zoned), size("host", dtype, **bm)
                    assert got > plain if staged else got == plain, (mode, which, dtype)


def test_zoneout_c_only_for_lstm(mod):
    for mode in ("gru", "rnn_relu", "rnn_tanh"):
        kw = C.Case(mode, 1, 4, 3).model_kwargs()
        assert mod.rnn_forward_scratch_bytes("host", "float32", **kw, zoneout_h=1) > 0
        with pytest.raises(ValueError, match="zoneout_c"):
            mod.rnn_forward_scratch_bytes("host", "float32", **kw, zoneout_c=1)


# ------------------------------------------------------------------------------------------------
# against the CPU TensorFlow op: same numbers, same reserve space
# ------------------------------------------------------------------------------------------------

TF_CASES = [
    C.Case("lstm", 2, 4, 3, "bidirectional", 2, time_major=False, lengths=C.VARLEN),
    C.Case("lstm", 1, 3, 2, "unidirectional"),
    C.Case("gru", 2, 4, 3, "bidirectional", lengths=C.VARLEN),
    C.Case("rnn_relu", 2, 4, 4, "unidirectional", skip_input=True, lengths=(3, 4, 1)),
    C.Case("rnn_tanh", 2, 3, 2, "bidirectional", time_major=False),
    # the GRU resetting before (CudnnRNNV3Keras), with Keras' activations and operand masks
    C.Case("gru", 2, 4, 3, "bidirectional", time_major=False, lengths=C.VARLEN,
           reset_after=False),
    C.Case("gru", 1, 4, 3, lengths=C.VARLEN, activation="elu", recurrent_activation="softsign",
           input_masks=True, recurrent_masks=True, reset_after=False),
    # zoneout (CudnnRNNV3Keras): per element and one value, with operand masks in some
    C.Case("lstm", 1, 4, 3, time_major=False, lengths=C.VARLEN, recurrent_masks=True,
           zoneout_h=C.PER_ELEMENT, zoneout_c=C.PER_ELEMENT),
    C.Case("lstm", 1, 4, 3, lengths=C.VARLEN, zoneout_h=0.9, zoneout_c=0.75),
    C.Case("gru", 1, 4, 3, lengths=C.VARLEN, activation="softsign", input_masks=True,
           zoneout_h=C.PER_ELEMENT, reset_after=False),
    C.Case("gru", 1, 4, 3, time_major=False, zoneout_h=0.9),
    C.Case("rnn_relu", 1, 4, 3, lengths=C.VARLEN, zoneout_h=C.PER_ELEMENT),
]


@pytest.fixture(scope="module")
def tf_ops():
    import tensorflow as tf
    import tf_lstm_ops

    tf_lstm_ops.load_library()
    return tf


def _keras_op(case):
    """Whether the case needs the *Keras ops (Keras' cells, operand masks or zoneout)."""
    return (not case.reset_after or case.masked or case.zoned or case.activation
            or case.recurrent_activation)


def _plugin_op(name):  # (tf_lstm_ops.raw does not list the *Keras ops)
    from tf_lstm_ops._loader import library

    return library.op(name)


def _tf_attrs(case):
    attrs = R.tf_attrs(case.cfg, 3, case.time_major)
    if _keras_op(case):
        attrs.update(activation=case.activation, recurrent_activation=case.recurrent_activation,
                     reset_after=case.reset_after)
    return attrs


def _tf_forward(case, inp, dtype):
    kw = R.tf_forward_inputs(case.cfg, inp, dtype, case.lengths, 3, case.time_major)
    if _keras_op(case):  # the masks and zoneout weights as given, or [0] for none
        kw.update({k + ("_weights" if k in C.ZONEOUT_NAMES else ""):
                   R.to_tf(inp[k] if C.present(case, k) else np.zeros([0]), dtype)
                   for k in C.MASK_NAMES + C.ZONEOUT_NAMES})
    name = "CudnnRNNV3Keras" if _keras_op(case) else "CudnnRNNV3"
    out = _plugin_op(name)(**kw, **_tf_attrs(case), is_training=True)
    return out, kw


def _tf_backprop(tf, case, kw, fwd, cot, reserve, dtype):
    args = dict(kw, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                output_backprop=R.to_tf(cot["dy"], dtype),
                output_h_backprop=R.to_tf(cot["dh"], dtype),
                output_c_backprop=(R.to_tf(cot["dc"], dtype) if case.mode == "lstm"
                                   else tf.zeros([], R.tf_dtype(dtype))),
                reserve_space=reserve, host_reserved=fwd.host_reserved)
    name = "CudnnRNNBackpropV3Keras" if _keras_op(case) else "CudnnRNNBackpropV3"
    return _plugin_op(name)(**args, **_tf_attrs(case))


@pytest.mark.parametrize("case", TF_CASES, ids=[c.name for c in TF_CASES])
def test_matches_cpu_op_float64_with_identical_reserve_space(mod, alloc, rng, tf_ops, case):
    tf, dtype, tol = tf_ops, "float64", 1e-12
    inp, cot = C.make_inputs(rng, case, dtype)
    ours = C.run_forward(mod, alloc, case, dtype, inp)
    theirs, kw = _tf_forward(case, inp, dtype)
    for k in ("output", "output_h") + (("output_c",) if case.mode == "lstm" else ()):
        R.assert_close(ours[k], getattr(theirs, k).numpy(), tol, k)
    # The reserve space: same size, same header, same saved activations.
    reserve = np.frombuffer(theirs.reserve_space.numpy().tobytes(), np.uint8)
    assert len(reserve) == len(ours["workspace"])
    assert reserve[:C.HEADER_BYTES].tobytes() == ours["workspace"][:C.HEADER_BYTES].tobytes()
    R.assert_close(C.workspace_values(case, dtype, ours["workspace"]),
                   C.workspace_values(case, dtype, reserve), tol, "reserve space")

    ref_grads = _tf_backprop(tf, case, kw, theirs, cot, theirs.reserve_space, dtype)
    names = ("input_backprop", "input_h_backprop", "params_backprop") + (
        ("input_c_backprop",) if case.mode == "lstm" else ())
    # our backprop on our reserve space, and on TF's
    for ws in (ours["workspace_buffer"], alloc.upload(theirs.reserve_space.numpy(), dtype)):
        grads = C.run_backward(mod, alloc, case, dtype, inp, cot, ws)
        for k in names:
            R.assert_close(grads[k], getattr(ref_grads, k).numpy(), tol, k)
    # TF's backprop on our reserve space
    our_reserve = tf.constant(np.frombuffer(ours["workspace"].tobytes(), np.float64))
    cross = _tf_backprop(tf, case, kw, theirs, cot, our_reserve, dtype)
    for k in names:
        R.assert_close(getattr(cross, k).numpy(), getattr(ref_grads, k).numpy(), tol, k)


@pytest.mark.parametrize("dtype", C.DTYPES)
def test_workspace_bytes_and_header_equal_cpu_op(mod, alloc, rng, tf_ops, dtype):
    """What the CPU OpKernel allocates and writes (RnnWorkspaceBytes, MakeReserveHeader) is what
    the engine writes, in every dtype; the saved activations agree to the dtype's compute type."""
    case = TF_CASES[0]
    inp, _ = C.make_inputs(rng, case, dtype)
    ours = C.run_forward(mod, alloc, case, dtype, inp)
    theirs, _ = _tf_forward(case, inp, dtype)
    reserve = np.frombuffer(theirs.reserve_space.numpy().tobytes(), np.uint8)
    size = np.dtype(C.STORAGE[dtype]).itemsize
    n = len(ours["workspace"])
    assert n == mod.rnn_workspace_bytes(dtype, **case.model_kwargs())
    assert len(reserve) == (n + size - 1) // size * size  # whole elements of T
    assert reserve[:C.HEADER_BYTES].tobytes() == ours["workspace"][:C.HEADER_BYTES].tobytes()
    tol = 1e-12 if dtype == "float64" else 1e-5
    R.assert_close(C.workspace_values(case, dtype, ours["workspace"]),
                   C.workspace_values(case, dtype, reserve[:n]), tol, "reserve space")


# ------------------------------------------------------------------------------------------------
# the persistent forward recurrence (small batches, no projection) against the per-step path
# ------------------------------------------------------------------------------------------------
# The engine runs a pseudo-layer's forward recurrence as one persistent launch (R on chip, a
# grid barrier per step) when batch <= 16, there is no projection and the grid fits; the host
# backend emulates a device of 3 co-resident blocks with 48 KiB of shared memory each, so the
# small cases here (and the grid above, B = 3 without a projection) take it with several blocks.
# The test-only switch TF_LSTM_OPS_RNN_PERSISTENT=0 makes the engine take the per-step path.
# Backprop is per step either way.
PERSISTENT_ENV = C.PERSISTENT_ENV
# persistent vs per step: only the recurrent dot product's summation order may differ
PATH_TOL = dict(TOL_float64=1e-12, TOL_float32=1e-5)


def _persistent_cases():
    cases = []
    for mode in R.MODES:
        for direction in ("unidirectional", "bidirectional"):
            for layers in (1, 2):
                # H = 5 on 3 blocks: 2 units per block, the last block has 1; every dot
                # product split over 8 (LSTM, GRU) or 32 (RNN) threads
                cases.append(C.Case(mode, layers, 5, 3, direction, time=5, batch=4,
                                    time_major=direction == "unidirectional",
                                    lengths=(5, 0, 3, 1) if layers == 2 else None))
    # the largest batch: 16 x 4 gates x 3 units = 192 dot products, one thread each
    cases.append(C.Case("lstm", 2, 7, 2, "bidirectional", time=3, batch=16,
                        lengths=tuple(k % 4 for k in range(16))))
    cases.append(C.Case("gru", 1, 1, 2, "unidirectional", time=3, batch=1))  # one unit, one row
    cases.append(C.Case("rnn_tanh", 2, 4, 4, "bidirectional", skip_input=True, batch=2,
                        lengths=(4, 0)))
    # the GRU resetting before: two phases a step (the candidate's dot products read every
    # unit's r ⊙ h_operand), with Keras' activations and operand masks in some
    for direction in ("unidirectional", "bidirectional"):
        for layers in (1, 2):
            cases.append(C.Case("gru", layers, 5, 3, direction, time=5, batch=4,
                                time_major=layers == 1, lengths=(5, 0, 3, 1) if layers == 2
                                else None, activation="softsign" if direction[0] == "b" else "",
                                reset_after=False))
    cases.append(C.Case("gru", 1, 5, 3, time=5, batch=4, lengths=(5, 0, 3, 1), input_masks=True,
                        recurrent_masks=True, reset_after=False))
    cases.append(C.Case("gru", 1, 7, 2, time=3, batch=16, recurrent_masks=True,
                        lengths=tuple(k % 4 for k in range(16)), reset_after=False))
    # operand masks: h_prev ⊙ recurrent_masks[g] in the dot products
    for mode in R.MODES:
        cases.append(C.Case(mode, 1, 5, 3, time=5, batch=4, time_major=mode != "gru",
                            lengths=(5, 0, 3, 1) if mode in ("lstm", "rnn_relu") else None,
                            input_masks=mode != "rnn_tanh", recurrent_masks=True))
    cases.append(C.Case("lstm", 1, 7, 2, time=3, batch=16, lengths=tuple(k % 4 for k in range(16)),
                        recurrent_masks=True))
    # zoneout: the step functors blend the carried states
    for k, (mode, reset_after) in enumerate((("lstm", True), ("gru", True), ("gru", False),
                                             ("rnn_relu", True))):
        cases.append(C.Case(mode, 1, 5, 3, time=5, batch=4, time_major=k % 2 == 0,
                            lengths=(5, 0, 3, 1) if k < 2 else None, recurrent_masks=k == 2,
                            reset_after=reset_after, zoneout_h=C.PER_ELEMENT if k != 3 else 0.9,
                            zoneout_c=0.75 if mode == "lstm" else None))
    return cases


PERSISTENT_CASES = _persistent_cases()


def _path(mod, case, dtype):
    return mod.rnn_forward_path("host", dtype, **case.model_kwargs())


@pytest.mark.parametrize("dtype", C.DTYPES)
def test_gemm_operands_are_16_bit_where_they_should_be(mod, dtype):
    # 16-bit storage multiplies 16-bit operands (tensor cores), except LSTMP and rnn_relu
    # (relu's derivative jumps at 0); float and double multiply themselves.
    for case in CASES:
        sixteen = dtype in ("half", "bfloat16")
        want = sixteen and not case.num_proj and case.mode != "rnn_relu"
        got = _path(mod, case, dtype)["gemm_operands"]
        assert got == ("storage" if want else "compute"), (case.name, dtype)
    assert any(c.mode == "rnn_relu" for c in CASES) and any(c.num_proj for c in CASES)


def _path_tol(dtype):
    return PATH_TOL.get("TOL_" + dtype, C.TOL[dtype])


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", PERSISTENT_CASES, ids=[c.name for c in PERSISTENT_CASES])
def test_persistent_forward_matches_per_step_and_reference(mod, alloc, rng, monkeypatch, case,
                                                           dtype):
    plan = _path(mod, case, dtype)
    assert plan["path"] == "persistent", plan
    assert plan["blocks"] == -(-case.num_units // plan["units_per_block"]) <= 3
    # forward (persistent) and backward against the float64 reference
    C.check_case(mod, alloc, case, dtype, rng)
    # the same inputs through both paths: outputs and every saved activation agree
    inp, _ = C.make_inputs(rng, case, dtype)
    persistent = C.run_forward(mod, alloc, case, dtype, inp)
    monkeypatch.setenv(PERSISTENT_ENV, "0")
    assert _path(mod, case, dtype)["path"] == "per_step"
    per_step = C.run_forward(mod, alloc, case, dtype, inp)
    monkeypatch.delenv(PERSISTENT_ENV)
    for k in ("output", "output_h") + (("output_c",) if case.mode == "lstm" else ()):
        C.assert_close(persistent[k], per_step[k], _path_tol(dtype), k)
    assert persistent["workspace"][:C.HEADER_BYTES].tobytes() == \
        per_step["workspace"][:C.HEADER_BYTES].tobytes()
    C.assert_close(C.workspace_values(case, dtype, persistent["workspace"]),
                   C.workspace_values(case, dtype, per_step["workspace"]),
                   1e-12 if dtype == "float64" else 1e-5, "workspace")
    # deterministic: the same bits again
    again = C.run_forward(mod, alloc, case, dtype, inp)
    assert np.array_equal(again["workspace"], persistent["workspace"])


FALLBACK_CASES = [
    (C.Case("lstm", 1, 5, 3, "bidirectional", num_proj=2, batch=4), "projection"),
    (C.Case("gru", 1, 5, 3, "unidirectional", time=2, batch=17), "batch above 16"),
    # 4 gates x 34 units x 101 x 4 bytes of R rows: over the emulated 48 KiB per block
    (C.Case("lstm", 1, 100, 3, "unidirectional", time=2, batch=2, lengths=(2, 1)),
     "shared memory"),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case,why", FALLBACK_CASES, ids=[w for _, w in FALLBACK_CASES])
def test_persistent_falls_back_to_per_step(mod, alloc, rng, case, why, dtype):
    assert _path(mod, case, dtype) == dict(path="per_step", blocks=0, units_per_block=0,
                                           shared_bytes=0, gemm_operands="compute"), why
    C.check_case(mod, alloc, case, dtype, rng)


def test_persistent_batch_threshold_and_switch(mod, monkeypatch):
    case = C.Case("rnn_relu", 1, 5, 3, "unidirectional", time=2, batch=16)
    assert _path(mod, case, "float32")["path"] == "persistent"
    assert _path(mod, dataclasses.replace(case, batch=17), "float32")["path"] == "per_step"
    monkeypatch.setenv(PERSISTENT_ENV, "0")
    assert _path(mod, case, "float32")["path"] == "per_step"
    monkeypatch.setenv(PERSISTENT_ENV, "1")  # anything but "0": automatic
    assert _path(mod, case, "float32")["path"] == "persistent"
    # shared memory per block: the R rows and h_prev, rows padded to H + 1 elements, then the
    # partial sums of each dot product (split over S threads of the 256)
    plan = _path(mod, case, "float64")
    units = plan["units_per_block"]
    outputs = 16 * 1 * units
    splits = max(s for s in (1, 2, 4, 8, 16, 32) if outputs * s <= 256)
    assert plan["shared_bytes"] == ((units + 16) * (5 + 1) + outputs * splits) * 8
    for k, case in enumerate(CASES):  # the grid above takes the persistent path unless projected
        want = "per_step" if case.num_proj else "persistent"
        assert _path(mod, case, C.DTYPES[k % len(C.DTYPES)])["path"] == want, case.name


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("mode,bias_rows", [("lstm", 1), ("gru", 2), ("gru", 1), ("rnn_relu", 1),
                                            ("rnn_tanh", 2)])
@pytest.mark.parametrize("I,H", [(3, 2), (0, 4), (37, 33)])
def test_keras_params_conversions(mod, alloc, rng, mode, bias_rows, I, H, dtype):
    C.check_keras_params(mod, alloc, mode, I, H, bias_rows, dtype, rng)
