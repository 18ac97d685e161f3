"""Checks of the LayerNorm LSTM GPU engine (cc/layer_norm_lstm/gpu_engine.h) against the float64
NumPy reference (tools/references/layer_norm_lstm.py: forward and backward), framework-neutral:
the same functions run

  - under pytest on machines without a GPU: backend "host", NumPy buffers (NumpyAllocator);
  - in the GPU self-test (gpu_selftest.py): backend "cuda", torch CUDA tensors (TorchAllocator),
    which calls the launchers of cc/layer_norm_lstm/gpu_launchers.h as the TensorFlow kernels do.

The allocators and storage conversions are storage.py's; inputs are generated in float64, rounded
once to the dtype, and the reference sees the rounded values (cudnn_rnn_checks.py's conventions).

    alloc = NumpyAllocator()
    for case in engine_cases():
        for dtype in DTYPES:
            check_case(module, alloc, case, dtype, np.random.default_rng(0))
"""

import dataclasses

import numpy as np

from tools.references import layer_norm_lstm as LN
from tools.gpu_selftest import cudnn_rnn_checks as rnn_checks
from tools.gpu_selftest import storage

DTYPES = storage.DTYPES
ACC = storage.ACC
HEADER_BYTES = rnn_checks.HEADER_BYTES
NumpyAllocator = storage.NumpyAllocator
assert_close = rnn_checks.assert_close
# vs the float64 reference, relative to max(1, max|expected|): the CudnnRNN engines' tolerances
# (tools/references/cudnn_rnn.py's TOL), but float32's wider: a norm multiplies its row's
# rounding errors by r = 1/σ, up to 1/sqrt(ε) (300 for the paper's ε on a flat row of c'); the
# 16-bit types' own rounding of the inputs and outputs dominates theirs
TOL = {"float64": 1e-10, "float32": 1e-4, "half": 5e-3, "bfloat16": 2e-2}
# ε of each preset's layers (docs/layer_norm_lstm.md §1), as the op's float attribute holds it
EPS = {"addons": float(np.float32(1e-3)), "paper": float(np.float32(1e-5))}
PER_ELEMENT = rnn_checks.PER_ELEMENT  # zoneout weights per element: 0/1 keep-new masks
ZONEOUT_NAMES = rnn_checks.ZONEOUT_NAMES
ZONEOUT_RATE = rnn_checks.ZONEOUT_RATE
MASK_RATE = 0.3  # TF Addons' recurrent dropout: 0 with this probability, else 1 / (1 - rate)
VARLEN = (4, 0, 2)  # B = 3, T = 4: a full, an empty and a partial sequence
INPUT_NAMES = ("input", "input_h", "input_c")
GRAD_NAMES = INPUT_NAMES + LN.WEIGHTS  # the backward's results, in the op's output order


# ------------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    norm: str = "addons"
    time_major: bool = True
    time: int = 4
    batch: int = 3
    input_size: int = 3
    num_units: int = 4
    lengths: tuple = None  # per-example lengths in [0, time], or None (all time)
    recurrent_mask: bool = False  # TF Addons' recurrent dropout mask [B, H]
    # zoneout (docs/cudnn_rnn.md §4.9): None, PER_ELEMENT or one weight for every element
    zoneout_h: object = None
    zoneout_c: object = None

    @property
    def epsilon(self):
        return EPS[self.norm]

    @property
    def name(self):
        parts = [self.norm, "tm" if self.time_major else "bm",
                 "T%dB%dI%dH%d" % (self.time, self.batch, self.input_size, self.num_units)]
        if self.lengths is not None:
            parts.append("len" + "-".join(map(str, self.lengths)))
        if self.recurrent_mask:
            parts.append("mask")
        for k in ZONEOUT_NAMES:
            w = getattr(self, k)
            if w is not None:
                parts.append("zo%s-%s" % (k[-1], "mask" if w == PER_ELEMENT else "%g" % w))
        return "_".join(parts)

    def model_kwargs(self, training=True):
        """The model and run fields every binding takes (without the mask and zoneout)."""
        return dict(input_size=self.input_size, num_units=self.num_units, norm=self.norm,
                    epsilon=self.epsilon, time=self.time, batch=self.batch,
                    time_major=self.time_major,
                    lengths=None if self.lengths is None else list(self.lengths),
                    training=training)

    def sequence_shape(self, width):
        return ((self.time, self.batch, width) if self.time_major
                else (self.batch, self.time, width))


