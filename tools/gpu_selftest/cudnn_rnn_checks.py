"""Checks of the CudnnRNN GPU engine (cc/cudnn_rnn/gpu_engine.h) against the float64 NumPy
reference (tools/references/cudnn_rnn.py), framework-neutral: the same functions run

  - under pytest on machines without a GPU: backend "host", NumPy buffers (NumpyAllocator);
  - in the GPU self-test (gpu_selftest.py): backend "cuda", torch CUDA tensors (TorchAllocator),
    which calls the launchers of cc/cudnn_rnn/gpu_launchers.h exactly as the TensorFlow kernels do.

The allocators and storage conversions are storage.py's.

`module` is the built self-test module (tools/gpu_selftest/build.py's load()). Storage dtypes are
"half", "bfloat16" (held as uint16 bit patterns, rounded to nearest even), "float32" and
"float64"; inputs are generated in float64, rounded once to the dtype, and the reference sees the
rounded values, so a comparison measures only the engine's own arithmetic.

    alloc = NumpyAllocator()
    for case in engine_cases():
        for dtype in DTYPES:
            check_case(module, alloc, case, dtype, np.random.default_rng(0))
"""

import dataclasses

import numpy as np

from tools.references import cudnn_rnn as R
from tools.gpu_selftest import storage

DTYPES = storage.DTYPES
# vs the float64 reference, relative to max(1, max|expected|): the CPU kernels' tolerances
TOL = dict(R.TOL)
STORAGE = storage.STORAGE
ACC = storage.ACC
HEADER_BYTES = 64


# ------------------------------------------------------------------------------------------------
# storage types and allocators (where the engine's buffers live): storage.py, shared with
# block_lstm_checks.py
# ------------------------------------------------------------------------------------------------

rounded = storage.rounded
NumpyAllocator = storage.NumpyAllocator    # backend "host"


# ------------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    mode: str = "lstm"
    num_layers: int = 1
    num_units: int = 4
    input_size: int = 3
    direction: str = "unidirectional"
    num_proj: int = 0
    skip_input: bool = False
    time_major: bool = True
    time: int = 4
    batch: int = 3
    lengths: tuple = None  # per-example lengths in [0, time], or None (all time)
    dropout: float = 0.0   # between layers, training; use binary fractions (0.25, 0.5)
    seed: int = 0
    call: int = 0
    activation: str = ""            # Keras' activations (docs/cudnn_rnn.md §4.7); "": cuDNN's
    recurrent_activation: str = ""
    # Keras' recurrent dropout (RnnRun's operand masks; one layer, one direction): whether the
    # run has per-gate masks on x and/or h_prev (values: random_masks)
    input_masks: bool = False
    recurrent_masks: bool = False
    # gru only: False is the GRU resetting before (Keras' GRU(reset_after=False);
    # docs/cudnn_rnn.md §4.8)
    reset_after: bool = True
    # zoneout (docs/cudnn_rnn.md §4.9; one layer, one direction; zoneout_c for lstm only): None
    # (not zoned), PER_ELEMENT (0/1 keep-new masks per element, random_zoneout) or a number (one
    # weight for every element)
    zoneout_h: object = None
    zoneout_c: object = None

    @property
    def cfg(self):
        return R.Cfg(self.mode, self.num_layers, self.num_units, self.input_size, self.direction,
                     "skip_input" if self.skip_input else "linear_input", self.num_proj,
                     self.activation, self.recurrent_activation, self.reset_after)

    @property
    def dropout_active(self):
        return self.dropout > 0 and self.num_layers > 1

    @property
    def name(self):
        parts = [self.mode + ("" if self.reset_after else "-reset-before"),
                 "L%d" % self.num_layers, self.direction[:3], "tm" if self.time_major else "bm",
                 "T%dB%d" % (self.time, self.batch)]
        if self.num_proj:
            parts.append("P%d" % self.num_proj)
        if self.skip_input:
            parts.append("skip")
        if self.lengths is not None:
            parts.append("len" + "-".join(map(str, self.lengths)))
        if self.dropout:
            parts.append("drop%g" % self.dropout)
        if self.activation or self.recurrent_activation:
            parts.append("act-%s-%s" % (self.activation or "cudnn",
                                        self.recurrent_activation or "cudnn"))
        if self.masked:
            parts.append("mask-" + "".join(n[0] for n in MASK_NAMES if getattr(self, n)))
        for k in ZONEOUT_NAMES:
            w = getattr(self, k)
            if w is not None:
                parts.append("zo%s-%s" % (k[-1], "mask" if w == PER_ELEMENT else "%g" % w))
        return "_".join(parts)

    @property
    def masked(self):
        return self.input_masks or self.recurrent_masks

    @property
    def zoned(self):
        return any(getattr(self, k) is not None for k in ZONEOUT_NAMES)

    def model_kwargs(self):
        """The model and run fields every binding takes."""
        return dict(mode=self.mode, num_layers=self.num_layers, num_units=self.num_units,
                    input_size=self.input_size, num_proj=self.num_proj,
                    num_dirs=R.DIRECTIONS[self.direction], skip_input=self.skip_input,
                    time=self.time, batch=self.batch, time_major=self.time_major,
                    lengths=None if self.lengths is None else list(self.lengths),
                    activation=self.activation,
                    recurrent_activation=self.recurrent_activation, reset_after=self.reset_after)

    def output_shape(self):
        cfg = self.cfg
        width = cfg.D * cfg.Hr
        return ((self.time, self.batch, width) if self.time_major
                else (self.batch, self.time, width))


