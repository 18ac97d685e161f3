"""The PyTorch side of the GPU self-test: torch.nn.LSTM / GRU / RNN weights in our cuDNN-canonical
params buffer, comparisons of our engines with torch (cuDNN on a GPU), and the benchmark.

torch is never imported here: every function that needs it takes the module as an argument, so
the weight conversions (NumPy only) are usable and testable without it.

Weights. torch's gate orders are cuDNN's canonical ones (docs/cudnn_rnn.md §4.1, §6.5):
LSTM i, f, g, o = cuDNN i, f, c, o; GRU r, z, n = cuDNN r, u, h. For pseudo-layer p = l*D + d
(suffix "_l{l}" plus "_reverse" for d = 1):
    weight_ih [G*H, in_l]   rows g*H..(g+1)*H are W_g       (in_l: I, then D*Hr)
    weight_hh [G*H, Hr]     rows g*H..(g+1)*H are R_g
    bias_ih   [G*H]         b_W, gate by gate
    bias_hh   [G*H]         b_R
    weight_hr [P, H]        the LSTM projection (proj_size = num_proj)
so the params buffer is [weight_ih, weight_hh, (weight_hr)] of every pseudo-layer, flattened
row-major, followed by [bias_ih, bias_hh] of every pseudo-layer.
BlockLSTMV2 (IFCO, no peephole, forget_bias 0, no clipping) from a single-layer torch.nn.LSTM:
w = [weight_ihᵀ; weight_hhᵀ] ([I+H, 4H], columns i, f, c, o), b = bias_ih + bias_hh.

Comparisons (check functions return (errors,
                                     problems) like block_lstm_checks: problems empty = pass).
Inputs are generated in float64 and rounded once to the dtype; torch runs the same rounded values
in the dtype and in float64. Errors are max|a - b| / max(1, max|b|) against torch's float64
result; ours must be within max(floor[dtype], 4 x torch's own error in that dtype), and equal to
torch float64 to 1e-9 in float64.
"""

import dataclasses
import os
import statistics
import time
from unittest import mock

import numpy as np

from tools.references import cudnn_rnn as R
from tools.gpu_selftest import block_lstm_checks, cudnn_rnn_checks, storage

DTYPES = storage.DTYPES
# ours vs torch float64, relative to max(1, max|expected|): at least this much is allowed ...
FLOOR = {"float64": 1e-9, "float32": 1e-4, "half": 1e-2, "bfloat16": 6e-2}
# ... and FACTOR x torch's own error in the same dtype (cuDNN keeps 16-bit states between steps;
# the engines keep float, so they are normally well inside).
FACTOR = 4.0
OUTPUT_NAMES = ("output", "output_h", "output_c")
GRAD_NAMES = ("input_backprop", "input_h_backprop", "input_c_backprop", "params_backprop")


def torch_dtype(torch, dtype):
    return {"half": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
            "float64": torch.float64}[dtype]


# ------------------------------------------------------------------------------------------------
# weights
# ------------------------------------------------------------------------------------------------

def _suffix(l, d):
    return "_l%d%s" % (l, "_reverse" if d else "")


def torch_param_names(cfg):
    """torch's parameter names of a cfg (R.Cfg), in torch's own order (_flat_weights_names)."""
    names = []
    for l in range(cfg.L):
        for d in range(cfg.D):
            s = _suffix(l, d)
            names += ["weight_ih" + s, "weight_hh" + s, "bias_ih" + s, "bias_hh" + s]
            if cfg.proj:
                names.append("weight_hr" + s)
    return names


def _check_torch_cfg(cfg):
    if cfg.skip:
        raise ValueError("torch.nn RNNs have no skip input (cuDNN's CUDNN_SKIP_INPUT)")


def torch_to_params(cfg, weights):
    """torch weights (a mapping name -> array, e.g. {k: v.numpy() for k, v in
    module.state_dict().items()}) -> our params buffer (float64, cuDNN canonical order)."""
    _check_torch_cfg(cfg)
    G, H = cfg.G, cfg.H
    mats, biases = [], []
    for l in range(cfg.L):
        for d in range(cfg.D):
            s = _suffix(l, d)
            w_ih = np.asarray(weights["weight_ih" + s], np.float64)
            w_hh = np.asarray(weights["weight_hh" + s], np.float64)
            mats += [w_ih[g * H:(g + 1) * H] for g in range(G)]
            mats += [w_hh[g * H:(g + 1) * H] for g in range(G)]
            if cfg.proj:
                mats.append(np.asarray(weights["weight_hr" + s], np.float64))
            b_ih = np.asarray(weights["bias_ih" + s], np.float64)
            b_hh = np.asarray(weights["bias_hh" + s], np.float64)
            biases += [b_ih[g * H:(g + 1) * H] for g in range(G)]
            biases += [b_hh[g * H:(g + 1) * H] for g in range(G)]
    return R.canonical_to_params(cfg, mats, biases)  # checks every shape


