"""Checks of the LayerNorm GRU / SimpleRNN GPU engine (cc/layer_norm_rnn/gpu_engine.h) against the
float64 NumPy reference (tools/references/layer_norm_rnn.py: forward and backward),
framework-neutral: the same functions run

  - under pytest on machines without a GPU: backend "host", NumPy buffers (NumpyAllocator);
  - in the GPU self-test (gpu_selftest.py): backend "cuda", torch CUDA tensors (TorchAllocator),
    which calls the launchers of cc/layer_norm_rnn/gpu_launchers.h as the TensorFlow kernels do.

Conventions (allocators, rounding, tolerances, zoneout and mask inputs) are the LayerNorm LSTM's
(layer_norm_lstm_checks.py).

    alloc = NumpyAllocator()
    for case in engine_cases():
        for dtype in DTYPES:
            check_case(module, alloc, case, dtype, np.random.default_rng(0))
"""

import dataclasses

import numpy as np

from tools.references import layer_norm_rnn as LNR
from tools.gpu_selftest import layer_norm_lstm_checks as ln_checks
from tools.gpu_selftest import storage

DTYPES = storage.DTYPES
ACC = storage.ACC
HEADER_BYTES = ln_checks.HEADER_BYTES
NumpyAllocator = storage.NumpyAllocator
assert_close = ln_checks.assert_close
_rel_err = ln_checks.rnn_checks._rel_err
TOL = ln_checks.TOL
EPS = float(np.float32(1e-5))  # the layers' ε (haste's, Addons'), as the op's float attribute
PER_ELEMENT = ln_checks.PER_ELEMENT
ZONEOUT_RATE = ln_checks.ZONEOUT_RATE
MASK_RATE = ln_checks.MASK_RATE
VARLEN = ln_checks.VARLEN  # B = 3, T = 4: a full, an empty and a partial sequence
INPUT_NAMES = ("input", "input_h")
# the binding's five weights (a SimpleRNN has no gamma_h: address 0)
BINDING_WEIGHTS = LNR.weight_names("gru")
OPTION_NAMES = ("recurrent_mask", "zoneout_h")


def grad_names(cell):
    """The backward's results of a cell, in the op's output order (but a SimpleRNN's empty
    gamma_h)."""
    return INPUT_NAMES + LNR.weight_names(cell)


# ------------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    cell: str = "gru"
    time_major: bool = True
    time: int = 4
    batch: int = 3
    input_size: int = 3
    num_units: int = 4
    lengths: tuple = None  # per-example lengths in [0, time], or None (all time)
    recurrent_mask: bool = False  # [B, H] on h_{t-1} in the product
    zoneout_h: object = None  # None, PER_ELEMENT or one weight for every element
    activation: str = "tanh"
    recurrent_activation: str = "sigmoid"  # (the GRU's gates)

    @property
    def name(self):
        parts = [self.cell, "tm" if self.time_major else "bm",
                 "T%dB%dI%dH%d" % (self.time, self.batch, self.input_size, self.num_units)]
        if (self.activation, self.recurrent_activation) != ("tanh", "sigmoid"):
            parts.append(self.activation if self.cell == "simple_rnn"
                         else "%s-%s" % (self.activation, self.recurrent_activation))
        if self.lengths is not None:
            parts.append("len" + "-".join(map(str, self.lengths)))
        if self.recurrent_mask:
            parts.append("mask")
        if self.zoneout_h is not None:
            parts.append("zo-%s" % ("mask" if self.zoneout_h == PER_ELEMENT
                                    else "%g" % self.zoneout_h))
        return "_".join(parts)

    def model_kwargs(self, training=True):
        """The model and run fields every binding takes (without the mask and zoneout)."""
        return dict(input_size=self.input_size, num_units=self.num_units, cell=self.cell,
                    activation=self.activation, recurrent_activation=self.recurrent_activation,
                    epsilon=EPS, time=self.time, batch=self.batch, time_major=self.time_major,
                    lengths=None if self.lengths is None else list(self.lengths),
                    training=training)

    def sequence_shape(self, width):
        return ((self.time, self.batch, width) if self.time_major
                else (self.batch, self.time, width))


