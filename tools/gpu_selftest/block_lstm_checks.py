"""Framework-neutral checks of the LSTM block-op engine (cc/block_lstm/gpu_engine.h) against the
float64 NumPy reference (tools/references/block_lstm.py).

Used by tests/test_gpu_block_lstm_engine.py (backend "host", NumPy buffers) and by the GPU self-test
(gpu_selftest.py: backend "cuda", torch CUDA tensors). The engine is reached through the
self-test module (build.py) and an *allocator* that owns the buffers: storage.py's
NumpyAllocator (alias HostAlloc) or TorchAllocator; see storage.py for the interface and for the
storage types (bfloat16 travels as uint16 bit patterns, rounded to nearest even). Output buffers
start as NaN bytes, so values the engine never writes show.

Check functions return (errors, problems): errors maps each output to its error
max|ours - reference| / max(1, max|reference|); problems lists what failed (empty = pass):
errors above the dtype's tolerance, non-finite values, outputs that must be exactly zero and are
not, a scratch guard that was overwritten.
"""

import zlib

import numpy as np

from tools.references import block_lstm as ref
from tools.gpu_selftest import storage

DTYPES = storage.DTYPES
OUTPUTS = ref.OUTPUT_NAMES  # i, cs, f, o, ci, co, h
INPUTS = ("x", "cs_prev", "h_prev", "w", "wci", "wcf", "wco", "b")
SEQ_GRADS = ref.SEQ_GRAD_NAMES  # x_grad .. b_grad
CELL_GRADS = ref.CELL_GRAD_NAMES  # cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad
GATE_GRADS = ("i_grad", "f_grad", "o_grad", "ci_grad", "co_grad")  # BlockLSTMFullGrad only
# BlockLSTMFullGradGrad's 22 float inputs, in the order of its results (block_lstm_types.h's
# LstmBackwardGrads: the forward's inputs, the activations, the output gradients)
OUTPUT_GRADS = tuple(k + "_grad" for k in OUTPUTS)  # i_grad, cs_grad, ..., h_grad
FULL_GRAD_INPUTS = INPUTS + OUTPUTS + OUTPUT_GRADS

# max|ours - reference| / max(1, max|reference|): the CPU kernels' test tolerances
# (tests/test_block_lstm_forward.py, tests/test_block_lstm_backward.py).
FORWARD_TOL = {"float64": 1e-10, "float32": 1e-5, "half": 3e-3, "bfloat16": 3e-2}
BACKWARD_TOL = {"float64": 1e-10, "float32": 1e-5, "half": 1e-2, "bfloat16": 3e-2}
# BlockLSTMFullGradGrad: |<results, d> - central difference| / max(1, Σ|results · d|)
BACKWARD_GRAD_TOL = {"float64": 1e-7, "float32": 1e-4, "half": 1e-2, "bfloat16": 3e-2}

# ------------------------------------------------------------------------------------------
# storage types and allocators: storage.py (shared with cudnn_rnn_checks.py)
# ------------------------------------------------------------------------------------------

float32_to_bfloat16_bits = storage.float32_to_bfloat16_bits
bfloat16_bits_to_float32 = storage.bfloat16_bits_to_float32
round_to = storage.round_to
HostAlloc = storage.NumpyAllocator    # backend "host"


# ------------------------------------------------------------------------------------------
# configurations and inputs
# ------------------------------------------------------------------------------------------

# (T, B, I, H, L): small and odd sizes, L from 0 to T, and the empty cases.
SEQ_SHAPES = [
    (1, 1, 1, 1, 1), (1, 3, 2, 5, 1), (2, 2, 3, 4, 2), (3, 1, 4, 2, 2), (4, 3, 1, 5, 4),
    (5, 4, 6, 8, 3), (6, 3, 5, 7, 6), (7, 2, 2, 4, 5), (3, 5, 7, 3, 1), (8, 1, 3, 2, 8),
    (4, 2, 9, 6, 2), (2, 6, 4, 1, 2), (6, 8, 8, 16, 6), (9, 3, 5, 4, 7), (20, 2, 3, 3, 17),
    (3, 40, 2, 3, 3),  # > 16 rows per step: several peephole row chunks
    # empty / degenerate
    (1, 2, 3, 2, 0), (5, 2, 3, 3, 0), (0, 2, 3, 4, 0), (3, 0, 2, 3, 2), (3, 2, 0, 4, 3),
    (3, 2, 3, 0, 2), (0, 0, 0, 0, 0),
]