def params_to_torch(cfg, params):
    """Inverse of torch_to_params: {torch name: float64 array}."""
    _check_torch_cfg(cfg)
    out = {}
    for p, lay in enumerate(R.unpack(cfg, params)):
        s = _suffix(p // cfg.D, p % cfg.D)
        out["weight_ih" + s] = lay["W"].reshape(cfg.G * cfg.H, -1)
        out["weight_hh" + s] = lay["R"].reshape(cfg.G * cfg.H, cfg.Hr)
        out["bias_ih" + s] = lay["bW"].reshape(-1)
        out["bias_hh" + s] = lay["bR"].reshape(-1)
        if cfg.proj:
            out["weight_hr" + s] = lay["P"]
    return out


def torch_params_flat(torch, cfg, tensors):
    """torch_to_params for torch tensors (name -> tensor, e.g. a module's parameters or their
    gradients), on their device: weight_ih, weight_hh (weight_hr) of every pseudo-layer, then
    bias_ih, bias_hh of every pseudo-layer, each flattened row-major."""
    _check_torch_cfg(cfg)
    mats, biases = [], []
    for l in range(cfg.L):
        for d in range(cfg.D):
            s = _suffix(l, d)
            mats += [tensors["weight_ih" + s], tensors["weight_hh" + s]]
            if cfg.proj:
                mats.append(tensors["weight_hr" + s])
            biases += [tensors["bias_ih" + s], tensors["bias_hh" + s]]
    return torch.cat([t.reshape(-1) for t in mats + biases])


def torch_lstm_to_block(weight_ih, weight_hh, bias_ih, bias_hh):
    """Single-layer torch.nn.LSTM weights -> BlockLSTMV2's (w [I+H, 4H] IFCO, b [4H])."""
    w = np.concatenate([np.asarray(weight_ih, np.float64).T,
                        np.asarray(weight_hh, np.float64).T], axis=0)
    return w, np.asarray(bias_ih, np.float64) + np.asarray(bias_hh, np.float64)


def block_grads_to_torch(w_grad, b_grad, input_size):
    """BlockLSTMV2's w_grad, b_grad -> the torch.nn.LSTM parameter gradients (the two biases of
    torch are summed, so both get b_grad)."""
    w_grad = np.asarray(w_grad, np.float64)
    return dict(weight_ih_l0=w_grad[:input_size].T, weight_hh_l0=w_grad[input_size:].T,
                bias_ih_l0=np.asarray(b_grad, np.float64),
                bias_hh_l0=np.asarray(b_grad, np.float64))


# ------------------------------------------------------------------------------------------------
# running torch
# ------------------------------------------------------------------------------------------------

def make_torch_rnn(torch, cfg, batch_first):
    kw = dict(input_size=cfg.I, hidden_size=cfg.H, num_layers=cfg.L, bias=True,
              batch_first=batch_first, bidirectional=cfg.D == 2)
    if cfg.rnn_mode == "lstm":
        return torch.nn.LSTM(proj_size=cfg.num_proj, **kw)
    if cfg.rnn_mode == "gru":
        return torch.nn.GRU(**kw)
    return torch.nn.RNN(nonlinearity="relu" if cfg.rnn_mode == "rnn_relu" else "tanh", **kw)


def _to_torch(torch, a, dtype, device):
    # float64 -> dtype in torch is exact here: every value is already representable
    return torch.from_numpy(np.ascontiguousarray(a, np.float64)).to(
        device=device, dtype=torch_dtype(torch, dtype))


def _to_numpy(t):
    return None if t is None else t.detach().cpu().double().numpy()


def run_torch(torch, device, cfg, batch_first, lengths, dtype, inp, cot, weights):
    """torch.nn's forward and backward in `dtype` on `device`: inp (input, input_h [L*D, B, Hr],
    input_c or None), cot (dy, dh, dc or None) and weights (torch names) as float64 arrays.
    lengths: per-example lengths (pack_padded_sequence, enforce_sorted=False) or None.
    Returns float64 arrays: output (padded with zeros), output_h, output_c, input_backprop,
    input_h_backprop, input_c_backprop and weight_grads (torch names)."""
    lstm = cfg.rnn_mode == "lstm"
    td = torch_dtype(torch, dtype)
    module = make_torch_rnn(torch, cfg, batch_first).to(device=device, dtype=td)
    module.train()  # (cuDNN's backward needs the training forward; there is no dropout)
    names = torch_param_names(cfg)
    params = dict(module.named_parameters())
    assert sorted(params) == sorted(names), (sorted(params), sorted(names))
    with torch.no_grad():
        for name in names:
            params[name].copy_(_to_torch(torch, weights[name], dtype, device))
    x = _to_torch(torch, inp["input"], dtype, device).requires_grad_()
    h0 = _to_torch(torch, inp["input_h"], dtype, device).requires_grad_()
    leaves = [x, h0]
    if lstm:
        c0 = _to_torch(torch, inp["input_c"], dtype, device).requires_grad_()
        leaves.append(c0)
        hx = (h0, c0)
    else:
        hx = h0
    T = inp["input"].shape[1 if batch_first else 0]
    if lengths is not None:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(list(lengths), dtype=torch.int64), batch_first=batch_first,
            enforce_sorted=False)
        y_packed, hn = module(packed, hx)
        y, _ = torch.nn.utils.rnn.pad_packed_sequence(y_packed, batch_first=batch_first,
                                                      total_length=T)
    else:
        y, hn = module(x, hx)
    h_n, c_n = hn if lstm else (hn, None)
    outs = [y, h_n] + ([c_n] if lstm else [])
    cots = [_to_torch(torch, cot["dy"], dtype, device), _to_torch(torch, cot["dh"], dtype, device)]
    if lstm:
        cots.append(_to_torch(torch, cot["dc"], dtype, device))
    grads = torch.autograd.grad(outs, leaves + [params[n] for n in names], cots)
    n_leaves = len(leaves)
    return dict(output=_to_numpy(y), output_h=_to_numpy(h_n), output_c=_to_numpy(c_n),
                input_backprop=_to_numpy(grads[0]), input_h_backprop=_to_numpy(grads[1]),
                input_c_backprop=_to_numpy(grads[2]) if lstm else None,
                weight_grads={n: _to_numpy(g) for n, g in zip(names, grads[n_leaves:])})


