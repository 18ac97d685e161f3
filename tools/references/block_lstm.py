"""Float64 NumPy reference for the LSTM block ops, written from their specification,
docs/block_lstm.md.

Conventions (docs/block_lstm.md §1): W is [I+H, 4H] (rows 0..I-1 multiply x, the rest h_prev); the
4H axis is split into four H-wide blocks whose order is the *layout*: "ICFO" (LSTMBlockCell,
BlockLSTM) or "IFCO" (BlockLSTMV2). Sequence tensors are time-major [T, B, *].

Every function takes and returns float64 arrays. Outputs are dicts keyed by the op's output names.
"""

import numpy as np

OUTPUT_NAMES = ("i", "cs", "f", "o", "ci", "co", "h")
SEQ_GRAD_NAMES = (
    "x_grad", "cs_prev_grad", "h_prev_grad", "w_grad", "wci_grad", "wcf_grad", "wco_grad", "b_grad",
)
CELL_GRAD_NAMES = ("cs_prev_grad", "dicfo", "wci_grad", "wcf_grad", "wco_grad")

# Position of each gate's H-wide block on the 4H axis (docs/block_lstm.md §1.2).
LAYOUTS = {
    "ICFO": {"i": 0, "c": 1, "f": 2, "o": 3},
    "IFCO": {"i": 0, "f": 1, "c": 2, "o": 3},
}


def random_inputs(rng, B, I, H, T=None, scale=1.0):
    """Random valid float64 inputs of the LSTM block ops (not yet rounded to a dtype): x is
    [B, I] when T is None (cell ops) and [T, B, I] otherwise. Gate pre-activations have a
    standard deviation of about `scale`. The CPU tests and the GPU self-test both draw from here.
    """
    K = I + H
    ws = 3.0 * scale / np.sqrt(max(K, 1))
    return dict(
        x=rng.uniform(-1, 1, (B, I) if T is None else (T, B, I)),
        cs_prev=rng.uniform(-1.5, 1.5, (B, H)),
        h_prev=rng.uniform(-0.9, 0.9, (B, H)),
        w=rng.uniform(-ws, ws, (K, 4 * H)),
        wci=rng.uniform(-0.6, 0.6, (H,)),
        wcf=rng.uniform(-0.6, 0.6, (H,)),
        wco=rng.uniform(-0.6, 0.6, (H,)),
        b=rng.uniform(-1, 1, (4 * H,)) * scale,
    )


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def split_gates(g, layout):
    """[.., 4H] -> dict gate -> [.., H] following `layout`."""
    H = g.shape[-1] // 4
    return {k: g[..., p * H:(p + 1) * H] for k, p in LAYOUTS[layout].items()}


def join_gates(blocks, layout):
    """dict gate -> [.., H] -> [.., 4H] following `layout`."""
    order = sorted(LAYOUTS[layout], key=LAYOUTS[layout].get)
    return np.concatenate([blocks[k] for k in order], axis=-1)


def icfo_to_ifco(a):
    """Column permutation of the 4H axis (its own inverse)."""
    return join_gates(split_gates(a, "ICFO"), "IFCO")


# --------------------------------------------------------------------------------------------
# docs/block_lstm.md §4: one cell step
# --------------------------------------------------------------------------------------------

def lstm_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias=1.0, cell_clip=3.0,
              use_peephole=False, layout="ICFO"):
    """Forward of one step. Returns dict i, cs, f, o, ci, co, h (each [B, H])."""
    xh = np.concatenate([x, h_prev], axis=1)
    g = split_gates(xh @ w + b, layout)
    pi = cs_prev * wci if use_peephole else 0.0
    pf = cs_prev * wcf if use_peephole else 0.0
    i = sigmoid(g["i"] + pi)
    ci = np.tanh(g["c"])
    f = sigmoid(g["f"] + forget_bias + pf)
    cs = i * ci + f * cs_prev
    if cell_clip > 0:
        cs = np.clip(cs, -cell_clip, cell_clip)
    co = np.tanh(cs)
    po = cs * wco if use_peephole else 0.0
    o = sigmoid(g["o"] + po)
    h = o * co
    return dict(i=i, cs=cs, f=f, o=o, ci=ci, co=co, h=h)


# --------------------------------------------------------------------------------------------
# docs/block_lstm.md §6.1: one cell step backward (element-wise part)
# --------------------------------------------------------------------------------------------