# (layout, forget_bias, cell_clip, use_peephole). cell_clip 0.5 / 0.8 are active with these
# input scales; <= 0 means no clipping.
ATTRS = [
    ("ICFO", 1.0, 3.0, False),   # BlockLSTM defaults
    ("ICFO", 1.0, 3.0, True),
    ("ICFO", 0.3, 0.0, False),
    ("ICFO", -0.7, 0.5, True),
    ("ICFO", 0.0, -1.0, True),
    ("IFCO", 0.0, 0.0, False),   # BlockLSTMV2 defaults
    ("IFCO", 0.0, 0.8, True),
    ("IFCO", 0.0, 0.5, False),
    ("IFCO", 2.0, 0.0, True),
]


def config(T, B, I, H, L, layout="ICFO", forget_bias=1.0, cell_clip=3.0, use_peephole=False):
    return dict(T=T, B=B, I=I, H=H, L=L, layout=layout, forget_bias=forget_bias,
                cell_clip=cell_clip, use_peephole=use_peephole)


def seq_configs(attrs_per_shape=None):
    """Every shape with every attribute set (attrs_per_shape: only that many, rotating)."""
    out = []
    for s, shape in enumerate(SEQ_SHAPES):
        attrs = ATTRS if attrs_per_shape is None else [
            ATTRS[(s + k) % len(ATTRS)] for k in range(attrs_per_shape)]
        out += [config(*shape, *a) for a in attrs]
    return out


def config_id(cfg):
    return "T%(T)dB%(B)dI%(I)dH%(H)dL%(L)d-%(layout)s-fb%(forget_bias)g-clip%(cell_clip)g-pp%(use_peephole)d" % dict(
        cfg, use_peephole=int(cfg["use_peephole"]))


def seed_for(*parts):
    return zlib.crc32(repr(parts).encode())


def f32(v):
    """A float attr as the engine sees it (attrs are 32-bit floats)."""
    return float(np.float32(v))


def reference_attrs(cfg, dtype):
    """The attrs the reference needs: float32 forget_bias; cell_clip as the kernels use it
    (rounded to dtype; the test clip > 0 is on the float32 attr)."""
    clip = f32(cfg["cell_clip"])
    return dict(forget_bias=f32(cfg["forget_bias"]),
                cell_clip=float(round_to(clip, dtype)) if clip > 0 else clip,
                use_peephole=cfg["use_peephole"], layout=cfg["layout"])


def random_inputs(rng, B, I, H, dtype, T=None, scale=1.0):
    """tools/references/block_lstm.py's random inputs (the CPU tests' distribution), rounded to
    dtype."""
    p = ref.random_inputs(rng, B, I, H, T=T, scale=scale)
    return {k: round_to(v, dtype) for k, v in p.items()}


def poison_unused_peepholes(p, use_peephole):
    """Without use_peephole the peephole weights must never be read: make them NaN/Inf."""
    if use_peephole:
        return p
    H = p["wci"].shape[0]
    return dict(p, wci=np.full(H, np.nan), wcf=np.full(H, np.inf), wco=np.full(H, -np.inf))


# ------------------------------------------------------------------------------------------
# running the engine
# ------------------------------------------------------------------------------------------

def _dims(cfg):
    return cfg["T"], cfg["B"], cfg["I"], cfg["H"]


def _run_with_scratch(alloc, nbytes, call, problems, what):
    scratch = alloc.scratch(nbytes)
    call(alloc.ptr(scratch))
    alloc.synchronize()
    if not alloc.scratch_intact(scratch):
        problems.append("%s wrote past its %d scratch bytes" % (what, nbytes))


def run_forward(module, alloc, dtype, inputs, cfg, problems=None):
    """Runs lstm_forward on float64 `inputs` (x [T,B,I], ...); returns the seven outputs as
    float64 [T,B,H] arrays."""
    problems = [] if problems is None else problems
    T, B, I, H = _dims(cfg)
    bufs = {k: alloc.upload(inputs[k], dtype) for k in INPUTS}
    outs = {k: alloc.empty((T, B, H), dtype) for k in OUTPUTS}
    attrs = (cfg["layout"], f32(cfg["forget_bias"]), f32(cfg["cell_clip"]),
             bool(cfg["use_peephole"]))
    nbytes = module.lstm_forward_scratch_bytes(alloc.backend, dtype, T, B, I, H, *attrs,
                                               cfg["L"])
    ptrs = {k: alloc.ptr(v) for k, v in list(bufs.items()) + list(outs.items())}
    _run_with_scratch(alloc, nbytes, lambda s: module.lstm_forward(
        alloc.backend, dtype, alloc.stream, T, B, I, H, *attrs, cfg["L"], scratch=s, **ptrs),
        problems, "lstm_forward")
    return {k: alloc.download(v, dtype) for k, v in outs.items()}