def engine_cases():
    """Both cells x layout, each full and with varied lengths (0 and T among them), the recurrent
    mask and zoneout (per element, one weight); other activations; rows wider than a block's
    threads (the GRU's 3H > 1024: several elements per thread, every group of sums full)."""
    cases = []
    for cell in LNR.CELLS:
        for time_major in (True, False):
            cases.append(Case(cell, time_major))
            cases.append(Case(cell, time_major, lengths=VARLEN, recurrent_mask=True,
                              zoneout_h=PER_ELEMENT if time_major else 0.7))
    cases.append(Case("simple_rnn", True, lengths=VARLEN, activation="relu"))
    cases.append(Case("gru", False, lengths=VARLEN, zoneout_h=PER_ELEMENT, activation="softsign",
                      recurrent_activation="hard_sigmoid"))
    cases.append(Case("simple_rnn", False, time=3, batch=2, input_size=5, num_units=150,
                      lengths=(3, 1), recurrent_mask=True, zoneout_h=0.5))
    cases.append(Case("gru", True, time=2, batch=2, input_size=3, num_units=350, lengths=(2, 1),
                      recurrent_mask=True))
    return cases


def header_cases():
    """For the reserve-header mismatches and the bitwise repeats: each cell with its options."""
    return [Case("gru", lengths=VARLEN, recurrent_mask=True, zoneout_h=PER_ELEMENT),
            Case("simple_rnn", False, lengths=VARLEN, zoneout_h=0.9)]


def empty_cases():
    """No steps, no rows, no units, no inputs (the last one runs)."""
    return [Case(time=0, lengths=(0, 0, 0)), Case("simple_rnn", False, batch=0),
            Case(num_units=0, lengths=VARLEN, recurrent_mask=True, zoneout_h=PER_ELEMENT),
            Case("simple_rnn", False, input_size=0, lengths=VARLEN)]


# ------------------------------------------------------------------------------------------------
# running the engine
# ------------------------------------------------------------------------------------------------

def make_inputs(rng, case, dtype):
    """Random inputs (the op's names; the weights under LNR.weight_names(cell), the mask under
    "recurrent_mask", zoneout's weights under "zoneout_h") and cotangents dy, dh, rounded to
    dtype."""
    B, H, I = case.batch, case.num_units, case.input_size
    inp = dict(input=rng.uniform(-1, 1, case.sequence_shape(I)),
               input_h=rng.uniform(-1, 1, (B, H)))
    inp.update(LNR.random_weights(rng, case.cell, I, H))
    if case.recurrent_mask:
        inp["recurrent_mask"] = np.where(rng.uniform(size=(B, H)) < MASK_RATE, 0.0,
                                         1.0 / (1.0 - MASK_RATE))
    if case.zoneout_h is not None:
        inp["zoneout_h"] = (
            np.float64(case.zoneout_h) if case.zoneout_h != PER_ELEMENT else
            (rng.uniform(size=case.sequence_shape(H)) >= ZONEOUT_RATE).astype(np.float64))
    cot = dict(dy=rng.uniform(-1, 1, case.sequence_shape(H)), dh=rng.uniform(-1, 1, (B, H)))
    return storage.rounded(inp, dtype), storage.rounded(cot, dtype)


def run_options(alloc, case, inp, dtype):
    """The case's mask and zoneout weights as buffers (keep them while the engine may read them)
    and the binding arguments pointing at them (0: none)."""
    buffers = {k: alloc.upload(inp[k], dtype) if k in inp else None for k in OPTION_NAMES}
    args = {k: alloc.ptr(b) for k, b in buffers.items()}
    if "zoneout_h" in inp:
        args["zoneout_h_per_element"] = case.zoneout_h == PER_ELEMENT
    return buffers, args


def _check_scratch(alloc, scratch, what):
    assert alloc.scratch_intact(scratch), "%s wrote past its scratch block" % what


def _weights(alloc, inp, dtype):
    """The weights' buffers in the binding's order (None: a SimpleRNN's gamma_h)."""
    return [alloc.upload(inp[k], dtype) if k in inp else None for k in BINDING_WEIGHTS]


def run_forward(module, alloc, case, dtype, inp, training=True):
    """Runs the forward; returns the outputs (float64), the workspace buffer and its bytes."""
    buffers, args = run_options(alloc, case, inp, dtype)  # (alive through the call)
    kw = dict(case.model_kwargs(training), **args)
    up, ptr = alloc.upload, alloc.ptr
    ins = [up(inp[k], dtype) for k in INPUT_NAMES]
    weights = _weights(alloc, inp, dtype)
    H = case.num_units
    out = alloc.empty(case.sequence_shape(H), dtype)
    out_h = alloc.empty((case.batch, H), dtype)
    ws = alloc.empty_bytes(module.lnr_workspace_bytes(dtype, **kw))
    scratch = alloc.scratch(module.lnr_forward_scratch_bytes(alloc.backend, dtype, **kw))
    module.lnr_forward(alloc.backend, dtype, alloc.stream, **kw, input=ptr(ins[0]),
                       input_h=ptr(ins[1]), weights=[ptr(w) for w in weights], output=ptr(out),
                       output_h=ptr(out_h), workspace=ptr(ws), scratch=ptr(scratch))
    alloc.synchronize()
    _check_scratch(alloc, scratch, "lnr_forward")
    return dict(output=alloc.download(out, dtype), output_h=alloc.download(out_h, dtype),
                workspace_buffer=ws, workspace=alloc.download_bytes(ws), options=args)


