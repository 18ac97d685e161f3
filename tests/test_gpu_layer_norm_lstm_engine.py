"""The LayerNorm LSTM GPU engine (cc/layer_norm_lstm/gpu_engine.h) without a GPU: the self-test
module built with nvcc (tools/gpu_selftest/build.py) runs the engine on its HostBackend (the same
engine code, the CUDA calls executed on the CPU; every block of a row kernel runs its threads in
alternating order, so a race between them shows) and tools/gpu_selftest/layer_norm_lstm_checks.py
compares it with the float64 reference (tools/references/layer_norm_lstm.py) in every dtype. Here
also: its gradients against the CPU op's (TfLstm>LayerNormLSTMGrad in float64), the reserve space
against the CPU op's (the same size, header and values; each device's backward reads the other's),
and the scratch-size queries."""

import dataclasses

import numpy as np
import pytest

from tools.gpu_selftest import layer_norm_lstm_checks as C  # (pytest.ini: the repo on sys.path)
from tools.references import layer_norm_lstm as LN

CASES = C.engine_cases()
OPTION_NAMES = ("recurrent_mask",) + C.ZONEOUT_NAMES


@pytest.fixture
def engine(selftest_module):
    """(module, allocator): the engine on the host backend with NumPy buffers (conftest.py's
    session-wide self-test module: skips without nvcc)."""
    return selftest_module, C.NumpyAllocator()


@pytest.fixture
def mod(engine):
    return engine[0]


# ------------------------------------------------------------------------------------------------
# against the float64 reference (forward and backward), every dtype
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_engine_equals_the_reference(engine, rng, case, dtype):
    C.check_case(*engine, case, dtype, rng)


def test_cases_cover_the_grid():
    seen = {(c.norm, c.time_major, c.lengths is None, c.recurrent_mask,
             c.zoneout_h is not None or c.zoneout_c is not None) for c in CASES}
    for norm in ("addons", "paper"):
        for tm in (True, False):
            for full in (True, False):
                for option in ((False, False), (True, False), (False, True)):
                    assert (norm, tm, full) + option in seen
    scalar = [c for c in CASES if isinstance(c.zoneout_h, float) or isinstance(c.zoneout_c, float)]
    assert {c.norm for c in scalar} == {"addons", "paper"}
    assert any(c.zoneout_h == C.PER_ELEMENT and c.zoneout_c == C.PER_ELEMENT for c in CASES)
    assert all(0 in c.lengths and c.time in c.lengths for c in CASES
               if c.lengths is not None and c.batch > 2)
    # rows wider than a block has threads, up to the widest block (several sums per group)
    assert max(4 * c.num_units for c in CASES) > 256 * 4


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", C.empty_cases(), ids=[c.name for c in C.empty_cases()])
def test_empty_dimensions(engine, rng, case, dtype):
    C.check_empty(*engine, case, dtype, rng)


HEADER_CASES = [C.Case("addons", lengths=C.VARLEN, recurrent_mask=True, zoneout_h=C.PER_ELEMENT,
                       zoneout_c=0.9),
                C.Case("paper", False, lengths=C.VARLEN, zoneout_c=C.PER_ELEMENT)]


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_reserve_header_mismatch_gives_nan(engine, rng, case, dtype):
    C.check_header_mismatch(*engine, case, dtype, rng)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", HEADER_CASES, ids=[c.name for c in HEADER_CASES])
def test_deterministic(engine, rng, case, dtype):
    C.check_deterministic(*engine, case, dtype, rng)


# ------------------------------------------------------------------------------------------------
# the scratch-size queries
# ------------------------------------------------------------------------------------------------