# The operand masks' names (Case fields, make_inputs keys, binding and reference arguments).
MASK_NAMES = ("input_masks", "recurrent_masks")
# Keras' dropout masks: 0 with this probability, else 1 / (1 - rate)
MASK_RATE = 0.25
# Zoneout's weights (Case fields, make_inputs keys, binding and reference arguments), and the
# Case value for weights per element: keep-new masks, 0 (keep the previous state) with
# probability ZONEOUT_RATE, else 1
ZONEOUT_NAMES = ("zoneout_h", "zoneout_c")
PER_ELEMENT = "per_element"
ZONEOUT_RATE = 0.3

# The CudnnRNN engine's test-only switch: "0" makes the forward recurrence run per step.
PERSISTENT_ENV = "TF_LSTM_OPS_RNN_PERSISTENT"
VARLEN = (4, 0, 2)  # B = 3, T = 4: a full, an empty and a partial sequence


def engine_cases():
    """Every mode x direction x projection x layers (1, 2) x layout x lengths (None, varied with
    0 and T), plus skip input, dropout, Keras' activations, the GRU resetting before
    (reset_before_cases) and operand masks (mask_cases)."""
    cases = []
    for mode in R.MODES:
        for proj in ((0, 2) if mode == "lstm" else (0,)):
            for direction in ("unidirectional", "bidirectional"):
                for layers in (1, 2):
                    for time_major in (True, False):
                        for lengths in (None, VARLEN):
                            cases.append(Case(mode, layers, 4, 3, direction, proj,
                                              time_major=time_major, lengths=lengths))
    for mode in R.MODES:  # skip input: I == H, layer 0 adds x to every gate
        for k, direction in enumerate(("unidirectional", "bidirectional")):
            cases.append(Case(mode, 2, 4, 4, direction, skip_input=True, time_major=k == 0,
                              lengths=VARLEN if k else None))
    for mode in R.MODES:  # dropout between layers: the masks are read back from the workspace
        for k, direction in enumerate(("unidirectional", "bidirectional")):
            cases.append(Case(mode, 3 if k else 2, 4, 3, direction,
                              num_proj=2 if (mode == "lstm" and k) else 0, time_major=k == 0,
                              lengths=VARLEN if k else None, dropout=0.5 if k else 0.25,
                              seed=(7 << 32) | 3, call=k + 1))
    # Keras' activations: every one somewhere, in every mode, with lengths, 2 layers, both
    # directions, projection and dropout between layers in some.
    acts = R.ACTIVATIONS
    names = list(acts)
    for k, name in enumerate(names):
        other = names[(k + 3) % len(names)]
        cases.append(Case("lstm", 2 if k % 2 else 1, 4, 3,
                          "bidirectional" if k % 3 == 0 else "unidirectional",
                          num_proj=2 if k % 4 == 1 else 0, time_major=k % 2 == 0,
                          lengths=VARLEN if k % 2 else None, activation=name,
                          recurrent_activation=other))
        cases.append(Case("gru", 2 if k % 2 == 0 else 1, 4, 3,
                          "bidirectional" if k % 3 == 1 else "unidirectional",
                          time_major=k % 2 == 1, lengths=None if k % 2 else VARLEN,
                          activation=other, recurrent_activation=name,
                          dropout=0.5 if k == 4 else 0.0, seed=3, call=1))
        cases.append(Case("rnn_tanh" if k % 2 else "rnn_relu", 1, 4, 3,
                          "bidirectional" if k % 2 else "unidirectional", lengths=VARLEN,
                          activation=name))
    cases += reset_before_cases()
    cases += mask_cases()
    cases += zoneout_cases()
    return cases