def run_backward(module, alloc, case, dtype, inp, cot, reserve_buffer):
    """Runs the backward on a training forward's reserve space; returns the gradients (float64)
    under grad_names(case.cell)."""
    buffers, args = run_options(alloc, case, inp, dtype)  # (alive through the call)
    kw = dict(case.model_kwargs(), **args)
    up, ptr = alloc.upload, alloc.ptr
    ins = [up(inp[k], dtype) for k in INPUT_NAMES]
    weights = _weights(alloc, inp, dtype)
    cots = [up(cot[k], dtype) for k in ("dy", "dh")]
    grads = {k: alloc.empty(np.shape(inp[k]), dtype) for k in grad_names(case.cell)}
    scratch = alloc.scratch(module.lnr_backward_scratch_bytes(alloc.backend, dtype, **kw))
    module.lnr_backward(alloc.backend, dtype, alloc.stream, **kw, input=ptr(ins[0]),
                        input_h=ptr(ins[1]), weights=[ptr(w) for w in weights],
                        output_backprop=ptr(cots[0]), output_h_backprop=ptr(cots[1]),
                        reserve=ptr(reserve_buffer), input_backprop=ptr(grads["input"]),
                        input_h_backprop=ptr(grads["input_h"]),
                        weight_grads=[ptr(grads.get(k)) for k in BINDING_WEIGHTS],
                        scratch=ptr(scratch))
    alloc.synchronize()
    _check_scratch(alloc, scratch, "lnr_backward")
    return {k: alloc.download(v, dtype) for k, v in grads.items()}


workspace_values = ln_checks.workspace_values


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------

def reference(case, inp, cot):
    """The float64 reference's forward and backward of the (rounded) inputs."""
    args = (case.cell, inp["input"], inp["input_h"],
            {k: inp[k] for k in LNR.weight_names(case.cell)})
    kw = dict(lengths=None if case.lengths is None else list(case.lengths), epsilon=EPS,
              time_major=case.time_major, recurrent_mask=inp.get("recurrent_mask"),
              zoneout_h=inp.get("zoneout_h"), activation=case.activation,
              recurrent_activation=case.recurrent_activation)
    return LNR.forward(*args, **kw), LNR.backward(*args, cot["dy"], cot["dh"], **kw)


def check_case(module, alloc, case, dtype, rng):
    """Forward (training and inference) and backward of one case against the reference; the
    workspace's header and size, every value it keeps written. Returns the max relative errors
    (for reports)."""
    tol = TOL[dtype]
    inp, cot = make_inputs(rng, case, dtype)
    ref_f, ref_b = reference(case, inp, cot)
    errors = {}
    for training in (True, False):
        fwd = run_forward(module, alloc, case, dtype, inp, training)
        kw = dict(case.model_kwargs(training), **fwd["options"])
        assert len(fwd["workspace"]) == module.lnr_workspace_bytes(dtype, **kw)
        assert fwd["workspace"][:HEADER_BYTES].tobytes() == module.lnr_reserve_header(
            dtype, **kw), "workspace header"
        # Every value kept is written (buffers start as NaN bytes), as the CPU engine writes them.
        assert np.all(np.isfinite(workspace_values(dtype, fwd["workspace"]))), "workspace gaps"
        for k in ("output", "output_h"):
            assert_close(fwd[k], ref_f[k], tol, "%s (training=%s)" % (k, training))
            errors[k] = max(errors.get(k, 0.0), _rel_err(fwd[k], ref_f[k]))
        if case.lengths is not None:
            assert ln_checks._padded_zero(fwd["output"], case), "padded output"
        if training:
            reserve = fwd["workspace_buffer"]
    bwd = run_backward(module, alloc, case, dtype, inp, cot, reserve)
    for k in grad_names(case.cell):
        assert_close(bwd[k], ref_b[k], tol, k)
        errors[k] = _rel_err(bwd[k], ref_b[k])
    if case.lengths is not None:
        assert ln_checks._padded_zero(bwd["input"], case), "padded dx"
    return errors