def test_scratch_sizes(mod):
    """The host backend reserves no cuBLAS workspace, the CUDA one 32 MiB more (the carving is
    otherwise the same); sizes are 256-byte multiples and grow with the run and its options.
    (Every run of the tests checks that the engine stays inside the size: run_forward and
    run_backward's guard zone.)"""
    base = C.Case("addons", lengths=C.VARLEN)
    kw = base.model_kwargs()
    for dtype in C.DTYPES:
        for which in ("forward", "backward"):
            size = getattr(mod, "ln_%s_scratch_bytes" % which)
            host = size("host", dtype, **kw)
            assert host > 0 and host % 256 == 0
            assert size("cuda", dtype, **kw) - host == 32 << 20, (dtype, which)
            longer = dataclasses.replace(base, time=9, lengths=None).model_kwargs()
            assert size("host", dtype, **longer) > host, (dtype, which)
        fwd = mod.ln_forward_scratch_bytes
        # the mask makes each step's GEMM operand a copy (the backward masks as it reads)
        assert fwd("host", dtype, **kw, recurrent_mask=1) > fwd("host", dtype, **kw)
        # inference keeps its gates in scratch, training in the reserve space
        assert fwd("host", dtype, **dict(kw, training=False)) > fwd("host", dtype, **kw)
        # the backward's zoneout term of dL/dh_{t-1}
        bwd = mod.ln_backward_scratch_bytes
        assert bwd("host", dtype, **kw, zoneout_h=1, zoneout_h_per_element=False) > \
            bwd("host", dtype, **kw)


def test_workspace_bytes(mod):
    """Training keeps 15H + 3 values per (t, b) row after the header, inference the two states."""
    case = C.Case(time=5, batch=2, num_units=6)
    for dtype in C.DTYPES:
        acc = np.dtype(C.ACC[dtype]).itemsize
        rows, H = 10, 6
        assert mod.ln_workspace_bytes(dtype, **case.model_kwargs()) == \
            C.HEADER_BYTES + rows * (15 * H + 3) * acc
        assert mod.ln_workspace_bytes(dtype, **case.model_kwargs(training=False)) == \
            C.HEADER_BYTES + rows * 2 * H * acc


def test_bad_arguments_are_value_errors(mod):
    kw = C.Case().model_kwargs()
    for change, what in ((dict(norm="haste"), "norm"), (dict(epsilon=0.0), "epsilon"),
                         (dict(lengths=[1, 2]), "lengths"), (dict(lengths=[1, 2, 9]), "lengths"),
                         (dict(num_units=-1), "sizes")):
        with pytest.raises(ValueError, match=what):
            mod.ln_forward_scratch_bytes("host", "float32", **dict(kw, **change))
    with pytest.raises(ValueError, match="backend"):
        mod.ln_forward_scratch_bytes("tpu", "float32", **kw)


# ------------------------------------------------------------------------------------------------
# against the CPU op (TfLstm>LayerNormLSTM, LayerNormLSTMGrad)
# ------------------------------------------------------------------------------------------------

TF_CASES = [c for c in CASES if c.num_units <= 40]


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf
    import tf_lstm_ops

    tf_lstm_ops.load_library()
    return tf


def _op(name):
    from tf_lstm_ops._loader import library

    return library.op(name)


def _tf_dtype(tf, dtype):
    return {"half": tf.half, "bfloat16": tf.bfloat16, "float32": tf.float32,
            "float64": tf.float64}[dtype]


def _tf_bytes(tf, data, dtype):
    """Bytes (a reserve space) as a tensor of dtype's elements."""
    values = tf.constant(np.frombuffer(bytes(data), C.storage.STORAGE[dtype]))
    return tf.bitcast(values, tf.bfloat16) if dtype == "bfloat16" else values


def _tf_args(tf, case, inp, dtype):
    def t(v):  # (the values are dtype's already: the cast is exact)
        return tf.cast(tf.constant(np.asarray(v, np.float64)), _tf_dtype(tf, dtype))

    lengths = case.lengths if case.lengths is not None else [case.time] * case.batch
    args = {k: t(inp[k]) for k in C.INPUT_NAMES + LN.WEIGHTS}
    args.update({("%s_weights" % k if k != "recurrent_mask" else k):
                 t(inp[k] if k in inp else np.zeros([0])) for k in OPTION_NAMES})
    return dict(args, sequence_lengths=tf.constant(lengths, tf.int32), norm=case.norm,
                epsilon=case.epsilon, time_major=case.time_major)


def _tf_grads(tf, args, cot, reserve, dtype):
    def t(v):
        return tf.cast(tf.constant(np.asarray(v, np.float64)), args["input"].dtype)

    out = _op("LayerNormLSTMGrad")(**args, output_backprop=t(cot["dy"]),
                                   output_h_backprop=t(cot["dh"]),
                                   output_c_backprop=t(cot["dc"]), reserve_space=reserve)
    return {k: tf.cast(v, tf.float64).numpy() for k, v in zip(C.GRAD_NAMES, out)}