def engine_cases():
    """Both presets x layout x lengths (None, varied with 0 and T), each alone and with the
    recurrent mask and zoneout (per element, one weight, mixed)."""
    cases = []
    for norm in ("addons", "paper"):
        for time_major in (True, False):
            for lengths in (None, VARLEN):
                cases.append(Case(norm, time_major, lengths=lengths))
                cases.append(Case(norm, time_major, lengths=lengths, recurrent_mask=True))
                cases.append(Case(norm, time_major, lengths=lengths, zoneout_h=PER_ELEMENT,
                                  zoneout_c=PER_ELEMENT))
            cases.append(Case(norm, time_major, lengths=VARLEN, recurrent_mask=True,
                              zoneout_h=0.7, zoneout_c=0.9))
            cases.append(Case(norm, time_major, lengths=VARLEN, recurrent_mask=True,
                              zoneout_h=PER_ELEMENT if time_major else 0.8,
                              zoneout_c=None if time_major else PER_ELEMENT))
    # rows wider than a block has threads (several elements per thread; the last, the widest
    # block: every group of sums full), odd sizes
    cases.append(Case("addons", False, time=3, batch=2, input_size=5, num_units=40,
                      lengths=(3, 1), recurrent_mask=True, zoneout_h=PER_ELEMENT))
    cases.append(Case("paper", True, time=2, batch=2, input_size=1, num_units=70, lengths=(0, 2),
                      zoneout_c=0.5))
    cases.append(Case("addons", True, time=2, batch=2, input_size=3, num_units=300,
                      recurrent_mask=True))
    return cases


def empty_cases():
    """No steps, no rows, no units, no inputs (the last one runs)."""
    return [Case(time=0, lengths=(0, 0, 0)), Case("paper", False, batch=0),
            Case(num_units=0, lengths=VARLEN, recurrent_mask=True, zoneout_h=PER_ELEMENT),
            Case("paper", False, input_size=0, lengths=VARLEN)]


# ------------------------------------------------------------------------------------------------
# running the engine
# ------------------------------------------------------------------------------------------------

def make_inputs(rng, case, dtype):
    """Random inputs (the op's names; the weights under LN.WEIGHTS, the mask under
    "recurrent_mask", zoneout's weights under ZONEOUT_NAMES) and cotangents dy, dh, dc, rounded
    to dtype."""
    B, H, I = case.batch, case.num_units, case.input_size
    inp = dict(input=rng.uniform(-1, 1, case.sequence_shape(I)),
               input_h=rng.uniform(-1, 1, (B, H)), input_c=rng.uniform(-1, 1, (B, H)))
    inp.update(LN.random_weights(rng, I, H))
    if case.recurrent_mask:
        inp["recurrent_mask"] = np.where(rng.uniform(size=(B, H)) < MASK_RATE, 0.0,
                                         1.0 / (1.0 - MASK_RATE))
    for k in ZONEOUT_NAMES:
        w = getattr(case, k)
        if w is not None:
            inp[k] = (np.float64(w) if w != PER_ELEMENT else
                      (rng.uniform(size=case.sequence_shape(H)) >= ZONEOUT_RATE).astype(np.float64))
    cot = dict(dy=rng.uniform(-1, 1, case.sequence_shape(H)), dh=rng.uniform(-1, 1, (B, H)),
               dc=rng.uniform(-1, 1, (B, H)))
    return storage.rounded(inp, dtype), storage.rounded(cot, dtype)


def run_options(alloc, case, inp, dtype):
    """The case's mask and zoneout weights as buffers (keep them while the engine may read them)
    and the binding arguments pointing at them (0: none)."""
    names = ("recurrent_mask",) + ZONEOUT_NAMES
    buffers = {k: alloc.upload(inp[k], dtype) if k in inp else None for k in names}
    args = {k: alloc.ptr(b) for k, b in buffers.items()}
    args.update({k + "_per_element": getattr(case, k) == PER_ELEMENT for k in ZONEOUT_NAMES
                 if k in inp})
    return buffers, args