def run_backward(module, alloc, dtype, case, cfg, problems=None):
    """Runs lstm_backward on a case (inputs, activations i..h, cs_grad, h_grad and, for the
    full gradient, i_grad..co_grad, all float64); returns x_grad..b_grad as float64."""
    problems = [] if problems is None else problems
    T, B, I, H = _dims(cfg)
    names = INPUTS + OUTPUTS + ("cs_grad", "h_grad") + tuple(k for k in GATE_GRADS if k in case)
    bufs = {k: alloc.upload(case[k], dtype) for k in names}
    shapes = dict(x_grad=(T, B, I), cs_prev_grad=(B, H), h_prev_grad=(B, H), w_grad=(I + H, 4 * H),
                  wci_grad=(H,), wcf_grad=(H,), wco_grad=(H,), b_grad=(4 * H,))
    outs = {k: alloc.empty(shapes[k], dtype) for k in SEQ_GRADS}
    nbytes = module.lstm_backward_scratch_bytes(alloc.backend, dtype, T, B, I, H, cfg["layout"],
                                                bool(cfg["use_peephole"]), cfg["L"])
    ptrs = {k: alloc.ptr(v) for k, v in list(bufs.items()) + list(outs.items())}
    _run_with_scratch(alloc, nbytes, lambda s: module.lstm_backward(
        alloc.backend, dtype, alloc.stream, T, B, I, H, cfg["layout"],
        bool(cfg["use_peephole"]), cfg["L"], scratch=s, **ptrs), problems, "lstm_backward")
    return {k: alloc.download(v, dtype) for k, v in outs.items()}


def run_cell_backward(module, alloc, dtype, case, cfg, problems=None):
    """Runs lstm_cell_backward (LSTMBlockCellGrad) on a cell case ([B, *] arrays); returns
    cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad as float64."""
    problems = [] if problems is None else problems
    B, I, H = cfg["B"], cfg["I"], cfg["H"]
    names = INPUTS + ("i", "cs", "f", "o", "ci", "co", "cs_grad", "h_grad")
    bufs = {k: alloc.upload(case[k], dtype) for k in names}
    shapes = dict(cs_prev_grad=(B, H), dicfo=(B, 4 * H), wci_grad=(H,), wcf_grad=(H,),
                  wco_grad=(H,))
    outs = {k: alloc.empty(shapes[k], dtype) for k in CELL_GRADS}
    nbytes = module.lstm_cell_backward_scratch_bytes(alloc.backend, dtype, B, I, H,
                                                     cfg["layout"], bool(cfg["use_peephole"]))
    ptrs = {k: alloc.ptr(v) for k, v in list(bufs.items()) + list(outs.items())}
    _run_with_scratch(alloc, nbytes, lambda s: module.lstm_cell_backward(
        alloc.backend, dtype, alloc.stream, B, I, H, cfg["layout"], bool(cfg["use_peephole"]),
        scratch=s, **ptrs), problems, "lstm_cell_backward")
    return {k: alloc.download(v, dtype) for k, v in outs.items()}


def run_backward_grad(module, alloc, dtype, case, cot, cfg, problems=None):
    """Runs lstm_backward_grad (BlockLSTMFullGradGrad) on a full-gradient case and the
    cotangents `cot` of x_grad..b_grad (float64); returns its 22 results, keyed like
    FULL_GRAD_INPUTS, as float64."""
    problems = [] if problems is None else problems
    T, B, I, H = _dims(cfg)
    bufs = {k: alloc.upload(case[k], dtype) for k in FULL_GRAD_INPUTS}
    cot_bufs = [alloc.upload(cot[k], dtype) for k in SEQ_GRADS]
    outs = {k: alloc.empty(np.shape(case[k]), dtype) for k in FULL_GRAD_INPUTS}
    attrs = (cfg["layout"], bool(cfg["use_peephole"]), cfg["L"])
    nbytes = module.lstm_backward_grad_scratch_bytes(alloc.backend, dtype, T, B, I, H, *attrs)
    ptrs = lambda names: [alloc.ptr(bufs[k]) for k in names]  # noqa: E731
    _run_with_scratch(alloc, nbytes, lambda s: module.lstm_backward_grad(
        alloc.backend, dtype, alloc.stream, T, B, I, H, *attrs, inputs=ptrs(INPUTS),
        act=ptrs(OUTPUTS), out_grads=ptrs(OUTPUT_GRADS),
        cot=[alloc.ptr(c) for c in cot_bufs], grads=[alloc.ptr(outs[k]) for k in FULL_GRAD_INPUTS],
        scratch=s), problems, "lstm_backward_grad")
    return {k: alloc.download(v, dtype) for k, v in outs.items()}