def lstm_cell_grad(cs_prev, i, cs, f, o, ci, co, cs_grad, h_grad, wci, wcf, wco,
                   use_peephole, layout="ICFO", i_grad=0.0, f_grad=0.0, o_grad=0.0,
                   ci_grad=0.0, co_grad=0.0):
    """What LSTMBlockCellGrad computes (docs/block_lstm.md §6.1), from stored activations.

    cs_grad / h_grad: total dL/dcs, dL/dh. The optional i_grad .. co_grad are direct loss
    gradients on the other outputs (zero for the op; used for the all-outputs true gradient).
    Clipping is straight-through. Returns dict cs_prev_grad, dicfo ([B, 4H] in `layout`),
    wci_grad, wcf_grad, wco_grad.
    """
    d_o = o * (1 - o) * (h_grad * co + o_grad)
    d_cs = (1 - co * co) * (h_grad * o + co_grad) + cs_grad
    if use_peephole:
        d_cs = d_cs + d_o * wco
    d_ci = (1 - ci * ci) * (d_cs * i + ci_grad)
    d_f = f * (1 - f) * (d_cs * cs_prev + f_grad)
    d_i = i * (1 - i) * (d_cs * ci + i_grad)
    dgates = join_gates(dict(i=d_i, c=d_ci, f=d_f, o=d_o), layout)
    cs_prev_grad = d_cs * f
    if use_peephole:
        cs_prev_grad = cs_prev_grad + d_i * wci + d_f * wcf
        wci_grad = (d_i * cs_prev).sum(axis=0)
        wcf_grad = (d_f * cs_prev).sum(axis=0)
        wco_grad = (d_o * cs).sum(axis=0)
    else:
        wci_grad = np.zeros(np.shape(wci))
        wcf_grad = np.zeros(np.shape(wcf))
        wco_grad = np.zeros(np.shape(wco))
    return dict(cs_prev_grad=cs_prev_grad, dicfo=dgates, wci_grad=wci_grad,
                wcf_grad=wcf_grad, wco_grad=wco_grad)


def cell_input_grads(x, h_prev, w, dgates):
    """docs/block_lstm.md §6.3: gradients of the inputs that enter through
    G = [x, h_prev] . W + b."""
    I = x.shape[1]
    xh = np.concatenate([x, h_prev], axis=1)
    xh_grad = dgates @ w.T
    return dict(x_grad=xh_grad[:, :I], h_prev_grad=xh_grad[:, I:], w_grad=xh.T @ dgates,
                b_grad=dgates.sum(axis=0))


def lstm_cell_vjp(x, cs_prev, h_prev, w, wci, wcf, wco, b, out_grads, forget_bias=1.0,
                  cell_clip=3.0, use_peephole=False, layout="ICFO"):
    """True (straight-through-clip) gradient of sum_k <out_grads[k], out_k> for one cell.

    out_grads: dict with any of i, cs, f, o, ci, co, h ([B, H]); missing ones are zero.
    Returns dict x, cs_prev, h_prev, w, wci, wcf, wco, b -> gradient.
    """
    out = lstm_cell(x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias, cell_clip,
                    use_peephole, layout)
    zero = np.zeros_like(out["h"])
    g = {k: out_grads.get(k, zero) for k in OUTPUT_NAMES}
    e = lstm_cell_grad(cs_prev, out["i"], out["cs"], out["f"], out["o"], out["ci"], out["co"],
                       g["cs"], g["h"], wci, wcf, wco, use_peephole, layout, i_grad=g["i"],
                       f_grad=g["f"], o_grad=g["o"], ci_grad=g["ci"], co_grad=g["co"])
    m = cell_input_grads(x, h_prev, w, e["dicfo"])
    return dict(x=m["x_grad"], cs_prev=e["cs_prev_grad"], h_prev=m["h_prev_grad"], w=m["w_grad"],
                wci=e["wci_grad"], wcf=e["wcf_grad"], wco=e["wco_grad"], b=m["b_grad"])


# --------------------------------------------------------------------------------------------
# docs/block_lstm.md §5: sequence forward
# --------------------------------------------------------------------------------------------

def block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias=1.0,
               cell_clip=3.0, use_peephole=False, layout="ICFO"):
    """BlockLSTM (layout ICFO, forget_bias attr) / BlockLSTMV2 (IFCO, forget_bias=0).

    All seven outputs are [T, B, H] and exactly zero for t >= seq_len_max.
    """
    T, B = x.shape[0], x.shape[1]
    H = cs_prev.shape[1]
    out = {k: np.zeros((T, B, H)) for k in OUTPUT_NAMES}
    c, h = cs_prev, h_prev
    for t in range(int(seq_len_max)):
        step = lstm_cell(x[t], c, h, w, wci, wcf, wco, b, forget_bias, cell_clip,
                         use_peephole, layout)
        for k in OUTPUT_NAMES:
            out[k][t] = step[k]
        c, h = step["cs"], step["h"]
    return out