def _check_scratch(alloc, scratch, what):
    assert alloc.scratch_intact(scratch), "%s wrote past its scratch block" % what


def run_forward(module, alloc, case, dtype, inp, training=True):
    """Runs the forward; returns the outputs (float64), the workspace buffer and its bytes."""
    buffers, args = run_options(alloc, case, inp, dtype)  # (alive through the call)
    kw = dict(case.model_kwargs(training), **args)
    up, ptr = alloc.upload, alloc.ptr
    ins = [up(inp[k], dtype) for k in INPUT_NAMES]
    weights = [up(inp[k], dtype) for k in LN.WEIGHTS]
    H = case.num_units
    out = alloc.empty(case.sequence_shape(H), dtype)
    out_h = alloc.empty((case.batch, H), dtype)
    out_c = alloc.empty((case.batch, H), dtype)
    ws = alloc.empty_bytes(module.ln_workspace_bytes(dtype, **kw))
    scratch = alloc.scratch(module.ln_forward_scratch_bytes(alloc.backend, dtype, **kw))
    module.ln_forward(alloc.backend, dtype, alloc.stream, **kw, input=ptr(ins[0]),
                      input_h=ptr(ins[1]), input_c=ptr(ins[2]),
                      weights=[ptr(w) for w in weights], output=ptr(out), output_h=ptr(out_h),
                      output_c=ptr(out_c), workspace=ptr(ws), scratch=ptr(scratch))
    alloc.synchronize()
    _check_scratch(alloc, scratch, "ln_forward")
    return dict(output=alloc.download(out, dtype), output_h=alloc.download(out_h, dtype),
                output_c=alloc.download(out_c, dtype), workspace_buffer=ws,
                workspace=alloc.download_bytes(ws), options=args)


def run_backward(module, alloc, case, dtype, inp, cot, reserve_buffer):
    """Runs the backward on a training forward's reserve space; returns the gradients (float64)
    under GRAD_NAMES."""
    buffers, args = run_options(alloc, case, inp, dtype)  # (alive through the call)
    kw = dict(case.model_kwargs(), **args)
    up, ptr = alloc.upload, alloc.ptr
    ins = [up(inp[k], dtype) for k in INPUT_NAMES]
    weights = [up(inp[k], dtype) for k in LN.WEIGHTS]
    cots = [up(cot[k], dtype) for k in ("dy", "dh", "dc")]
    grads = {k: alloc.empty(np.shape(inp[k]), dtype) for k in GRAD_NAMES}
    scratch = alloc.scratch(module.ln_backward_scratch_bytes(alloc.backend, dtype, **kw))
    module.ln_backward(alloc.backend, dtype, alloc.stream, **kw, input=ptr(ins[0]),
                       input_h=ptr(ins[1]), input_c=ptr(ins[2]),
                       weights=[ptr(w) for w in weights], output_backprop=ptr(cots[0]),
                       output_h_backprop=ptr(cots[1]), output_c_backprop=ptr(cots[2]),
                       reserve=ptr(reserve_buffer), input_backprop=ptr(grads["input"]),
                       input_h_backprop=ptr(grads["input_h"]),
                       input_c_backprop=ptr(grads["input_c"]),
                       weight_grads=[ptr(grads[k]) for k in LN.WEIGHTS], scratch=ptr(scratch))
    alloc.synchronize()
    _check_scratch(alloc, scratch, "ln_backward")
    return {k: alloc.download(v, dtype) for k, v in grads.items()}


def workspace_values(dtype, workspace):
    """The workspace after its header, as the compute type."""
    return np.frombuffer(np.asarray(workspace, np.uint8)[HEADER_BYTES:].tobytes(), ACC[dtype])


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------

def reference(case, inp, cot):
    """The float64 reference's forward and backward of the (rounded) inputs."""
    args = (inp["input"], inp["input_h"], inp["input_c"], {k: inp[k] for k in LN.WEIGHTS})
    kw = dict(lengths=None if case.lengths is None else list(case.lengths), norm=case.norm,
              epsilon=case.epsilon, time_major=case.time_major,
              recurrent_mask=inp.get("recurrent_mask"), zoneout_h=inp.get("zoneout_h"),
              zoneout_c=inp.get("zoneout_c"))
    return (LN.forward(*args, **kw),
            LN.backward(*args, cot["dy"], cot["dh"], cot["dc"], **kw))