# ------------------------------------------------------------------------------------------
# comparisons
# ------------------------------------------------------------------------------------------

def relative_error(actual, expected):
    """max|actual - expected| / max(1, max|expected|); inf for non-finite actual values or a
    shape mismatch; 0 for empty arrays."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return float("inf")
    if actual.size == 0:
        return 0.0
    if not np.all(np.isfinite(actual)):
        return float("inf")
    scale = max(1.0, float(np.max(np.abs(expected))))
    return float(np.max(np.abs(actual - expected))) / scale


def _compare(out, expect, names, tol, problems, prefix=""):
    errors = {}
    for k in names:
        errors[k] = relative_error(out[k], expect[k])
        if not errors[k] <= tol:
            problems.append("%s%s: error %.3g > %.3g" % (prefix, k, errors[k], tol))
    return errors


def _require_zero(array, what, problems):
    array = np.asarray(array)
    if array.size and not np.all(array == 0):
        problems.append("%s not exactly zero (%d of %d values)" % (
            what, int(np.sum(array != 0)), array.size))


# ------------------------------------------------------------------------------------------
# checks
# ------------------------------------------------------------------------------------------

def check_forward(module, alloc, dtype, cfg, seed=0, tol=None):
    """BlockLSTM(V2) forward vs the reference; outputs at t >= L must be exactly zero."""
    rng = np.random.default_rng(seed_for("fwd", dtype, seed, sorted(cfg.items())))
    tol = FORWARD_TOL[dtype] if tol is None else tol
    T, B, I, H = _dims(cfg)
    p = random_inputs(rng, B, I, H, dtype, T=T)
    problems = []
    out = run_forward(module, alloc, dtype, poison_unused_peepholes(p, cfg["use_peephole"]), cfg,
                      problems)
    expect = ref.block_lstm(cfg["L"], **p, **reference_attrs(cfg, dtype))
    errors = _compare(out, expect, OUTPUTS, tol, problems)
    for k in OUTPUTS:
        _require_zero(out[k][cfg["L"]:], "%s[t >= %d]" % (k, cfg["L"]), problems)
    return errors, problems


def backward_case(rng, cfg, dtype, full=False):
    """Inputs of a sequence gradient: the forward's inputs, its outputs (rounded to dtype) and
    output gradients. Everything at t >= L, and h[L-1], is NaN: never read."""
    T, B, I, H, L = cfg["T"], cfg["B"], cfg["I"], cfg["H"], cfg["L"]
    p = random_inputs(rng, B, I, H, dtype, T=T)
    acts = ref.block_lstm(L, **p, **reference_attrs(cfg, dtype))
    case = dict(p, **{k: round_to(v, dtype) for k, v in acts.items()})
    grads = ("cs_grad", "h_grad") + (GATE_GRADS if full else ())
    for k in grads:
        case[k] = round_to(rng.normal(size=(T, B, H)), dtype)
    for k in OUTPUTS + grads:
        case[k][L:] = np.nan
    if L > 0:
        case["h"][L - 1] = np.nan
    return case


def check_backward(module, alloc, dtype, cfg, full=False, seed=0, tol=None):
    """BlockLSTMGrad(V2) (full=False) or BlockLSTMFullGrad (full=True: gradients w.r.t. i, f,
    o, ci, co too) vs the reference. x_grad at t >= L, and the peephole gradients without
    use_peephole, must be exactly zero."""
    rng = np.random.default_rng(seed_for("bwd", dtype, full, seed, sorted(cfg.items())))
    tol = BACKWARD_TOL[dtype] if tol is None else tol
    case = backward_case(rng, cfg, dtype, full)
    problems = []
    out = run_backward(module, alloc, dtype, poison_unused_peepholes(case, cfg["use_peephole"]),
                       cfg, problems)
    extra = {k: case[k] for k in GATE_GRADS if k in case}
    expect = ref.block_lstm_grad(cfg["L"], **{k: case[k] for k in INPUTS + OUTPUTS},
                                 cs_grad=case["cs_grad"], h_grad=case["h_grad"],
                                 use_peephole=cfg["use_peephole"], layout=cfg["layout"], **extra)
    errors = _compare(out, expect, SEQ_GRADS, tol, problems)
    _require_zero(out["x_grad"][cfg["L"]:], "x_grad[t >= %d]" % cfg["L"], problems)
    if not cfg["use_peephole"] or cfg["L"] == 0:
        for k in ("wci_grad", "wcf_grad", "wco_grad"):
            _require_zero(out[k], k, problems)
    if cfg["L"] == 0:
        for k in SEQ_GRADS:
            _require_zero(out[k], k + " (seq_len_max 0)", problems)
    return errors, problems


def cell_case(rng, cfg, dtype):
    """Inputs of LSTMBlockCellGrad ([B, *]): the cell's inputs, its outputs, cs_grad, h_grad."""
    B, I, H = cfg["B"], cfg["I"], cfg["H"]
    p = random_inputs(rng, B, I, H, dtype)
    acts = ref.lstm_cell(**p, **reference_attrs(cfg, dtype))
    case = dict(p, **{k: round_to(v, dtype) for k, v in acts.items() if k != "h"})
    case["cs_grad"] = round_to(rng.normal(size=(B, H)), dtype)
    case["h_grad"] = round_to(rng.normal(size=(B, H)), dtype)
    return case