def check_empty(module, alloc, case, dtype, rng):
    """No steps, rows or units: the final state is the initial state, its gradient passes
    through, every other gradient is zero, the workspace holds its header. No inputs (I = 0) runs
    as usual."""
    inp, cot = make_inputs(rng, case, dtype)
    fwd = run_forward(module, alloc, case, dtype, inp)
    kw = dict(case.model_kwargs(), **fwd["options"])
    bwd = run_backward(module, alloc, case, dtype, inp, cot, fwd["workspace_buffer"])
    if case.input_size == 0:
        ref_f, ref_b = reference(case, inp, cot)
        for k in ("output", "output_h"):
            assert_close(fwd[k], ref_f[k], TOL[dtype], k)
        for k in grad_names(case.cell):
            assert_close(bwd[k], ref_b[k], TOL[dtype], k)
        return
    # (the header; with no units the rows' r slots follow it, unwritten as on the CPU)
    assert fwd["workspace"][:HEADER_BYTES].tobytes() == module.lnr_reserve_header(dtype, **kw)
    assert len(fwd["workspace"]) == module.lnr_workspace_bytes(dtype, **kw)
    assert fwd["output"].shape == case.sequence_shape(case.num_units)
    np.testing.assert_array_equal(fwd["output_h"], inp["input_h"])
    np.testing.assert_array_equal(bwd["input_h"], cot["dh"])
    for k in ("input",) + LNR.weight_names(case.cell):
        assert bwd[k].shape == np.shape(inp[k]) and np.all(bwd[k] == 0.0), k


def check_header_mismatch(module, alloc, case, dtype, rng):
    """A backward on a reserve space whose header is not the expected one: every output NaN (the
    engine cannot tell the host without a synchronisation); the intact header: finite. Then
    reserve spaces of other configurations of the same size: NaN too."""
    inp, cot = make_inputs(rng, case, dtype)
    fwd = run_forward(module, alloc, case, dtype, inp)
    ws = fwd["workspace_buffer"]
    good = fwd["workspace"][:HEADER_BYTES].tobytes()

    def all_nan(bwd):
        return all(v.size == 0 or np.all(np.isnan(v)) for v in bwd.values())

    for offset in (0, 8, 16, 24):  # magic, config hash, bytes, the (unused) dropout flag
        bad = bytearray(good)
        bad[offset] ^= 0x01
        alloc.write_bytes(ws, 0, bytes(bad))
        assert all_nan(run_backward(module, alloc, case, dtype, inp, cot, ws)), offset
    alloc.write_bytes(ws, 0, good)
    bwd = run_backward(module, alloc, case, dtype, inp, cot, ws)
    assert all(np.all(np.isfinite(v)) for v in bwd.values())
    others = [dataclasses.replace(case, activation="softsign")]
    if case.lengths is not None:
        others.append(dataclasses.replace(case, lengths=tuple(case.time for _ in case.lengths)))
    if case.recurrent_mask:
        others.append(dataclasses.replace(case, recurrent_mask=False))
    if case.zoneout_h is not None:
        others.append(dataclasses.replace(case, zoneout_h=None))
    if case.zoneout_h == PER_ELEMENT:
        others.append(dataclasses.replace(case, zoneout_h=0.5))
    for other in others:
        other_inp = {k: v for k, v in inp.items() if k not in OPTION_NAMES}
        other_inp.update({k: v for k, v in make_inputs(rng, other, dtype)[0].items()
                          if k in OPTION_NAMES})
        assert all_nan(run_backward(module, alloc, other, dtype, other_inp, cot, ws)), other.name


def check_deterministic(module, alloc, case, dtype, rng):
    """The same inputs give the same bits, forward (workspace included) and backward."""
    inp, cot = make_inputs(rng, case, dtype)
    runs = []
    for _ in range(2):
        fwd = run_forward(module, alloc, case, dtype, inp)
        runs.append((fwd, run_backward(module, alloc, case, dtype, inp, cot,
                                       fwd["workspace_buffer"])))
    (f1, b1), (f2, b2) = runs
    assert np.array_equal(f1["workspace"], f2["workspace"])
    for k in ("output", "output_h"):
        assert np.array_equal(f1[k], f2[k], equal_nan=True), k
    for k in b1:
        assert np.array_equal(b1[k], b2[k], equal_nan=True), k