def reset_before_cases():
    """The GRU resetting before without operand masks (those are in mask_cases): direction x
    layers (1, 2) x layout x lengths, skip input and dropout between layers, and Keras'
    activations (cuDNN's are tanh and sigmoid, saved as pre-activations all the same)."""
    cases = []
    for direction in ("unidirectional", "bidirectional"):
        for layers in (1, 2):
            for time_major in (True, False):
                for lengths in (None, VARLEN):
                    cases.append(Case("gru", layers, 4, 3, direction, time_major=time_major,
                                      lengths=lengths, reset_after=False))
    cases.append(Case("gru", 2, 4, 4, "bidirectional", skip_input=True, lengths=VARLEN,
                      reset_after=False))
    cases.append(Case("gru", 3, 4, 3, "bidirectional", time_major=False, lengths=VARLEN,
                      dropout=0.5, seed=(7 << 32) | 5, call=2, reset_after=False))
    for k, (act, rec) in enumerate((("relu", "hard_sigmoid"), ("elu", ""), ("gelu", "silu"),
                                    ("", "hard_sigmoid_keras2"))):
        cases.append(Case("gru", 1 + k % 2, 4, 3, "bidirectional" if k % 2 else "unidirectional",
                          time_major=k < 2, lengths=VARLEN if k % 3 == 0 else None,
                          activation=act, recurrent_activation=rec, reset_after=False))
    return cases


def mask_cases():
    """Operand masks (Keras' recurrent dropout; one layer, one direction): every mode (and the GRU
    resetting before) x each mask alone and both x layout x lengths (None, varied), plus Keras'
    activations in every mode."""
    cases = []
    for mode, reset_after in [(mode, True) for mode in R.MODES] + [("gru", False)]:
        for xm, hm in ((True, False), (False, True), (True, True)):
            for time_major in (True, False):
                for lengths in (None, VARLEN):
                    cases.append(Case(mode, 1, 4, 3, time_major=time_major, lengths=lengths,
                                      input_masks=xm, recurrent_masks=hm,
                                      reset_after=reset_after))
    for k, (mode, act, rec) in enumerate((("lstm", "softsign", "hard_sigmoid"),
                                          ("gru", "elu", "hard_sigmoid_keras2"),
                                          ("rnn_tanh", "silu", ""), ("rnn_relu", "linear", ""))):
        cases.append(Case(mode, 1, 4, 3, time_major=k % 2 == 1, lengths=VARLEN if k < 2 else None,
                          activation=act, recurrent_activation=rec, input_masks=True,
                          recurrent_masks=True))
    cases.append(Case("gru", 1, 4, 3, time_major=False, lengths=VARLEN, activation="softsign",
                      recurrent_activation="hard_sigmoid", input_masks=True,
                      recurrent_masks=True, reset_after=False))
    return cases