# --------------------------------------------------------------------------------------------
# docs/block_lstm.md §6.4: sequence backward
# --------------------------------------------------------------------------------------------

def block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, h,
                    cs_grad, h_grad, use_peephole, layout="ICFO", i_grad=None, f_grad=None,
                    o_grad=None, ci_grad=None, co_grad=None):
    """BlockLSTMGrad (ICFO) / BlockLSTMGradV2 (IFCO) from stored activations
    (docs/block_lstm.md §6.4).

    Only t < seq_len_max is read from the activations and gradients. The optional i_grad ..
    co_grad ([T, B, H]) are direct loss gradients on those outputs (not an op input; used for
    the true all-outputs gradient). Returns dict x_grad .. b_grad.
    """
    T, B, I = x.shape
    H = w.shape[1] // 4
    x_grad = np.zeros((T, B, I))
    w_grad = np.zeros(w.shape)
    b_grad = np.zeros(b.shape)
    wci_grad, wcf_grad, wco_grad = np.zeros(wci.shape), np.zeros(wcf.shape), np.zeros(wco.shape)
    d_c = np.zeros((B, H))
    d_h = np.zeros((B, H))
    extra = {}
    for t in reversed(range(int(seq_len_max))):
        cp = cs_prev if t == 0 else cs[t - 1]
        hp = h_prev if t == 0 else h[t - 1]
        for name, arr in (("i_grad", i_grad), ("f_grad", f_grad), ("o_grad", o_grad),
                          ("ci_grad", ci_grad), ("co_grad", co_grad)):
            extra[name] = 0.0 if arr is None else arr[t]
        e = lstm_cell_grad(cp, i[t], cs[t], f[t], o[t], ci[t], co[t], d_c + cs_grad[t],
                           d_h + h_grad[t], wci, wcf, wco, use_peephole, layout, **extra)
        dg = e["dicfo"]
        xh_grad = dg @ w.T
        x_grad[t] = xh_grad[:, :I]
        d_h = xh_grad[:, I:]
        w_grad += np.concatenate([x[t], hp], axis=1).T @ dg
        b_grad += dg.sum(axis=0)
        if use_peephole:
            wci_grad += e["wci_grad"]
            wcf_grad += e["wcf_grad"]
            wco_grad += e["wco_grad"]
        d_c = e["cs_prev_grad"]
    return dict(x_grad=x_grad, cs_prev_grad=d_c, h_prev_grad=d_h, w_grad=w_grad,
                wci_grad=wci_grad, wcf_grad=wcf_grad, wco_grad=wco_grad, b_grad=b_grad)


def block_lstm_vjp(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, out_grads,
                   forget_bias=1.0, cell_clip=3.0, use_peephole=False, layout="ICFO"):
    """True gradient of sum_k <out_grads[k], out_k> through the sequence op (all 7 outputs).

    Outputs at t >= seq_len_max are constant zero, so gradients there do not contribute.
    Returns dict x, cs_prev, h_prev, w, wci, wcf, wco, b -> gradient.
    """
    out = block_lstm(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b, forget_bias,
                     cell_clip, use_peephole, layout)
    zero = np.zeros_like(out["h"])
    g = {k: out_grads.get(k, zero) for k in OUTPUT_NAMES}
    r = block_lstm_grad(seq_len_max, x, cs_prev, h_prev, w, wci, wcf, wco, b,
                        *[out[k] for k in OUTPUT_NAMES], g["cs"], g["h"], use_peephole, layout,
                        i_grad=g["i"], f_grad=g["f"], o_grad=g["o"], ci_grad=g["ci"],
                        co_grad=g["co"])
    return {k[:-5]: v for k, v in r.items()}


def numeric_grad(fn, args, name, delta=1e-6):
    """Central finite difference of the scalar fn(**args) with respect to args[name]."""
    base = np.array(args[name], dtype=np.float64)
    grad = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += delta
        minus[idx] -= delta
        grad[idx] = (fn(**dict(args, **{name: plus})) - fn(**dict(args, **{name: minus}))) / (
            2 * delta)
    return grad