def check_cell_backward(module, alloc, dtype, cfg, seed=0, tol=None):
    """LSTMBlockCellGrad vs the reference (cfg's T and L are ignored). Without use_peephole the
    peephole gradients must be left untouched (their length is not validated then: the op
    zero-fills them itself), i.e. still hold the allocator's NaN poison."""
    rng = np.random.default_rng(seed_for("cell", dtype, seed, sorted(cfg.items())))
    tol = BACKWARD_TOL[dtype] if tol is None else tol
    case = cell_case(rng, cfg, dtype)
    problems = []
    out = run_cell_backward(module, alloc, dtype,
                            poison_unused_peepholes(case, cfg["use_peephole"]), cfg, problems)
    args = {k: case[k] for k in ("cs_prev", "i", "cs", "f", "o", "ci", "co", "cs_grad",
                                 "h_grad", "wci", "wcf", "wco")}
    expect = ref.lstm_cell_grad(**args, use_peephole=cfg["use_peephole"], layout=cfg["layout"])
    names = CELL_GRADS if cfg["use_peephole"] else ("cs_prev_grad", "dicfo")
    errors = _compare(out, expect, names, tol, problems)
    if not cfg["use_peephole"]:
        for k in ("wci_grad", "wcf_grad", "wco_grad"):
            if not np.all(np.isnan(out[k])):
                problems.append("%s written without use_peephole" % k)
    return errors, problems


