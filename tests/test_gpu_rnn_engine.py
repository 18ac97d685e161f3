"""The CudnnRNN GPU engine (cc/gpu/cudnn_rnn_engine.h) without a GPU: the self-test module built
with nvcc (cc/gpu/selftest/build.py) runs the engine on its HostBackend (the same engine code, the
CUDA calls executed on the CPU) and cc/gpu/selftest/rnn_checks.py compares it with the float64
reference in every dtype, and with the CPU TensorFlow op, whose reserve-space format it shares."""

import zlib

import numpy as np
import pytest

import cudnn_reference as R

from cc.gpu.selftest import build  # noqa: E402  (pytest.ini puts the repo on sys.path)
from cc.gpu.selftest import rnn_checks as C  # noqa: E402

CASES = C.engine_cases()


@pytest.fixture(scope="module")
def mod():
    try:
        build.find_nvcc()
    except RuntimeError as e:  # the only reason to skip: without nvcc nothing can be built
        pytest.skip(str(e))
    return build.load(arch="80")


@pytest.fixture
def alloc():
    return C.NumpyAllocator()


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


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


@pytest.mark.parametrize("dtype", C.DTYPES)
def test_deterministic(mod, alloc, rng, dtype):
    case = C.Case("lstm", 2, 4, 3, "bidirectional", 2, time_major=False, lengths=C.VARLEN,
                  dropout=0.5, seed=11)
    C.check_deterministic(mod, alloc, case, dtype, rng)


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
# against the CPU TensorFlow op: same numbers, same reserve space
# ------------------------------------------------------------------------------------------------

TF_CASES = [
    C.Case("lstm", 2, 4, 3, "bidirectional", 2, time_major=False, lengths=C.VARLEN),
    C.Case("lstm", 1, 3, 2, "unidirectional"),
    C.Case("gru", 2, 4, 3, "bidirectional", lengths=C.VARLEN),
    C.Case("rnn_relu", 2, 4, 4, "unidirectional", skip_input=True, lengths=(3, 4, 1)),
    C.Case("rnn_tanh", 2, 3, 2, "bidirectional", time_major=False),
]


@pytest.fixture(scope="module")
def tf_ops():
    import tensorflow as tf
    import tf_lstm_ops

    tf_lstm_ops.load_library()
    return tf


def _tf_forward(case, inp, dtype):
    kw = R.tf_forward_inputs(case.cfg, inp, dtype, case.lengths, 3, case.time_major)
    out = R.get_op("plugin", "CudnnRNNV3")(**kw, **R.tf_attrs(case.cfg, 3, case.time_major),
                                           is_training=True)
    return out, kw


def _tf_backprop(tf, case, kw, fwd, cot, reserve, dtype):
    args = dict(kw, output=fwd.output, output_h=fwd.output_h, output_c=fwd.output_c,
                output_backprop=R.to_tf(cot["dy"], dtype),
                output_h_backprop=R.to_tf(cot["dh"], dtype),
                output_c_backprop=(R.to_tf(cot["dc"], dtype) if case.mode == "lstm"
                                   else tf.zeros([], R.tf_dtype(dtype))),
                reserve_space=reserve, host_reserved=fwd.host_reserved)
    return R.get_op("plugin", "CudnnRNNBackpropV3")(**args,
                                                    **R.tf_attrs(case.cfg, 3, case.time_major))


def _close(actual, expected, tol, name):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, name
    if actual.size:
        scale = max(1.0, float(np.max(np.abs(expected))))
        err = float(np.max(np.abs(actual - expected)))
        assert err <= tol * scale, "%s: max abs err %.3g" % (name, err)


@pytest.mark.parametrize("case", TF_CASES, ids=[c.name for c in TF_CASES])
def test_matches_cpu_op_float64_with_identical_reserve_space(mod, alloc, rng, tf_ops, case):
    tf, dtype, tol = tf_ops, "float64", 1e-12
    inp, cot = C.make_inputs(rng, case, dtype)
    ours = C.run_forward(mod, alloc, case, dtype, inp)
    theirs, kw = _tf_forward(case, inp, dtype)
    for k in ("output", "output_h") + (("output_c",) if case.mode == "lstm" else ()):
        _close(ours[k], getattr(theirs, k).numpy(), tol, k)
    # The reserve space: same size, same header, same saved activations.
    reserve = np.frombuffer(theirs.reserve_space.numpy().tobytes(), np.uint8)
    assert len(reserve) == len(ours["workspace"])
    assert reserve[:C.HEADER_BYTES].tobytes() == ours["workspace"][:C.HEADER_BYTES].tobytes()
    _close(C.workspace_values(case, dtype, ours["workspace"]),
           C.workspace_values(case, dtype, reserve), tol, "reserve space")

    ref_grads = _tf_backprop(tf, case, kw, theirs, cot, theirs.reserve_space, dtype)
    names = ("input_backprop", "input_h_backprop", "params_backprop") + (
        ("input_c_backprop",) if case.mode == "lstm" else ())
    # our backprop on our reserve space, and on TF's
    for ws in (ours["workspace_buffer"], alloc.upload(theirs.reserve_space.numpy(), dtype)):
        grads = C.run_backward(mod, alloc, case, dtype, inp, cot, ws)
        for k in names:
            _close(grads[k], getattr(ref_grads, k).numpy(), tol, k)
    # TF's backprop on our reserve space
    our_reserve = tf.constant(np.frombuffer(ours["workspace"].tobytes(), np.float64))
    cross = _tf_backprop(tf, case, kw, theirs, cot, our_reserve, dtype)
    for k in names:
        _close(getattr(cross, k).numpy(), getattr(ref_grads, k).numpy(), tol, k)


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
    _close(C.workspace_values(case, dtype, ours["workspace"]),
           C.workspace_values(case, dtype, reserve[:n]), tol, "reserve space")