# ------------------------------------------------------------------------------------------------
# comparisons
# ------------------------------------------------------------------------------------------------

def relative_error(actual, expected):
    """max|actual - expected| / max(1, max|expected|); inf for a shape mismatch or non-finite
    values; 0 for empty arrays."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        return float("inf")
    if actual.size == 0:
        return 0.0
    if not (np.all(np.isfinite(actual)) and np.all(np.isfinite(expected))):
        return float("inf")
    return float(np.max(np.abs(actual - expected))) / max(1.0, float(np.max(np.abs(expected))))


def judge(ours, theirs, exact, dtype, names, problems, prefix=""):
    """Appends a problem for every name whose error against `exact` (torch float64) is above
    max(FLOOR[dtype], FACTOR x theirs' error); `theirs` (torch in dtype) may be None (then only
    the floor counts). Returns {name: (our error, torch's error or None)}."""
    errors = {}
    for k in names:
        if ours.get(k) is None:
            continue
        e_ours = relative_error(ours[k], exact[k])
        e_theirs = None if theirs is None else relative_error(theirs[k], exact[k])
        bound = FLOOR[dtype]
        if dtype != "float64" and e_theirs is not None and np.isfinite(e_theirs):
            bound = max(bound, FACTOR * e_theirs)
        errors[k] = (e_ours, e_theirs)
        if not e_ours <= bound:
            problems.append("%s%s: error %.3g > %.3g (torch %s: %s)" % (
                prefix, k, e_ours, bound, dtype,
                "n/a" if e_theirs is None else "%.3g" % e_theirs))
    return errors


@dataclasses.dataclass(frozen=True)
class TorchCase:
    """One torch.nn comparison: mode (lstm, gru, rnn_tanh, rnn_relu), layers, directions,
    projection, layout and lengths (None: every sequence is `time` long)."""
    mode: str = "lstm"
    num_layers: int = 1
    bidirectional: bool = False
    num_proj: int = 0
    batch_first: bool = False
    lengths: tuple = None
    time: int = 7
    batch: int = 5
    input_size: int = 6
    num_units: int = 8

    @property
    def direction(self):
        return "bidirectional" if self.bidirectional else "unidirectional"

    @property
    def cfg(self):
        return R.Cfg(self.mode, self.num_layers, self.num_units, self.input_size, self.direction,
                     "linear_input", self.num_proj)

    @property
    def name(self):
        parts = [self.mode + ("P%d" % self.num_proj if self.num_proj else ""),
                 "L%d" % self.num_layers, "bi" if self.bidirectional else "uni",
                 "bf" if self.batch_first else "tm",
                 "T%dB%dI%dH%d" % (self.time, self.batch, self.input_size, self.num_units)]
        if self.lengths is not None:
            parts.append("len" + "-".join(map(str, self.lengths)) if len(self.lengths) <= 8
                         else "varlen")
        return "_".join(parts)

    def engine_case(self):
        """The same run as an cudnn_rnn_checks.Case (the engine's binding arguments)."""
        return cudnn_rnn_checks.Case(self.mode, self.num_layers, self.num_units, self.input_size,
                               self.direction, self.num_proj, time_major=not self.batch_first,
                               time=self.time, batch=self.batch, lengths=self.lengths)


def _varied_lengths(T, B):
    """B lengths in [1, T] (torch packs no empty sequence), unsorted, with T and 1 present."""
    lens = [T, 1] + [1 + (3 * k + 2) % T for k in range(max(0, B - 2))]
    return tuple(lens[:B])


def torch_cases(quick=False, large=False):
    """LSTM (with and without projection), GRU and RNN tanh/relu x 1-2 layers x uni/bi x
    time-/batch-major x fixed/variable lengths; quick: a covering subset; large: a few bigger
    shapes too."""
    cases = []
    k = 0
    for mode, proj in (("lstm", 0), ("lstm", 5), ("gru", 0), ("rnn_tanh", 0), ("rnn_relu", 0)):
        for layers in (1, 2):
            for bi in (False, True):
                for batch_first in (False, True):
                    for varied in (False, True):
                        k += 1
                        if quick and k % 4 != 0 and not (layers == 2 and bi and varied):
                            continue
                        cases.append(TorchCase(mode, layers, bi, proj, batch_first,
                                               _varied_lengths(7, 5) if varied else None))
    if large:
        for mode, proj in (("lstm", 24), ("lstm", 0), ("gru", 0), ("rnn_tanh", 0)):
            cases.append(TorchCase(mode, 2, True, proj, mode == "gru", _varied_lengths(19, 23),
                                   time=19, batch=23, input_size=37, num_units=64))
    return cases


def make_torch_inputs(rng, case):
    """float64 inputs (torch layouts; states [L*D, B, n]), cotangents and params."""
    cfg = case.cfg
    T, B, LD = case.time, case.batch, cfg.L * cfg.D
    weights, biases = R.random_canonical(rng, cfg)
    inp = dict(input=rng.uniform(-1, 1, (B, T, cfg.I) if case.batch_first else (T, B, cfg.I)),
               input_h=rng.uniform(-0.8, 0.8, (LD, B, cfg.Hr)),
               input_c=rng.uniform(-1, 1, (LD, B, cfg.H)) if cfg.is_lstm else None,
               params=R.canonical_to_params(cfg, weights, biases))
    y_shape = (B, T, cfg.D * cfg.Hr) if case.batch_first else (T, B, cfg.D * cfg.Hr)
    cot = dict(dy=rng.uniform(-1, 1, y_shape), dh=rng.uniform(-1, 1, (LD, B, cfg.Hr)),
               dc=rng.uniform(-1, 1, (LD, B, cfg.H)) if cfg.is_lstm else None)
    return inp, cot


def _torch_as_ours(cfg, result):
    out = {k: result[k] for k in OUTPUT_NAMES + GRAD_NAMES[:3]}
    out["params_backprop"] = torch_to_params(cfg, result["weight_grads"])
    return out


def _safe_torch(fn, problems, what):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  (torch may lack a dtype on a device: reported)
        problems.append("note: torch %s failed (%s: %s); judged on the floor only" % (
            what, type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return None


def check_rnn_vs_torch(module, alloc, torch, device, case, dtype, rng):
    """CudnnRNN engine (rnn_forward / rnn_backward) vs torch.nn in `dtype` and float64 on the
    same rounded values: outputs, final states and every gradient. Returns (errors, problems);
    problems starting with "note:" are informational."""
    cfg = case.cfg
    inp64, cot64 = make_torch_inputs(rng, case)
    inp, cot = storage.rounded(inp64, dtype), storage.rounded(cot64, dtype)
    weights = params_to_torch(cfg, inp["params"])
    problems = []
    tin = dict(input=inp["input"], input_h=inp["input_h"], input_c=inp["input_c"])
    exact = _torch_as_ours(cfg, run_torch(torch, device, cfg, case.batch_first, case.lengths,
                                          "float64", tin, cot, weights))
    theirs = None
    if dtype != "float64":
        res = _safe_torch(lambda: run_torch(torch, device, cfg, case.batch_first, case.lengths,
                                            dtype, tin, cot, weights), problems, dtype)
        theirs = None if res is None else _torch_as_ours(cfg, res)
    ecase = case.engine_case()
    fwd = cudnn_rnn_checks.run_forward(module, alloc, ecase, dtype, inp)
    bwd = cudnn_rnn_checks.run_backward(module, alloc, ecase, dtype, inp, cot,
                                        fwd["workspace_buffer"])
    ours = dict(fwd, **bwd)
    hard = []
    errors = judge(ours, theirs, exact, dtype, OUTPUT_NAMES + GRAD_NAMES, hard)
    if case.lengths is not None:
        if not cudnn_rnn_checks._padded_zero(ours["output"], case.lengths, not case.batch_first):
            hard.append("output not zero past a sequence's length")
        if not cudnn_rnn_checks._padded_zero(ours["input_backprop"], case.lengths,
                                       not case.batch_first):
            hard.append("input_backprop not zero past a sequence's length")
    return errors, hard + problems


BLOCK_SHAPES = ((1, 1, 1, 1), (6, 4, 5, 7), (9, 3, 16, 12), (15, 9, 12, 24))
BLOCK_SHAPES_LARGE = ((24, 33, 40, 96),)


def check_block_lstm_vs_torch(module, alloc, torch, device, shape, dtype, rng):
    """BlockLSTMV2 engine (IFCO, no peephole, forget_bias 0, no clip; lstm_forward /
    lstm_backward) vs a single-layer torch.nn.LSTM, time-major, the torch loss being
    <dy, output> + <dh, h_n> + <dc, c_n>."""
    T, B, I, H = shape
    cfg = R.Cfg("lstm", 1, H, I)
    a = 1.5 / np.sqrt(max(I, H, 1))
    rnd = lambda *s: rng.uniform(-1, 1, s)  # noqa: E731
    r = storage.round_to
    weights = dict(weight_ih_l0=r(a * rnd(4 * H, I), dtype), weight_hh_l0=r(a * rnd(4 * H, H), dtype),
                   bias_ih_l0=r(0.5 * rnd(4 * H), dtype), bias_hh_l0=r(0.5 * rnd(4 * H), dtype))
    tin = dict(input=r(rnd(T, B, I), dtype), input_h=r(0.8 * rnd(1, B, H), dtype),
               input_c=r(rnd(1, B, H), dtype))
    cot = dict(dy=r(rnd(T, B, H), dtype), dh=r(rnd(1, B, H), dtype), dc=r(rnd(1, B, H), dtype))
    problems = []

    def as_block(res):
        g = res["weight_grads"]
        w_grad, _ = torch_lstm_to_block(g["weight_ih_l0"], g["weight_hh_l0"], g["bias_ih_l0"],
                                        g["bias_hh_l0"])
        return dict(output=res["output"], output_h=res["output_h"], output_c=res["output_c"],
                    input_backprop=res["input_backprop"],
                    input_h_backprop=res["input_h_backprop"],
                    input_c_backprop=res["input_c_backprop"], w_grad=w_grad,
                    b_grad=g["bias_ih_l0"], b_grad_hh=g["bias_hh_l0"])

    exact = as_block(run_torch(torch, device, cfg, False, None, "float64", tin, cot, weights))
    theirs = None
    if dtype != "float64":
        res = _safe_torch(lambda: run_torch(torch, device, cfg, False, None, dtype, tin, cot,
                                            weights), problems, dtype)
        theirs = None if res is None else as_block(res)

    w, b = torch_lstm_to_block(weights["weight_ih_l0"], weights["weight_hh_l0"],
                               weights["bias_ih_l0"], weights["bias_hh_l0"])
    zeros = np.zeros(H)
    inputs = dict(x=tin["input"], cs_prev=tin["input_c"][0], h_prev=tin["input_h"][0], w=w,
                  wci=zeros, wcf=zeros, wco=zeros, b=r(b, dtype))
    bcfg = block_lstm_checks.config(T, B, I, H, T, "IFCO", 0.0, 0.0, False)
    hard = []
    acts = block_lstm_checks.run_forward(module, alloc, dtype, inputs, bcfg, hard)
    # torch's cotangents as BlockLSTM's output gradients: dh / dc enter at the last step
    h_grad = cot["dy"].copy()
    h_grad[T - 1] += cot["dh"][0]
    cs_grad = np.zeros((T, B, H))
    cs_grad[T - 1] = cot["dc"][0]
    case = dict(inputs, **acts, h_grad=r(h_grad, dtype), cs_grad=r(cs_grad, dtype))
    grads = block_lstm_checks.run_backward(module, alloc, dtype, case, bcfg, hard)
    ours = dict(output=acts["h"], output_h=acts["h"][T - 1:], output_c=acts["cs"][T - 1:],
                input_backprop=grads["x_grad"], input_h_backprop=grads["h_prev_grad"][None],
                input_c_backprop=grads["cs_prev_grad"][None], w_grad=grads["w_grad"],
                b_grad=grads["b_grad"], b_grad_hh=grads["b_grad"])
    names = OUTPUT_NAMES + GRAD_NAMES[:3] + ("w_grad", "b_grad", "b_grad_hh")
    errors = judge(ours, theirs, exact, dtype, names, hard)
    return errors, hard + problems


# ------------------------------------------------------------------------------------------------
# benchmark
# ------------------------------------------------------------------------------------------------

BENCH_SIZES = ((50, 32, 128, 256), (100, 64, 512, 512), (20, 1, 256, 256), (200, 16, 64, 128),
               (100, 256, 1024, 1024))
HOST_BENCH_SIZES = ((5, 4, 8, 16), (3, 2, 4, 8))
# precision mode -> (engine dtype, TF32 allowed)
PRECISIONS = {"fp32": ("float32", False), "tf32": ("float32", True), "fp16": ("half", False),
              "bf16": ("bfloat16", False)}
# forward GEMM FLOPs per step and unit: docs/performance.md §1.1 (backward = 2x forward)
FLOPS_PER = {"lstm": 8, "gru": 6, "rnn_tanh": 2, "rnn_relu": 2}
# sanity bound on ours vs torch at benchmark sizes (relative, max(1, max|torch|))
BENCH_DIFF = {"fp32": 1e-3, "tf32": 5e-2, "fp16": 5e-2, "bf16": 2e-1}


def forward_flops(mode, T, B, I, H):
    return FLOPS_PER[mode] * B * H * (I + H) * T


class Timer:
    """Median wall time of fn() in milliseconds: CUDA events on one stream on a GPU (every call
    of fn() must enqueue its work on that stream), perf_counter on the CPU."""

    def __init__(self, torch, stream=None):
        self.torch, self.stream = torch, stream

    def sync(self):
        if self.stream is not None:
            self.stream.synchronize()

    def median_ms(self, fn, warmup, repeat):
        for _ in range(warmup):
            fn()
        self.sync()
        if self.stream is None:
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t0))
            return statistics.median(times)
        ev = self.torch.cuda.Event
        pairs = [(ev(enable_timing=True), ev(enable_timing=True)) for _ in range(repeat)]
        for start, end in pairs:
            start.record(self.stream)
            fn()
            end.record(self.stream)
        self.sync()
        return statistics.median(s.elapsed_time(e) for s, e in pairs)


class BenchProblem:
    """Shared tensors of one (mode, T, B, I, H, dtype) benchmark: a torch.nn module (uni, one
    layer, time-major) with its default init, inputs and cotangents, all on `device`."""

    def __init__(self, torch, device, mode, T, B, I, H, dtype, seed=0):
        self.torch, self.device, self.mode, self.dtype = torch, device, mode, dtype
        self.T, self.B, self.I, self.H = T, B, I, H
        self.cfg = R.Cfg(mode, 1, H, I)
        td = torch_dtype(torch, dtype)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        torch.manual_seed(seed)
        self.module = make_torch_rnn(torch, self.cfg, False).to(device=device, dtype=td)
        u = lambda *s: (torch.rand(*s, generator=gen, dtype=torch.float64) * 2 - 1).to(  # noqa
            device=device, dtype=td)
        self.x = u(T, B, I)
        self.h0 = u(1, B, H)
        self.c0 = u(1, B, H) if mode == "lstm" else None
        self.dy, self.dh = u(T, B, H), u(1, B, H)
        self.dc = u(1, B, H) if mode == "lstm" else None
        self.names = torch_param_names(self.cfg)
        self.params = dict(self.module.named_parameters())

    def flops(self):
        return forward_flops(self.mode, self.T, self.B, self.I, self.H)

    # ---- torch ----
    def torch_forward(self):
        x = self.x.requires_grad_()
        h0 = self.h0.requires_grad_()
        if self.mode == "lstm":
            c0 = self.c0.requires_grad_()
            y, (hn, cn) = self.module(x, (h0, c0))
            return [y, hn, cn], [x, h0, c0]
        y, hn = self.module(x, h0)
        return [y, hn], [x, h0]

    def torch_forward_backward(self):
        outs, leaves = self.torch_forward()
        cots = [self.dy, self.dh] + ([self.dc] if self.mode == "lstm" else [])
        grads = self.torch.autograd.grad(outs, leaves + [self.params[n] for n in self.names],
                                         cots)
        return outs, grads

    # ---- ours: CudnnRNNV3 ----
    def cudnn_rnn(self, module, alloc):
        """(forward(), backward(), results()) closures over device buffers for rnn_forward /
        rnn_backward with torch's weights."""
        torch, T, B, I, H = self.torch, self.T, self.B, self.I, self.H
        lstm = self.mode == "lstm"
        with torch.no_grad():
            params = torch_params_flat(torch, self.cfg, self.params).contiguous()
        kw = self.engine_kwargs()
        d = self.dtype
        out = alloc.empty((T, B, H), d)
        out_h = alloc.empty((1, B, H), d)
        out_c = alloc.empty((1, B, H), d) if lstm else None
        ws = alloc.empty_bytes(module.rnn_workspace_bytes(d, **kw, dropout=0.0))
        fs = alloc.scratch(module.rnn_forward_scratch_bytes(alloc.backend, d, **kw, dropout=0.0))
        dx, dh0 = alloc.empty((T, B, I), d), alloc.empty((1, B, H), d)
        dc0 = alloc.empty((1, B, H), d) if lstm else None
        dp = alloc.empty(tuple(params.shape), d)
        bs = alloc.scratch(module.rnn_backward_scratch_bytes(alloc.backend, d, **kw))
        p = alloc.ptr
        c0 = self.c0.detach() if lstm else None
        fwd_args = dict(kw, dropout=0.0, seed=0, call=0, input=p(self.x), input_h=p(self.h0),
                        input_c=p(c0), params=p(params), output=p(out), output_h=p(out_h),
                        output_c=p(out_c), workspace=p(ws), scratch=p(fs))
        bwd_args = dict(kw, dropout=0.0, input=p(self.x), input_h=p(self.h0), input_c=p(c0),
                        params=p(params), output_backprop=p(self.dy),
                        output_h_backprop=p(self.dh), output_c_backprop=p(self.dc),
                        reserve=p(ws), input_backprop=p(dx), input_h_backprop=p(dh0),
                        input_c_backprop=p(dc0), params_backprop=p(dp), scratch=p(bs))
        keep = (params, out, out_h, out_c, ws, fs, dx, dh0, dc0, dp, bs)

        def forward():
            module.rnn_forward(alloc.backend, d, alloc.stream, **fwd_args)

        def backward():
            module.rnn_backward(alloc.backend, d, alloc.stream, **bwd_args)

        def results():
            _ = keep
            return dict(output=out, output_h=out_h, output_c=out_c, input_backprop=dx,
                        params_backprop=dp)

        return forward, backward, results

    def engine_kwargs(self):
        """The CudnnRNN engine's model and run fields (uni, one layer, time-major, full
        lengths)."""
        return cudnn_rnn_checks.Case(self.mode, 1, self.H, self.I, "unidirectional", time=self.T,
                               batch=self.B).model_kwargs()

    # ---- ours: BlockLSTMV2 ----
    def block_lstm(self, module, alloc):
        torch, T, B, I, H = self.torch, self.T, self.B, self.I, self.H
        assert self.mode == "lstm"
        P = self.params
        with torch.no_grad():
            w = torch.cat([P["weight_ih_l0"].t(), P["weight_hh_l0"].t()], 0).contiguous()
            b = (P["bias_ih_l0"] + P["bias_hh_l0"]).contiguous()
            h_grad = self.dy.clone()
            h_grad[T - 1] += self.dh[0]
            cs_grad = torch.zeros_like(self.dy)
            cs_grad[T - 1] = self.dc[0]
        d = self.dtype
        zeros = torch.zeros(H, dtype=w.dtype, device=w.device)
        acts = {k: alloc.empty((T, B, H), d) for k in block_lstm_checks.OUTPUTS}
        attrs = ("IFCO", 0.0, 0.0, False)
        fs = alloc.scratch(module.lstm_forward_scratch_bytes(alloc.backend, d, T, B, I, H,
                                                             *attrs, T))
        bs = alloc.scratch(module.lstm_backward_scratch_bytes(alloc.backend, d, T, B, I, H,
                                                              "IFCO", False, T))
        grads = dict(x_grad=alloc.empty((T, B, I), d), cs_prev_grad=alloc.empty((B, H), d),
                     h_prev_grad=alloc.empty((B, H), d), w_grad=alloc.empty((I + H, 4 * H), d),
                     wci_grad=alloc.empty((H,), d), wcf_grad=alloc.empty((H,), d),
                     wco_grad=alloc.empty((H,), d), b_grad=alloc.empty((4 * H,), d))
        p = alloc.ptr
        ins = dict(x=p(self.x), cs_prev=p(self.c0), h_prev=p(self.h0), w=p(w), wci=p(zeros),
                   wcf=p(zeros), wco=p(zeros), b=p(b))
        act_ptrs = {k: p(v) for k, v in acts.items()}
        fwd_args = dict(ins, **act_ptrs, scratch=p(fs))
        bwd_args = dict(ins, **act_ptrs, cs_grad=p(cs_grad), h_grad=p(h_grad),
                        **{k: p(v) for k, v in grads.items()}, scratch=p(bs))
        keep = (w, b, h_grad, cs_grad, zeros, acts, fs, bs, grads)

        def forward():
            module.lstm_forward(alloc.backend, d, alloc.stream, T, B, I, H, *attrs, T,
                                **fwd_args)

        def backward():
            module.lstm_backward(alloc.backend, d, alloc.stream, T, B, I, H, "IFCO", False, T,
                                 **bwd_args)

        def results():
            _ = keep
            return dict(output=acts["h"], input_backprop=grads["x_grad"])

        return forward, backward, results


def _bench_diff(torch, ours, outs, grads, problem, block):
    """Largest relative difference of our output, dx and (CudnnRNN) params gradient vs torch."""
    def rel(a, b):
        a, b = a.detach().double(), b.detach().double()
        if not bool(torch.isfinite(a).all()):
            return float("inf")
        return float((a - b).abs().max()) / max(1.0, float(b.abs().max()))

    diffs = [rel(ours["output"].view(outs[0].shape), outs[0]),
             rel(ours["input_backprop"].view(grads[0].shape), grads[0])]
    if not block:
        n = len(outs)
        named = dict(zip(problem.names, grads[n:]))
        flat = torch_params_flat(torch, problem.cfg, named)
        diffs.append(rel(ours["params_backprop"].reshape(-1), flat))
    return max(diffs)


def bench_size(torch, module, alloc, timer, device, precision, mode, T, B, I, H, warmup, repeat,
               log=print):
    """Benchmark rows (dicts) for one model and size: torch.nn, our CudnnRNNV3 and, for LSTM,
    our BlockLSTMV2; times in ms (median), GFLOP/s by the convention of docs/performance.md §1.1."""
    dtype = PRECISIONS[precision][0]
    prob = BenchProblem(torch, device, mode, T, B, I, H, dtype)
    flops = prob.flops()
    t_fwd = timer.median_ms(prob.torch_forward, warmup, repeat)
    t_fb = timer.median_ms(prob.torch_forward_backward, warmup, repeat)
    outs, grads = prob.torch_forward_backward()
    engines = [("CudnnRNNV3 " + mode.upper(), False)]
    if mode == "lstm":
        engines.append(("BlockLSTMV2", True))
    rows = []
    for name, block in engines:
        fwd, bwd, results = (prob.block_lstm if block else prob.cudnn_rnn)(module, alloc)
        fwd()  # the backward needs a forward's reserve space / activations
        o_fwd = timer.median_ms(fwd, warmup, repeat)

        def both():
            fwd()
            bwd()

        o_fb = timer.median_ms(both, warmup, repeat)
        # CudnnRNN's forward recurrence: persistent (small batches) or per step; when
        # persistent, the per-step forward too, for comparison (the engine's test-only switch)
        path, per_step_fwd = None, None
        if not block:
            path = module.rnn_forward_path(alloc.backend, dtype, **prob.engine_kwargs())["path"]
            if path == "persistent":
                with mock.patch.dict(os.environ, {cudnn_rnn_checks.PERSISTENT_ENV: "0"}):
                    per_step_fwd = timer.median_ms(fwd, warmup, repeat)
        both()
        timer.sync()
        diff = _bench_diff(torch, results(), outs, grads, prob, block)
        row = dict(precision=precision, engine=name, mode=mode, T=T, B=B, I=I, H=H,
                   ours_fwd_ms=o_fwd, ours_fb_ms=o_fb, torch_fwd_ms=t_fwd, torch_fb_ms=t_fb,
                   ours_fwd_gflops=flops / o_fwd / 1e6, ours_fb_gflops=3 * flops / o_fb / 1e6,
                   torch_fwd_gflops=flops / t_fwd / 1e6, torch_fb_gflops=3 * flops / t_fb / 1e6,
                   ratio_fwd=t_fwd / o_fwd, ratio_fb=t_fb / o_fb, max_rel_diff=diff,
                   diff_ok=bool(diff <= BENCH_DIFF[precision]), path=path,
                   per_step_fwd_ms=per_step_fwd)
        rows.append(row)
        log(format_bench_row(row))
    return rows


BENCH_HEADER = ("%-5s %-16s %4s %4s %5s %5s | %9s %9s %8s | %9s %9s %8s | %6s %6s | %s" % (
    "prec", "engine", "T", "B", "I", "H", "fwd ms", "f+b ms", "GFLOP/s", "torch fwd", "torch f+b",
    "GFLOP/s", "fwd x", "f+b x", "max rel diff"))


def format_bench_row(r):
    """One table line; GFLOP/s of fwd+bwd; 'x' = torch time / our time (> 1: we are faster)."""
    return "%-5s %-16s %4d %4d %5d %5d | %9.3f %9.3f %8.1f | %9.3f %9.3f %8.1f | %6.2f %6.2f | %.2g%s" % (
        r["precision"], r["engine"], r["T"], r["B"], r["I"], r["H"], r["ours_fwd_ms"],
        r["ours_fb_ms"], r["ours_fb_gflops"], r["torch_fwd_ms"], r["torch_fb_ms"],
        r["torch_fb_gflops"], r["ratio_fwd"], r["ratio_fb"], r["max_rel_diff"],
        "" if r["diff_ok"] else "  <-- too large") + (
        "  persistent fwd (per step: %.3f ms)" % r["per_step_fwd_ms"]
        if r.get("path") == "persistent" else "")