def zoneout_cases():
    """Zoneout (docs/cudnn_rnn.md §4.9; one layer, one direction): LSTM's h, c and both, the GRU
    (resetting after and before) and both plain RNNs x per-element weights (layout x lengths) and
    one weight (two of those), plus one and per-element mixed, Keras' activations and operand
    masks."""
    cases = []
    models = [("lstm", True), ("gru", True), ("gru", False), ("rnn_tanh", True),
              ("rnn_relu", True)]
    for mode, reset_after in models:
        for zh, zc in (((PER_ELEMENT, None), (None, PER_ELEMENT), (PER_ELEMENT, PER_ELEMENT))
                       if mode == "lstm" else ((PER_ELEMENT, None),)):
            for time_major in (True, False):
                for lengths in (None, VARLEN):
                    cases.append(Case(mode, 1, 4, 3, time_major=time_major, lengths=lengths,
                                      reset_after=reset_after, zoneout_h=zh, zoneout_c=zc))
                    # one weight: with the lengths in one layout, without in the other
                    if (lengths is None) != time_major:
                        cases.append(Case(mode, 1, 4, 3, time_major=time_major, lengths=lengths,
                                          reset_after=reset_after,
                                          zoneout_h=None if zh is None else 0.9,
                                          zoneout_c=None if zc is None else 0.75))
    cases.append(Case("lstm", 1, 4, 3, lengths=VARLEN, zoneout_h=0.9, zoneout_c=PER_ELEMENT))
    # with Keras' activations and operand masks
    for k, (mode, act, rec, reset_after) in enumerate((
            ("lstm", "softsign", "hard_sigmoid", True), ("gru", "elu", "", True),
            ("gru", "gelu", "hard_sigmoid_keras2", False), ("rnn_tanh", "silu", "", True),
            ("rnn_relu", "", "", True))):
        cases.append(Case(mode, 1, 4, 3, time_major=k % 2 == 1,
                          lengths=VARLEN if k < 3 else None, activation=act,
                          recurrent_activation=rec, input_masks=k != 3, recurrent_masks=True,
                          reset_after=reset_after, zoneout_h=PER_ELEMENT if k % 2 else 0.9,
                          zoneout_c=PER_ELEMENT if mode == "lstm" else None))
    return cases


def empty_cases():
    """T == 0 and B == 0 for every mode (bidirectional, 2 layers, with lengths where B > 0)."""
    cases = []
    for mode in R.MODES:
        proj = 2 if mode == "lstm" else 0
        cases.append(Case(mode, 2, 4, 3, "bidirectional", proj, time=0, batch=3,
                          lengths=(0, 0, 0)))
        cases.append(Case(mode, 2, 4, 3, "bidirectional", proj, time_major=False, time=4,
                          batch=0, dropout=0.5))
    return cases


# ------------------------------------------------------------------------------------------------
# running the engine
# ------------------------------------------------------------------------------------------------

def make_inputs(rng, case, dtype):
    """Random inputs and cotangents (TF layouts), rounded to dtype; inputs hold the case's
    operand masks (random_masks) under MASK_NAMES and zoneout weights (random_zoneout) under
    ZONEOUT_NAMES."""
    cfg = case.cfg
    inp = R.random_inputs(rng, cfg, case.time, case.batch, case.time_major)
    cot = R.random_cotangents(rng, cfg, case.time, case.batch, case.time_major)
    inp.update(random_masks(rng, case))
    inp.update(random_zoneout(rng, case))
    return rounded(inp, dtype), rounded(cot, dtype)


def random_masks(rng, case):
    """The case's operand masks as Keras draws them: 0 with probability MASK_RATE, else
    1 / (1 - MASK_RATE), a mask per gate: input_masks [G, B, I], recurrent_masks [G, B, Hr]."""
    cfg = case.cfg
    widths = dict(input_masks=cfg.I, recurrent_masks=cfg.Hr)
    return {k: np.where(rng.uniform(size=(cfg.G, case.batch, widths[k])) < MASK_RATE, 0.0,
                        1.0 / (1.0 - MASK_RATE))
            for k in MASK_NAMES if getattr(case, k)}


def random_zoneout(rng, case):
    """The case's zoneout weights: per element, 0/1 keep-new masks [T, B, H] in the input's
    layout (1 with probability 1 - ZONEOUT_RATE), or the case's one value (a scalar)."""
    shape = ((case.time, case.batch, case.num_units) if case.time_major
             else (case.batch, case.time, case.num_units))
    weights = {}
    for k in ZONEOUT_NAMES:
        w = getattr(case, k)
        if w is not None:
            weights[k] = (np.float64(w) if w != PER_ELEMENT
                          else (rng.uniform(size=shape) >= ZONEOUT_RATE).astype(np.float64))
    return weights