@pytest.mark.parametrize("case", TF_CASES, ids=[c.name for c in TF_CASES])
def test_reference_backward_equals_the_cpu_op(rng, tf, case):
    """The float64 reference's backward (what the self-test compares with on a GPU, without
    TensorFlow) against the fused LayerNormLSTMGrad."""
    inp, cot = C.make_inputs(rng, case, "float64")
    args = _tf_args(tf, case, inp, "float64")
    fwd = _op("LayerNormLSTM")(**args, is_training=True)
    theirs = _tf_grads(tf, args, cot, fwd[3], "float64")
    _, ours = C.reference(case, inp, cot)
    for k in C.GRAD_NAMES:
        C.assert_close(ours[k], theirs[k], 1e-12, k)


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", TF_CASES, ids=[c.name for c in TF_CASES])
def test_gradients_equal_the_cpu_ops(engine, rng, tf, case, dtype):
    """The engine's gradients in each dtype against the CPU op's float64 gradients of the same
    (rounded) inputs; float64 to 1e-12 (the two sum in different orders)."""
    mod, alloc = engine
    inp, cot = C.make_inputs(rng, case, dtype)
    args = _tf_args(tf, case, inp, "float64")
    fwd = _op("LayerNormLSTM")(**args, is_training=True)
    theirs = _tf_grads(tf, args, cot, fwd[3], "float64")
    ours = C.run_forward(mod, alloc, case, dtype, inp)
    grads = C.run_backward(mod, alloc, case, dtype, inp, cot, ours["workspace_buffer"])
    tol = 1e-12 if dtype == "float64" else C.TOL[dtype]
    for k in C.GRAD_NAMES:
        C.assert_close(grads[k], theirs[k], tol, k)


RESERVE_CASES = [c for c in TF_CASES if c.lengths is not None][:6]


@pytest.mark.parametrize("dtype", C.DTYPES)
@pytest.mark.parametrize("case", RESERVE_CASES, ids=[c.name for c in RESERVE_CASES])
def test_reserve_space_is_the_cpu_ops(engine, rng, tf, case, dtype):
    """The CPU OpKernel's reserve space and the engine's workspace: the same size (whole
    elements of T), the same header to the byte, the same values to the compute type's rounding
    (the same layout); the engine's backward on the CPU op's reserve space gives the CPU op's
    gradients, and the CPU op's backward on the engine's gives them too."""
    mod, alloc = engine
    inp, cot = C.make_inputs(rng, case, dtype)
    args = _tf_args(tf, case, inp, dtype)
    fwd = _op("LayerNormLSTM")(**args, is_training=True)
    reserve = np.frombuffer(fwd[3].numpy().tobytes(), np.uint8)
    ours = C.run_forward(mod, alloc, case, dtype, inp)
    n = len(ours["workspace"])
    size = np.dtype(C.storage.STORAGE[dtype]).itemsize
    assert len(reserve) == (n + size - 1) // size * size
    assert reserve[:C.HEADER_BYTES].tobytes() == ours["workspace"][:C.HEADER_BYTES].tobytes()
    tol = 1e-12 if dtype == "float64" else 1e-5
    C.assert_close(C.workspace_values(dtype, ours["workspace"]),
                   C.workspace_values(dtype, reserve[:n]), tol, "reserve space")

    theirs = _tf_grads(tf, args, cot, fwd[3], dtype)
    cpu_reserve = alloc.empty_bytes(len(reserve))
    alloc.write_bytes(cpu_reserve, 0, reserve.tobytes())
    across = C.run_backward(mod, alloc, case, dtype, inp, cot, cpu_reserve)
    ours_on_ours = C.run_backward(mod, alloc, case, dtype, inp, cot, ours["workspace_buffer"])
    padded = np.concatenate([ours["workspace"], np.zeros(len(reserve) - n, np.uint8)])
    back = _tf_grads(tf, args, cot, _tf_bytes(tf, padded, dtype), dtype)
    tol = 1e-12 if dtype == "float64" else C.TOL[dtype]
    for k in C.GRAD_NAMES:
        C.assert_close(across[k], ours_on_ours[k], tol, "engine on the CPU reserve: " + k)
        C.assert_close(back[k], theirs[k], tol, "CPU op on the engine's reserve: " + k)