def _padded_zero(a, case):
    a = a if case.time_major else a.transpose(1, 0, 2)
    return all(np.all(a[n:, b] == 0.0) for b, n in enumerate(case.lengths))


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
        assert len(fwd["workspace"]) == module.ln_workspace_bytes(dtype, **kw)
        assert fwd["workspace"][:HEADER_BYTES].tobytes() == module.ln_reserve_header(
            dtype, **kw), "workspace header"
        # Every value kept is written (buffers start as NaN bytes), as the CPU engine writes them.
        assert np.all(np.isfinite(workspace_values(dtype, fwd["workspace"]))), "workspace gaps"
        for k in ("output", "output_h", "output_c"):
            assert_close(fwd[k], ref_f[k], tol, "%s (training=%s)" % (k, training))
            errors[k] = max(errors.get(k, 0.0), rnn_checks._rel_err(fwd[k], ref_f[k]))
        if case.lengths is not None:
            assert _padded_zero(fwd["output"], case), "padded output"
        if training:
            reserve = fwd["workspace_buffer"]
    bwd = run_backward(module, alloc, case, dtype, inp, cot, reserve)
    for k in GRAD_NAMES:
        assert_close(bwd[k], ref_b[k], tol, k)
        errors[k] = rnn_checks._rel_err(bwd[k], ref_b[k])
    if case.lengths is not None:
        assert _padded_zero(bwd["input"], case), "padded dx"
    return errors


def check_empty(module, alloc, case, dtype, rng):
    """No steps, rows or units: the final state is the initial state, the state gradients pass
    through, every other gradient is zero, the workspace holds its header. No inputs (I = 0) runs
    as usual."""
    inp, cot = make_inputs(rng, case, dtype)
    fwd = run_forward(module, alloc, case, dtype, inp)
    kw = dict(case.model_kwargs(), **fwd["options"])
    bwd = run_backward(module, alloc, case, dtype, inp, cot, fwd["workspace_buffer"])
    if case.input_size == 0:
        ref_f, ref_b = reference(case, inp, cot)
        for k in ("output", "output_h", "output_c"):
            assert_close(fwd[k], ref_f[k], TOL[dtype], k)
        for k in GRAD_NAMES:
            assert_close(bwd[k], ref_b[k], TOL[dtype], k)
        return
    # (the header; with no units the rows' r slots follow it, unwritten as on the CPU)
    assert fwd["workspace"][:HEADER_BYTES].tobytes() == module.ln_reserve_header(dtype, **kw)
    assert len(fwd["workspace"]) == module.ln_workspace_bytes(dtype, **kw)
    assert fwd["output"].shape == case.sequence_shape(case.num_units)
    np.testing.assert_array_equal(fwd["output_h"], inp["input_h"])
    np.testing.assert_array_equal(fwd["output_c"], inp["input_c"])
    np.testing.assert_array_equal(bwd["input_h"], cot["dh"])
    np.testing.assert_array_equal(bwd["input_c"], cot["dc"])
    for k in ("input",) + LN.WEIGHTS:
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
    others = [dataclasses.replace(case, norm="paper" if case.norm == "addons" else "addons")]
    if case.lengths is not None:
        others.append(dataclasses.replace(case, lengths=tuple(case.time for _ in case.lengths)))
    if case.recurrent_mask:
        others.append(dataclasses.replace(case, recurrent_mask=False))
    for k in ZONEOUT_NAMES:
        if getattr(case, k) is not None:
            others.append(dataclasses.replace(case, **{k: None}))
        if getattr(case, k) == PER_ELEMENT:
            others.append(dataclasses.replace(case, **{k: 0.5}))
    for other in others:
        other_inp = dict(inp)
        for k in ("recurrent_mask",) + ZONEOUT_NAMES:  # (the other case's options)
            other_inp.pop(k, None)
        other_inp.update({k: v for k, v in make_inputs(rng, other, dtype)[0].items()
                          if k in ("recurrent_mask",) + ZONEOUT_NAMES})
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
    for k in ("output", "output_h", "output_c"):
        assert np.array_equal(f1[k], f2[k], equal_nan=True), k
    for k in b1:
        assert np.array_equal(b1[k], b2[k], equal_nan=True), k