def present(case, k):
    """Whether the case has the operand masks or zoneout weights named k."""
    return getattr(case, k) is not None if k in ZONEOUT_NAMES else getattr(case, k)


def upload_keras_inputs(alloc, case, inp, dtype):
    """The case's operand masks and zoneout weights as buffers (keep them while the engine may
    read them) and the binding arguments pointing at them (0: none), with whether each zoneout's
    weights are per element."""
    buffers = {k: alloc.upload(inp[k], dtype) if present(case, k) else None
               for k in MASK_NAMES + ZONEOUT_NAMES}
    args = {k: alloc.ptr(b) for k, b in buffers.items()}
    args.update({k + "_per_element": getattr(case, k) == PER_ELEMENT for k in ZONEOUT_NAMES
                 if present(case, k)})
    return buffers, args


def _check_scratch(alloc, scratch, what):
    assert alloc.scratch_intact(scratch), "%s wrote past its scratch block" % what


def run_forward(module, alloc, case, dtype, inp):
    """Runs the forward; returns the outputs (float64), the workspace buffer and its bytes, and
    the mask and zoneout arguments it passed (for rnn_reserve_header)."""
    # (the buffers: alive through the call)
    keras_buffers, keras_args = upload_keras_inputs(alloc, case, inp, dtype)
    kw = dict(case.model_kwargs(), **keras_args)
    lstm = case.mode == "lstm"
    x = alloc.upload(inp["input"], dtype)
    h = alloc.upload(inp["input_h"], dtype)
    c = alloc.upload(inp["input_c"], dtype) if lstm else None
    p = alloc.upload(inp["params"], dtype)
    out = alloc.empty(case.output_shape(), dtype)
    out_h = alloc.empty(np.shape(inp["input_h"]), dtype)
    out_c = alloc.empty(np.shape(inp["input_c"]), dtype) if lstm else None
    ws_bytes = module.rnn_workspace_bytes(dtype, **kw, dropout=case.dropout)
    ws = alloc.empty_bytes(ws_bytes)
    scratch = alloc.scratch(module.rnn_forward_scratch_bytes(alloc.backend, dtype, **kw,
                                                             dropout=case.dropout))
    ptr = alloc.ptr
    module.rnn_forward(alloc.backend, dtype, alloc.stream, **kw, dropout=case.dropout,
                       seed=case.seed, call=case.call, input=ptr(x), input_h=ptr(h),
                       input_c=ptr(c), params=ptr(p), output=ptr(out), output_h=ptr(out_h),
                       output_c=ptr(out_c), workspace=ptr(ws), scratch=ptr(scratch))
    alloc.synchronize()
    _check_scratch(alloc, scratch, "rnn_forward")
    return dict(output=alloc.download(out, dtype), output_h=alloc.download(out_h, dtype),
                output_c=alloc.download(out_c, dtype) if lstm else None,
                workspace_buffer=ws, workspace=alloc.download_bytes(ws), keras_args=keras_args)


def run_backward(module, alloc, case, dtype, inp, cot, workspace_buffer):
    """Runs the backprop on a forward's workspace; returns the gradients (float64)."""
    # (the buffers: alive through the call)
    keras_buffers, keras_args = upload_keras_inputs(alloc, case, inp, dtype)
    kw = dict(case.model_kwargs(), **keras_args)
    lstm = case.mode == "lstm"
    up = alloc.upload
    x, h, p = up(inp["input"], dtype), up(inp["input_h"], dtype), up(inp["params"], dtype)
    c = up(inp["input_c"], dtype) if lstm else None
    dy, dh = up(cot["dy"], dtype), up(cot["dh"], dtype)
    dc = up(cot["dc"], dtype) if lstm else None
    dx = alloc.empty(np.shape(inp["input"]), dtype)
    dh0 = alloc.empty(np.shape(inp["input_h"]), dtype)
    dc0 = alloc.empty(np.shape(inp["input_c"]), dtype) if lstm else None
    dp = alloc.empty(np.shape(inp["params"]), dtype)
    scratch = alloc.scratch(module.rnn_backward_scratch_bytes(alloc.backend, dtype, **kw))
    ptr = alloc.ptr
    module.rnn_backward(alloc.backend, dtype, alloc.stream, **kw, dropout=case.dropout,
                        input=ptr(x), input_h=ptr(h), input_c=ptr(c), params=ptr(p),
                        output_backprop=ptr(dy), output_h_backprop=ptr(dh),
                        output_c_backprop=ptr(dc), reserve=ptr(workspace_buffer),
                        input_backprop=ptr(dx), input_h_backprop=ptr(dh0),
                        input_c_backprop=ptr(dc0), params_backprop=ptr(dp), scratch=ptr(scratch))
    alloc.synchronize()
    _check_scratch(alloc, scratch, "rnn_backward")
    return dict(input_backprop=alloc.download(dx, dtype),
                input_h_backprop=alloc.download(dh0, dtype),
                input_c_backprop=alloc.download(dc0, dtype) if lstm else None,
                params_backprop=alloc.download(dp, dtype))