def check_backward_grad(module, alloc, dtype, cfg, seed=0, tol=None):
    """BlockLSTMFullGradGrad (docs/block_lstm.md §7.2): its results projected on a random
    direction d of its 22 inputs against the central difference, along d, of <cot, the float64
    reference backward's results>. Results at t >= L (and the last valid step's h, which feeds
    nothing), b's, and the peephole ones without use_peephole must be exactly zero."""
    rng = np.random.default_rng(seed_for("bwdgrad", dtype, seed, sorted(cfg.items())))
    tol = BACKWARD_GRAD_TOL[dtype] if tol is None else tol
    T, B, I, H, L = cfg["T"], cfg["B"], cfg["I"], cfg["H"], cfg["L"]
    case = backward_case(rng, cfg, dtype, full=True)
    shapes = dict(x_grad=(T, B, I), cs_prev_grad=(B, H), h_prev_grad=(B, H), w_grad=(I + H, 4 * H),
                  wci_grad=(H,), wcf_grad=(H,), wco_grad=(H,), b_grad=(4 * H,))
    cot = {k: round_to(rng.normal(size=shapes[k]), dtype) for k in SEQ_GRADS}
    direction = {k: rng.normal(size=np.shape(case[k])) for k in FULL_GRAD_INPUTS}
    for k in OUTPUTS + OUTPUT_GRADS + ("x",):  # what the op never reads
        direction[k][L:] = 0
    if L > 0:
        direction["h"][L - 1] = 0
    if not cfg["use_peephole"]:
        for k in ("wci", "wcf", "wco"):
            direction[k][:] = 0
    problems = []
    out = run_backward_grad(module, alloc, dtype, poison_unused_peepholes(case, cfg["use_peephole"]),
                            cot, cfg, problems)

    def projected(eps):
        moved = {k: case[k] + eps * direction[k] for k in FULL_GRAD_INPUTS}
        grads = ref.block_lstm_grad(L, **{k: moved[k] for k in INPUTS + OUTPUTS},
                                    **{k: moved[k] for k in OUTPUT_GRADS},
                                    use_peephole=cfg["use_peephole"], layout=cfg["layout"])
        return sum(float(np.sum(np.nan_to_num(grads[k]) * cot[k])) for k in SEQ_GRADS)

    eps = 1e-5
    numeric = (projected(eps) - projected(-eps)) / (2 * eps)
    terms = [np.where(direction[k] != 0, out[k] * direction[k], 0.0) for k in FULL_GRAD_INPUTS]
    analytic = sum(float(np.sum(t)) for t in terms)
    scale = max(1.0, sum(float(np.sum(np.abs(t))) for t in terms))
    error = abs(analytic - numeric) / scale if np.isfinite(analytic) else float("inf")
    if not error <= tol:
        problems.append("<results, d>: error %.3g > %.3g (%.6g vs %.6g)" % (
            error, tol, analytic, numeric))
    for k in OUTPUTS + OUTPUT_GRADS + ("x",):
        _require_zero(out[k][L:], "%s result[t >= %d]" % (k, L), problems)
    if L > 0:
        _require_zero(out["h"][L - 1], "h result[t = %d]" % (L - 1), problems)
    _require_zero(out["b"], "b result", problems)
    if not cfg["use_peephole"] or L == 0:
        for k in ("wci", "wcf", "wco"):
            _require_zero(out[k], k + " result", problems)
    return {"projection": error}, problems


def check_deterministic(module, alloc, dtype, cfg, seed=0):
    """Forward, full backward and the backward's gradient twice on the same inputs: the bits
    must be identical."""
    rng = np.random.default_rng(seed_for("det", dtype, seed, sorted(cfg.items())))
    T, B, I, H = _dims(cfg)
    p = random_inputs(rng, B, I, H, dtype, T=T)
    case = backward_case(rng, cfg, dtype, full=True)
    problems = []
    runs = [(run_forward(module, alloc, dtype, p, cfg, problems),
             run_backward(module, alloc, dtype, case, cfg, problems)) for _ in range(2)]
    (fa, ba), (fb, bb) = runs
    for k in OUTPUTS:
        if not np.array_equal(fa[k], fb[k], equal_nan=True):
            problems.append("forward %s differs between two runs" % k)
    for k in SEQ_GRADS:
        if not np.array_equal(ba[k], bb[k], equal_nan=True):
            problems.append("backward %s differs between two runs" % k)
    cot = {k: round_to(rng.normal(size=np.shape(case[name])), dtype)
           for k, name in zip(SEQ_GRADS, INPUTS)}
    ga, gb = (run_backward_grad(module, alloc, dtype, case, cot, cfg, problems) for _ in range(2))
    for k in FULL_GRAD_INPUTS:
        if not np.array_equal(ga[k], gb[k], equal_nan=True):
            problems.append("backward grad %s differs between two runs" % k)
    return {}, problems


def run_all(module, alloc, dtypes=DTYPES, configs=None, log=print):
    """Every check on every config and dtype (the self-test CLI's entry point). Returns the
    number of failed checks; log(line) gets one line per failure and a summary per dtype."""
    configs = seq_configs() if configs is None else configs
    failed = 0
    for dtype in dtypes:
        worst = {}
        count = 0
        for cfg in configs:
            checks = [("forward", lambda: check_forward(module, alloc, dtype, cfg)),
                      ("backward", lambda: check_backward(module, alloc, dtype, cfg)),
                      ("full backward", lambda: check_backward(module, alloc, dtype, cfg, True)),
                      ("cell backward", lambda: check_cell_backward(module, alloc, dtype, cfg)),
                      ("backward grad", lambda: check_backward_grad(module, alloc, dtype, cfg))]
            for name, fn in checks:
                errors, problems = fn()
                count += 1
                worst[name] = max([worst.get(name, 0.0)] + list(errors.values()))
                if problems:
                    failed += 1
                    log("FAIL %s %s %s: %s" % (dtype, name, config_id(cfg), "; ".join(problems)))
        log("%s: %d checks, worst error %s" % (dtype, count, ", ".join(
            "%s %.3g" % kv for kv in worst.items())))
    return failed