# ------------------------------------------------------------------------------------------------
# dropout masks: the CPU kernels' counter-based RNG (cudnn_rnn_types.h), in Python
# ------------------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _mix_int(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix_array(x):
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def dropout_drops(seed, call, layer_below, rate, n):
    """DropoutDrops(DropoutStream(...), k, rate) for k in [0, n): a bool array."""
    stream = _mix_int((seed & _M64) ^ _mix_int((call * 0x100 + layer_below) & _M64))
    with np.errstate(over="ignore"):
        x = np.uint64(stream) + np.arange(n, dtype=np.uint64)
    u = (_mix_array(x) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
    return u < float(np.float32(rate))


def workspace_values(case, dtype, workspace):
    """The workspace after its header, as the compute type."""
    return np.frombuffer(np.asarray(workspace, np.uint8)[HEADER_BYTES:].tobytes(), ACC[dtype])


def read_masks(module, case, dtype, workspace):
    """The dropout masks stored in the workspace (WorkspaceLayout's mask(l)), checked against the
    CPU's RNG; returns them as 0/1 arrays [T, B, D*Hr] for layers 1..L-1 (the reference's
    dropout_masks)."""
    lay = module.rnn_workspace_layout(**case.model_kwargs(), dropout_active=True)
    values = workspace_values(case, dtype, workspace)
    acc = ACC[dtype]
    scale = acc(1) / (acc(1) - acc(np.float32(case.dropout)))
    cfg = case.cfg
    n = case.time * case.batch * cfg.D * cfg.Hr
    masks = []
    for layer in range(1, case.num_layers):
        stored = values[lay["mask"][layer - 1]:lay["mask"][layer - 1] + n]
        drops = dropout_drops(case.seed, case.call, layer - 1, case.dropout, n)
        expected = np.where(drops, acc(0), scale).astype(acc)
        assert np.array_equal(stored, expected), "layer %d: the stored dropout mask is not the " \
            "CPU RNG's" % layer
        masks.append((~drops).astype(np.float64).reshape(case.time, case.batch, cfg.D * cfg.Hr))
    return masks


# ------------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------------

assert_close = R.assert_close


def _padded_zero(a, lengths, time_major):
    a = a if time_major else a.transpose(1, 0, 2)
    return all(np.all(a[n:, b] == 0.0) for b, n in enumerate(lengths))


def reference(case, inp, cot, masks=None):
    cfg = case.cfg
    lens = None if case.lengths is None else list(case.lengths)
    extra = dict(dropout=float(np.float32(case.dropout)), dropout_masks=masks) if masks else {}
    extra.update({k: inp[k] for k in MASK_NAMES + ZONEOUT_NAMES if present(case, k)})
    fwd = R.forward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                    seq_lengths=lens, time_major=case.time_major, **extra)
    bwd = R.backward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                     cot["dy"], cot["dh"], cot["dc"], seq_lengths=lens,
                     time_major=case.time_major, **extra)
    return fwd, bwd


def check_case(module, alloc, case, dtype, rng):
    """Forward and backward of one case against the reference; the header and, with dropout, the
    masks in the workspace. Returns the max relative errors (for reports)."""
    tol = TOL[dtype]
    if dtype in ("half", "bfloat16") and (case.activation or case.recurrent_activation):
        # 16-bit GEMM operands (h rounded to the storage type each step) through gates that do
        # not contract errors as sigmoid's slope <= 1/4 does (elu, linear gates: slope 1)
        tol *= 2
    inp, cot = make_inputs(rng, case, dtype)
    fwd = run_forward(module, alloc, case, dtype, inp)
    kw = dict(case.model_kwargs(), **fwd["keras_args"])
    header = module.rnn_reserve_header(dtype, **kw, dropout=case.dropout)
    assert len(fwd["workspace"]) == module.rnn_workspace_bytes(dtype, **kw, dropout=case.dropout)
    assert fwd["workspace"][:HEADER_BYTES].tobytes() == header, "workspace header"
    # Every saved value is written (buffers start as NaN bytes), as the CPU kernels write them.
    assert np.all(np.isfinite(workspace_values(case, dtype, fwd["workspace"]))), "workspace gaps"
    masks = read_masks(module, case, dtype, fwd["workspace"]) if case.dropout_active else None
    ref_f, ref_b = reference(case, inp, cot, masks)
    errors = {}
    names = ["output", "output_h"] + (["output_c"] if case.mode == "lstm" else [])
    for k in names:
        if _fits(dtype, ref_f[k]):
            assert_close(fwd[k], ref_f[k], tol, k)
            errors[k] = _rel_err(fwd[k], ref_f[k])
    if case.lengths is not None:
        assert _padded_zero(fwd["output"], case.lengths, case.time_major), "padded output"
    bwd = run_backward(module, alloc, case, dtype, inp, cot, fwd["workspace_buffer"])
    names = ["input_backprop", "input_h_backprop", "params_backprop"] + (
        ["input_c_backprop"] if case.mode == "lstm" else [])
    for k in names:
        if _fits(dtype, ref_b[k]):
            assert_close(bwd[k], ref_b[k], tol, k)
            errors[k] = _rel_err(bwd[k], ref_b[k])
    if case.lengths is not None:
        assert _padded_zero(bwd["input_backprop"], case.lengths, case.time_major), "padded dx"
    return errors


def _fits(dtype, expected):
    """Whether the true values fit the storage type with room to spare: unbounded activations
    (linear or relu gates) can drive gradients past half's 65504, where no result of that type
    can match them (the float types' ranges hold every case)."""
    return dtype != "half" or np.size(expected) == 0 or np.max(np.abs(expected)) < 3e4


def _rel_err(actual, expected):
    expected = np.asarray(expected, np.float64)
    if expected.size == 0:
        return 0.0
    return float(np.max(np.abs(actual - expected)) / max(1.0, np.max(np.abs(expected))))


def check_empty(module, alloc, case, dtype, rng):
    """T == 0 or B == 0: the final state is the initial state, the state gradients pass through,
    params_backprop is zero, and the workspace is just the header."""
    assert case.time == 0 or case.batch == 0
    inp, cot = make_inputs(rng, case, dtype)
    fwd = run_forward(module, alloc, case, dtype, inp)
    kw = case.model_kwargs()
    assert fwd["workspace"].tobytes() == module.rnn_reserve_header(dtype, **kw,
                                                                   dropout=case.dropout)
    assert fwd["output"].shape == case.output_shape()
    np.testing.assert_array_equal(fwd["output_h"], inp["input_h"])
    if case.mode == "lstm":
        np.testing.assert_array_equal(fwd["output_c"], inp["input_c"])
    bwd = run_backward(module, alloc, case, dtype, inp, cot, fwd["workspace_buffer"])
    assert bwd["input_backprop"].shape == np.shape(inp["input"])
    np.testing.assert_array_equal(bwd["input_h_backprop"], cot["dh"])
    if case.mode == "lstm":
        np.testing.assert_array_equal(bwd["input_c_backprop"], cot["dc"])
    assert np.all(bwd["params_backprop"] == 0.0)


def check_header_mismatch(module, alloc, case, dtype, rng):
    """Backprop on a reserve space whose header is not the expected one: every output NaN (the
    engine cannot tell the host without a synchronisation). Then the intact header: finite."""
    inp, cot = make_inputs(rng, case, dtype)
    fwd = run_forward(module, alloc, case, dtype, inp)
    ws = fwd["workspace_buffer"]
    good = fwd["workspace"][:HEADER_BYTES].tobytes()
    for offset in (0, 8, 16, 24):  # magic, config hash, bytes, dropout flag
        bad = bytearray(good)
        bad[offset] ^= 0x01
        alloc.write_bytes(ws, 0, bytes(bad))
        bwd = run_backward(module, alloc, case, dtype, inp, cot, ws)
        for k, v in bwd.items():
            if v is not None:
                assert v.size > 0 and np.all(np.isnan(v)), "%s not NaN (header byte %d)" % (
                    k, offset)
    alloc.write_bytes(ws, 0, good)
    bwd = run_backward(module, alloc, case, dtype, inp, cot, ws)
    for k, v in bwd.items():
        if v is not None:
            assert np.all(np.isfinite(v)), k
    # A reserve space from other lengths (same sizes), from a forward that used another set of
    # operand masks or zoneout weights (none, or per element for one value), or from the other
    # GRU (reset after / before): its config hash differs.
    others = []
    if case.lengths is not None:
        others.append(dataclasses.replace(case, lengths=tuple(case.time for _ in case.lengths)))
    for k in MASK_NAMES:
        if getattr(case, k):
            others.append(dataclasses.replace(case, **{k: False}))
    for k in ZONEOUT_NAMES:
        if getattr(case, k) is not None:
            others.append(dataclasses.replace(case, **{k: None}))
        if getattr(case, k) == PER_ELEMENT:  # (one value: the backward reads the first weight)
            others.append(dataclasses.replace(case, **{k: 0.5}))
    if case.mode == "gru":
        others.append(dataclasses.replace(case, reset_after=not case.reset_after))
    for other in others:
        bwd = run_backward(module, alloc, other, dtype, inp, cot, ws)
        assert all(np.all(np.isnan(v)) for v in bwd.values() if v is not None), other.name


def check_deterministic(module, alloc, case, dtype, rng):
    """The same inputs give the same bits, forward (workspace included) and backward."""
    inp, cot = make_inputs(rng, case, dtype)
    runs = []
    for _ in range(2):
        fwd = run_forward(module, alloc, case, dtype, inp)
        bwd = run_backward(module, alloc, case, dtype, inp, cot, fwd["workspace_buffer"])
        runs.append((fwd, bwd))
    (f1, b1), (f2, b2) = runs
    assert np.array_equal(f1["workspace"], f2["workspace"])
    for k in ("output", "output_h", "output_c"):
        if f1[k] is not None:
            assert np.array_equal(f1[k], f2[k], equal_nan=True), k
    for k in b1:
        if b1[k] is not None:
            assert np.array_equal(b1[k], b2[k], equal_nan=True), k


def check_keras_params(module, alloc, mode, input_size, num_units, bias_rows, dtype, rng):
    """Keras' weights to params and back on the engine's backend: an exact copy, in the layout
    of the reference (docs/cudnn_rnn.md §6.5); with one bias row, b_W is written as zero."""
    G = R.GATES[mode]
    I, H = input_size, num_units
    keras = [storage.round_to(rng.standard_normal(shape), dtype) for shape in
             ((I, G * H), (H, G * H), (G * H,) if bias_rows == 1 else (2, G * H))]
    cfg = R.Cfg(mode, 1, H, I)
    expected = R.canonical_to_params(cfg, *R.keras_canonical(mode, *keras))
    ptr = alloc.ptr
    sources = [alloc.upload(w, dtype) for w in keras]
    params = alloc.empty((expected.size,), dtype)
    module.keras_params(alloc.backend, dtype, alloc.stream, mode, I, H, bias_rows, True,
                        *(ptr(b) for b in sources), ptr(params))
    alloc.synchronize()
    np.testing.assert_array_equal(alloc.download(params, dtype), expected)
    back = [alloc.empty(np.shape(w), dtype) for w in keras]
    module.keras_params(alloc.backend, dtype, alloc.stream, mode, I, H, bias_rows, False,
                        *(ptr(b) for b in back), ptr(params))
    alloc.synchronize()
    for got, want in zip(back, keras):
        np.testing.assert_array_equal(alloc.download(got, dtype), want)
