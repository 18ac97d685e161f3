"""Float64 NumPy reference for TensorFlow's CudnnRNN op family, written from its specification,
docs/cudnn_rnn.md.

    cfg = Cfg("lstm", num_layers=2, num_units=4, input_size=3, direction="bidirectional")
    weights, biases = random_canonical(rng, cfg)        # canonical lists (docs/cudnn_rnn.md §6.1)
    params = canonical_to_params(cfg, weights, biases)  # opaque buffer (docs/cudnn_rnn.md §6.2)
    out = forward(cfg, x, h0, c0, params, seq_lengths=lens, time_major=False)
    grads = backward(cfg, x, h0, c0, params, dy, dh, dc, seq_lengths=lens, time_major=False)

Layouts are TF's (docs/cudnn_rnn.md §3): time-major input [T, B, I], output [T, B, D*Hr], states
[L*D, B, n]; batch-major input [B, T, I], output [B, T, D*Hr], states *labelled* [B, L*D, n] whose
raw memory is read (and written) as [L*D, B, n] (TF's reinterpretation quirk). Non-LSTM modes never
read input_c and return output_c / input_c_backprop as the scalar 0.
"""

import dataclasses
import math

import numpy as np

GATES = {"rnn_relu": 1, "rnn_tanh": 1, "gru": 3, "lstm": 4}


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _erf(z):
    return np.vectorize(math.erf)(z)


# Keras' activations as functions of the pre-activation a: (f(a), f'(a)), with TensorFlow's
# gradient conventions at the kinks (relu'(0) = 0, elu'(0) = 1, a clip's slope at its bounds).
ACTIVATIONS = {
    "tanh": (np.tanh, lambda a: 1.0 - np.tanh(a) ** 2),
    "sigmoid": (_sigmoid, lambda a: _sigmoid(a) * (1.0 - _sigmoid(a))),
    "relu": (lambda a: np.maximum(a, 0.0), lambda a: (a > 0).astype(np.float64)),
    "hard_sigmoid": (lambda a: np.clip(a + 3.0, 0.0, 6.0) / 6.0,
                     lambda a: ((a + 3.0 > 0) & (a + 3.0 < 6.0)) / 6.0),
    "hard_sigmoid_keras2": (lambda a: np.clip(0.2 * a + 0.5, 0.0, 1.0),
                            lambda a: ((0.2 * a + 0.5 >= 0) & (0.2 * a + 0.5 <= 1)) * 0.2),
    "linear": (lambda a: a, np.ones_like),
    "elu": (lambda a: np.where(a < 0, np.expm1(np.minimum(a, 0.0)), a),
            lambda a: np.where(a < 0, np.exp(np.minimum(a, 0.0)), 1.0)),
    "softsign": (lambda a: a / (1.0 + np.abs(a)), lambda a: 1.0 / (1.0 + np.abs(a)) ** 2),
    "silu": (lambda a: a * _sigmoid(a),
             lambda a: _sigmoid(a) * (1.0 + a * (1.0 - _sigmoid(a)))),
    "gelu": (lambda a: 0.5 * a * (1.0 + _erf(a / math.sqrt(2.0))),
             lambda a: 0.5 * (1.0 + _erf(a / math.sqrt(2.0)))
             + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)),
}
MODES = tuple(GATES)
DIRECTIONS = {"unidirectional": 1, "bidirectional": 2}
INPUT_MODES = ("linear_input", "skip_input", "auto_select")


# ----------------------------------------------------------------------------------------------
# configuration and parameter layout (docs/cudnn_rnn.md §6)
# ----------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Cfg:
    rnn_mode: str = "lstm"
    num_layers: int = 1
    num_units: int = 1          # H: cell size (size of c and of every gate)
    input_size: int = 1         # I
    direction: str = "unidirectional"
    input_mode: str = "linear_input"
    num_proj: int = 0           # P; active only for lstm with 0 < P < H
    # Keras' activations (the *Keras ops, docs/cudnn_rnn.md §4.7): "" is cuDNN's
    activation: str = ""
    recurrent_activation: str = ""
    # GRU only: False resets before the candidate's recurrent product, (r ⊙ h)·R_hᵀ + b_Rh
    # (Keras' reset_after=False; docs/cudnn_rnn.md §4.8)
    reset_after: bool = True

    def __post_init__(self):
        assert self.rnn_mode in GATES, self.rnn_mode
        assert self.direction in DIRECTIONS, self.direction
        assert self.input_mode in INPUT_MODES, self.input_mode
        if self.num_proj:
            assert self.rnn_mode == "lstm" and 0 < self.num_proj < self.num_units, self
            assert self.input_mode == "linear_input", "projection with skip/auto input"
        if self.skip:
            assert self.input_size == self.num_units, "skip_input needs input_size == num_units"
        assert self.activation in ("",) + tuple(ACTIVATIONS), self.activation
        assert self.recurrent_activation in ("",) + tuple(ACTIVATIONS), self
        assert self.reset_after or self.rnn_mode == "gru", self

    @property
    def act(self):
        """(f, f') of the candidate / output activation (the plain RNN's one)."""
        return ACTIVATIONS[self.activation or ("relu" if self.rnn_mode == "rnn_relu" else "tanh")]

    @property
    def rec(self):
        """(f, f') of the gates' activation."""
        return ACTIVATIONS[self.recurrent_activation or "sigmoid"]

    G = property(lambda self: GATES[self.rnn_mode])
    D = property(lambda self: DIRECTIONS[self.direction])
    H = property(lambda self: self.num_units)
    I = property(lambda self: self.input_size)  # noqa: E743
    L = property(lambda self: self.num_layers)
    proj = property(lambda self: self.num_proj > 0)
    Hr = property(lambda self: self.num_proj if self.proj else self.num_units)
    is_lstm = property(lambda self: self.rnn_mode == "lstm")

    @property
    def skip(self):
        """Layer 0 uses the identity instead of W (skip_input, or auto_select with I == H)."""
        return self.input_mode == "skip_input" or (
            self.input_mode == "auto_select" and self.input_size == self.num_units)

    def layer_input(self, l):
        """Width of layer l's input (the logical one; skip mode still sees I == H values)."""
        return self.I if l == 0 else self.D * self.Hr

    def w_input(self, l):
        """Column count of layer l's W matrices in the buffer (0 in skip mode's layer 0)."""
        return 0 if (l == 0 and self.skip) else self.layer_input(l)


def params_size(rnn_mode, num_layers, num_units, input_size, direction="unidirectional",
                input_mode="linear_input", num_proj=0):
    """Spec 5.3's closed formula, in elements."""
    G, D, H = GATES[rnn_mode], DIRECTIONS[direction], num_units
    proj = rnn_mode == "lstm" and 0 < num_proj < num_units
    Hr = num_proj if proj else H
    skip = input_mode == "skip_input" or (input_mode == "auto_select" and input_size == num_units)
    total = 0
    for l in range(num_layers):
        in_l = (0 if skip else input_size) if l == 0 else D * Hr
        total += D * (G * H * (in_l + Hr) + (num_proj * H if proj else 0) + 2 * G * H)
    return total


def cfg_params_size(cfg):
    return params_size(cfg.rnn_mode, cfg.L, cfg.H, cfg.I, cfg.direction, cfg.input_mode,
                       cfg.num_proj)


def canonical_shapes(cfg):
    """(weight shapes, bias shapes) in canonical order (docs/cudnn_rnn.md §6.1): for p = l*D + d
    ascending, W_0..W_{G-1} [H, in_l], R_0..R_{G-1} [H, Hr], (projection) Pmat [P, H]; biases
    bW_0..bW_{G-1}, bR_0..bR_{G-1}, each [H]."""
    weights, biases = [], []
    for l in range(cfg.L):
        for _ in range(cfg.D):
            weights += [(cfg.H, cfg.w_input(l))] * cfg.G + [(cfg.H, cfg.Hr)] * cfg.G
            if cfg.proj:
                weights.append((cfg.num_proj, cfg.H))
            biases += [(cfg.H,)] * (2 * cfg.G)
    return weights, biases


def canonical_to_params(cfg, weights, biases):
    """Opaque buffer (docs/cudnn_rnn.md §6.2): every matrix of every pseudo-layer, row-major, in
    canonical order, then every bias in canonical order. Skip-input layer-0 W matrices are
    [H, 0]."""
    wshapes, bshapes = canonical_shapes(cfg)
    assert [np.shape(w) for w in weights] == wshapes, ([np.shape(w) for w in weights], wshapes)
    assert [np.shape(b) for b in biases] == bshapes
    parts = [np.asarray(a, np.float64).reshape(-1) for a in list(weights) + list(biases)]
    return np.concatenate(parts) if parts else np.zeros(0)


def params_to_canonical(cfg, params):
    """Inverse of canonical_to_params: (weights, biases) lists of arrays."""
    params = np.asarray(params, np.float64)
    assert params.shape == (cfg_params_size(cfg),), (params.shape, cfg_params_size(cfg))
    out, offset = [], 0
    wshapes, bshapes = canonical_shapes(cfg)
    for shape in wshapes + bshapes:
        n = int(np.prod(shape))
        out.append(params[offset:offset + n].reshape(shape))
        offset += n
    return out[:len(wshapes)], out[len(wshapes):]


def random_canonical(rng, cfg, scale=1.0):
    """Random weights (~ U(-a, a), a = scale*1.5/sqrt(fan_in)) and biases (~ U(-0.5, 0.5))."""
    wshapes, bshapes = canonical_shapes(cfg)
    weights = []
    for shape in wshapes:
        a = scale * 1.5 / np.sqrt(max(shape[1], 1))
        weights.append(rng.uniform(-a, a, shape))
    biases = [rng.uniform(-0.5, 0.5, shape) * scale for shape in bshapes]
    return weights, biases


def unpack(cfg, params):
    """Per pseudo-layer dicts W [G, H, in] (None in skip mode's layer 0), R [G, H, Hr],
    bW [G, H], bR [G, H], P [P, H] or None."""
    weights, biases = params_to_canonical(cfg, params)
    per_w = 2 * cfg.G + (1 if cfg.proj else 0)
    layers = []
    for p in range(cfg.L * cfg.D):
        w = weights[p * per_w:(p + 1) * per_w]
        b = biases[p * 2 * cfg.G:(p + 1) * 2 * cfg.G]
        layers.append(dict(
            W=None if (p < cfg.D and cfg.skip) else np.stack(w[:cfg.G]),
            R=np.stack(w[cfg.G:2 * cfg.G]),
            P=w[2 * cfg.G] if cfg.proj else None,
            bW=np.stack(b[:cfg.G]),
            bR=np.stack(b[cfg.G:]),
        ))
    return layers


def pack(cfg, layers):
    """Inverse of unpack (used for gradients)."""
    weights, biases = [], []
    for p, lay in enumerate(layers):
        if lay["W"] is None:
            weights += [np.zeros((cfg.H, 0))] * cfg.G
        else:
            weights += list(lay["W"])
        weights += list(lay["R"])
        if cfg.proj:
            weights.append(lay["P"])
        biases += list(lay["bW"]) + list(lay["bR"])
    return canonical_to_params(cfg, weights, biases)


# ----------------------------------------------------------------------------------------------
# Keras 3 weight mappings (docs/cudnn_rnn.md §6.5)
# ----------------------------------------------------------------------------------------------

def keras_canonical(rnn_mode, kernel, recurrent_kernel, bias):
    """A Keras RNN layer's kernel [I, G*H], recurrent_kernel [H, G*H] and bias ([G*H]: b_R with
    b_W = 0, as Keras' LSTM and SimpleRNN; [2, G*H]: b_W, b_R, as GRU(reset_after=True)) ->
    one pseudo-layer's canonical (weights, biases). Keras' GRU gates z, r, h are cuDNN's u, r, h:
    the first two swap; every other mode keeps its order (LSTM i, f, c, o)."""
    H = recurrent_kernel.shape[0]
    # cuDNN gate g is Keras' gate order[g]
    order = (1, 0, 2) if rnn_mode == "gru" else tuple(range(GATES[rnn_mode]))
    bias_w, bias_r = (np.zeros_like(bias), bias) if bias.ndim == 1 else (bias[0], bias[1])
    W = [kernel[:, k * H:(k + 1) * H].T for k in order]
    R = [recurrent_kernel[:, k * H:(k + 1) * H].T for k in order]
    bW = [bias_w[k * H:(k + 1) * H] for k in order]
    bR = [bias_r[k * H:(k + 1) * H] for k in order]
    return W + R, bW + bR


def keras_lstm_canonical(kernel, recurrent_kernel, bias):
    """Keras LSTM kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H] (gates i, f, c, o) ->
    one pseudo-layer's canonical (weights, biases); b_W = 0, b_R = Keras bias."""
    return keras_canonical("lstm", kernel, recurrent_kernel, bias)


def keras_gru_canonical(kernel, recurrent_kernel, bias):
    """Keras GRU(reset_after=True): kernel [I, 3H], recurrent_kernel [H, 3H], bias [2, 3H] in
    gate order z, r, h -> cuDNN order r, u(=z), h; b_W = bias[0], b_R = bias[1]."""
    return keras_canonical("gru", kernel, recurrent_kernel, bias)


def keras_lstm_to_params(kernel, recurrent_kernel, bias):
    """Single-layer unidirectional lstm params from Keras LSTM weights (docs/cudnn_rnn.md §6.5)."""
    cfg = Cfg("lstm", 1, recurrent_kernel.shape[0], kernel.shape[0])
    return canonical_to_params(cfg, *keras_lstm_canonical(kernel, recurrent_kernel, bias))


def keras_gru_to_params(kernel, recurrent_kernel, bias):
    """Single-layer unidirectional gru params from Keras GRU(reset_after=True) weights."""
    cfg = Cfg("gru", 1, recurrent_kernel.shape[0], kernel.shape[0])
    return canonical_to_params(cfg, *keras_gru_canonical(kernel, recurrent_kernel, bias))


def keras_to_params(cfg, per_pseudo_layer):
    """Params from a list (p = l*D + d ascending) of Keras weight lists [kernel,
    recurrent_kernel, bias] of LSTM or GRU(reset_after=True) layers."""
    convert = keras_lstm_canonical if cfg.is_lstm else keras_gru_canonical
    weights, biases = [], []
    for ws in per_pseudo_layer:
        w, b = convert(*ws)
        weights += w
        biases += b
    return canonical_to_params(cfg, weights, biases)


# ----------------------------------------------------------------------------------------------
# forward (docs/cudnn_rnn.md §4, §5)
# ----------------------------------------------------------------------------------------------

def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _gate_operands(v, masks):
    """[G, B, n]: what each gate's product multiplies, v itself or v ⊙ masks[g] (Keras'
    recurrent dropout, docs/keras_layers.md §5)."""
    return v[None] if masks is None else v[None] * masks


def _step(cfg, lay, x, h, c, masks=(None, None)):
    """One cell step for a batch: returns (h_new, c_new, cache). masks: the per-gate operand
    masks (input [G, B, I], recurrent [G, B, Hr]) or None each."""
    xg, hg = _gate_operands(x, masks[0]), _gate_operands(h, masks[1])
    if lay["W"] is None:                        # skip input: identity for every gate
        assert masks[0] is None, "operand masks need linear input"
        ax = x[:, None, :] + lay["bW"][None]
    else:
        ax = np.einsum("gho,gbo->bgh", lay["W"], np.broadcast_to(xg, (cfg.G,) + x.shape))
        ax = ax + lay["bW"][None]
    ah = np.einsum("gho,gbo->bgh", lay["R"], np.broadcast_to(hg, (cfg.G,) + h.shape))
    ah = ah + lay["bR"][None]                    # [B, G, H]
    mode = cfg.rnn_mode
    act, rec = cfg.act[0], cfg.rec[0]
    cache = dict(x=x, h=h, c=c, ax=ax, ah=ah, masks=masks)
    if mode in ("rnn_tanh", "rnn_relu"):
        a = ax[:, 0] + ah[:, 0]
        h_new = act(a)
        cache.update(a=a, h_new=h_new)
        return h_new, c, cache
    if mode == "gru":
        a_r, a_u = ax[:, 0] + ah[:, 0], ax[:, 1] + ah[:, 1]
        r, u = rec(a_r), rec(a_u)
        if cfg.reset_after:
            a_n = ax[:, 2] + r * ah[:, 2]
        else:  # the candidate's product reads r ⊙ h (its operand, masked or not)
            rh = r * np.broadcast_to(hg, (cfg.G,) + h.shape)[2]
            ah[:, 2] = rh @ lay["R"][2].T + lay["bR"][2]
            a_n = ax[:, 2] + ah[:, 2]
            cache.update(rh=rh)
        n = act(a_n)
        h_new = (1.0 - u) * n + u * h
        cache.update(r=r, u=u, n=n, a_r=a_r, a_u=a_u, a_n=a_n)
        return h_new, c, cache
    a = ax + ah                                  # lstm: gates i, f, c~, o
    i, f, g, o = rec(a[:, 0]), rec(a[:, 1]), act(a[:, 2]), rec(a[:, 3])
    c_new = f * c + i * g
    tc = act(c_new)
    m = o * tc
    h_new = m @ lay["P"].T if cfg.proj else m
    cache.update(i=i, f=f, g=g, o=o, tc=tc, m=m, a=a, c_new=c_new)
    return h_new, c_new, cache


def _lengths(seq_lengths, T, B):
    if seq_lengths is None:
        return np.full(B, T, np.int64)
    lens = np.asarray(seq_lengths, np.int64).reshape(-1)
    assert lens.shape == (B,) and np.all((lens >= 0) & (lens <= T)), lens
    return lens


def _to_internal(cfg, x, h0, c0, time_major):
    """TF layouts -> time-major x [T, B, I] and states [L*D, B, n] (raw-memory quirk)."""
    x = np.asarray(x, np.float64)
    if not time_major:
        x = x.transpose(1, 0, 2)
    T, B = x.shape[:2]
    LD = cfg.L * cfg.D
    h0 = np.asarray(h0, np.float64).reshape(LD, B, cfg.Hr)     # reinterpret, never transpose
    c0 = (np.asarray(c0, np.float64).reshape(LD, B, cfg.H) if cfg.is_lstm
          else np.zeros((LD, B, cfg.H)))
    return x, h0, c0


def _state_out(a, time_major):
    """Internal [L*D, B, n] -> TF's shape: the same memory labelled [B, L*D, n] if batch-major."""
    return a if time_major else a.reshape(a.shape[1], a.shape[0], a.shape[2])


def _masks(cfg, input_masks, recurrent_masks):
    """The operand masks as float64 arrays (or None), for a model that takes them."""
    masks = tuple(None if v is None else np.asarray(v, np.float64)
                  for v in (input_masks, recurrent_masks))
    if any(v is not None for v in masks):
        assert cfg.L == 1 and cfg.D == 1 and not cfg.proj and not cfg.skip, cfg
    return masks


def _zoneout(cfg, zoneout_h, zoneout_c, time_major):
    """The zoneout weights of h and c (docs/cudnn_rnn.md §4.9) as time-major float64 arrays
    [T, B, H], scalars or None, for a model that takes them."""
    def weights(w):
        if w is None:
            return None
        w = np.asarray(w, np.float64)
        return w if w.ndim == 0 or time_major else w.transpose(1, 0, 2)
    zoneout = weights(zoneout_h), weights(zoneout_c)
    if any(w is not None for w in zoneout):
        assert cfg.L == 1 and cfg.D == 1 and not cfg.proj and not cfg.skip, cfg
        assert zoneout[1] is None or cfg.is_lstm, cfg
    return zoneout


def _zone(w, t, new, prev):
    """w·new + (1 - w)·prev with step t's weights (w None: new)."""
    if w is None:
        return new
    w = w if w.ndim == 0 else w[t]
    return w * new + (1.0 - w) * prev


def _run(cfg, x, h0, c0, params, lens, dropout_scale, masks=(None, None),
         zoneout=(None, None)):
    """Time-major forward; returns output [T, B, D*Hr], final states, and the caches."""
    T, B = x.shape[:2]
    layers = unpack(cfg, params)
    hT, cT = np.zeros_like(h0), np.zeros_like(c0)
    caches, inputs = [], []
    X = x
    for l in range(cfg.L):
        if l > 0 and dropout_scale is not None:
            X = X * dropout_scale[l - 1]
        inputs.append(X)
        Y = np.zeros((T, B, cfg.D * cfg.Hr))
        for d in range(cfg.D):
            p = l * cfg.D + d
            h, c = h0[p].copy(), c0[p].copy()
            steps = []
            for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
                valid = (t < lens)[:, None]
                h_new, c_new, cache = _step(cfg, layers[p], X[t], h, c, masks)
                # zoneout carries a blend of the new state and the previous one (the cell's h
                # read the un-zoned c)
                h_new, c_new = _zone(zoneout[0], t, h_new, h), _zone(zoneout[1], t, c_new, c)
                cache.update(t=t, valid=valid, zoneout=zoneout)
                steps.append(cache)
                h = np.where(valid, h_new, h)
                c = np.where(valid, c_new, c)
                Y[t, :, d * cfg.Hr:(d + 1) * cfg.Hr] = np.where(valid, h_new, 0.0)
            hT[p], cT[p] = h, c
            caches.append(steps)
        X = Y
    return X, hT, cT, caches, inputs, layers


def _dropout_scale(cfg, dropout, dropout_masks):
    """Per layer l >= 1 multiplier mask/(1 - p) on the [T, B, D*Hr] layer input, or None."""
    if dropout_masks is None:
        return None
    assert len(dropout_masks) == cfg.L - 1
    return [np.asarray(m, np.float64) / (1.0 - dropout) for m in dropout_masks]


def forward(cfg, x, h0, c0, params, seq_lengths=None, time_major=True, dropout=0.0,
            dropout_masks=None, input_masks=None, recurrent_masks=None, zoneout_h=None,
            zoneout_c=None):
    """Returns dict(output, output_h, output_c) in TF's layouts (output_c is the scalar 0 for
    non-LSTM modes). dropout_masks: optional 0/1 arrays [T, B, D*Hr] for layers 1..L-1,
    applied as mask/(1 - dropout) (inverted dropout). input_masks [G, B, I] and
    recurrent_masks [G, B, Hr]: the CudnnRNNV3Keras op's per-gate operand masks (one layer, one
    direction), multiplied as given. zoneout_h / zoneout_c: its zoneout weights of the new h and
    c (a scalar, or [T, B, H] in the input's layout), or None."""
    x, h0, c0 = _to_internal(cfg, x, h0, c0, time_major)
    T, B = x.shape[:2]
    y, hT, cT, *_ = _run(cfg, x, h0, c0, np.asarray(params, np.float64),
                         _lengths(seq_lengths, T, B), _dropout_scale(cfg, dropout, dropout_masks),
                         _masks(cfg, input_masks, recurrent_masks),
                         _zoneout(cfg, zoneout_h, zoneout_c, time_major))
    return dict(
        output=y if time_major else y.transpose(1, 0, 2),
        output_h=_state_out(hT, time_major),
        output_c=_state_out(cT, time_major) if cfg.is_lstm else np.zeros(()),
    )


# ----------------------------------------------------------------------------------------------
# backward (docs/cudnn_rnn.md §7)
# ----------------------------------------------------------------------------------------------

def _step_backward(cfg, lay, cache, dh, dc, grads):
    """Backward of one _step for all rows (the caller zeroes dh, dc of invalid rows).
    Returns (dx, dh_prev, dc_prev, dax, dah): dax / dah are the gradients of the input-side and
    recurrent-side pre-activations [B, G, H]. Only the projection gradient is accumulated here
    (into grads["P"]); the caller accumulates W, R and the biases."""
    mode = cfg.rnn_mode
    h = cache["h"]
    dh_prev = np.zeros_like(h)
    dc_prev = np.zeros_like(dc)
    act_slope, rec_slope = cfg.act[1], cfg.rec[1]
    if mode in ("rnn_tanh", "rnn_relu"):
        da = dh * act_slope(cache["a"])
        dax = dah = da[:, None]
    elif mode == "gru":
        r, u, n = cache["r"], cache["u"], cache["n"]
        dn = dh * (1.0 - u)
        du = dh * (h - n)
        dh_prev = dh * u
        dan = dn * act_slope(cache["a_n"])
        if cfg.reset_after:
            dr = dan * cache["ah"][:, 2]
        else:  # through r ⊙ h_operand, the candidate product's operand
            h_masks = cache["masks"][1]
            mask = 1.0 if h_masks is None else h_masks[2]
            d_rh = dan @ lay["R"][2]
            dr = d_rh * h * mask
            dh_prev = dh_prev + d_rh * r * mask
        dar = dr * rec_slope(cache["a_r"])
        dau = du * rec_slope(cache["a_u"])
        dax = np.stack([dar, dau, dan], axis=1)
        dah = np.stack([dar, dau, dan * r if cfg.reset_after else dan], axis=1)
    else:
        i, f, g, o, tc, a = (cache[k] for k in ("i", "f", "g", "o", "tc", "a"))
        if cfg.proj:
            grads["P"] += dh.T @ cache["m"]
            dm = dh @ lay["P"]
        else:
            dm = dh
        do = dm * tc
        dct = dc + dm * o * act_slope(cache["c_new"])
        dc_prev = dct * f
        dax = dah = np.stack([dct * g * rec_slope(a[:, 0]), dct * cache["c"] * rec_slope(a[:, 1]),
                              dct * i * act_slope(a[:, 2]), do * rec_slope(a[:, 3])], axis=1)
    x_masks, h_masks = cache["masks"]
    dhg = np.einsum("gho,bgh->gbo", lay["R"], dah)          # per gate, then through its mask
    if "rh" in cache:  # (the candidate's term went through r ⊙ h above)
        dhg[2] = 0.0
    dh_prev = dh_prev + (dhg if h_masks is None else dhg * h_masks).sum(axis=0)
    if lay["W"] is None:
        dx = dax.sum(axis=1)
    else:
        dxg = np.einsum("gho,bgh->gbo", lay["W"], dax)
        dx = (dxg if x_masks is None else dxg * x_masks).sum(axis=0)
    return dx, dh_prev, dc_prev, dax, dah


def backward(cfg, x, h0, c0, params, dy, dh, dc=None, seq_lengths=None, time_major=True,
             dropout=0.0, dropout_masks=None, input_masks=None, recurrent_masks=None,
             zoneout_h=None, zoneout_c=None):
    """Gradients of <dy, output> + <dh, output_h> + <dc, output_c> (TF layouts for dy, dh, dc).
    Returns dict(input_backprop, input_h_backprop, input_c_backprop, params_backprop), in the
    layouts of the corresponding inputs (input_c_backprop: scalar 0 for non-LSTM modes)."""
    x, h0, c0 = _to_internal(cfg, x, h0, c0, time_major)
    T, B = x.shape[:2]
    LD = cfg.L * cfg.D
    lens = _lengths(seq_lengths, T, B)
    scale = _dropout_scale(cfg, dropout, dropout_masks)
    _, _, _, caches, inputs, layers = _run(cfg, x, h0, c0, np.asarray(params, np.float64), lens,
                                           scale, _masks(cfg, input_masks, recurrent_masks),
                                           _zoneout(cfg, zoneout_h, zoneout_c, time_major))
    dy = np.asarray(dy, np.float64)
    dY = dy if time_major else dy.transpose(1, 0, 2)
    dhT = np.asarray(dh, np.float64).reshape(LD, B, cfg.Hr)
    dcT = (np.asarray(dc, np.float64).reshape(LD, B, cfg.H) if cfg.is_lstm
           else np.zeros((LD, B, cfg.H)))
    dh0, dc0 = np.zeros_like(h0), np.zeros_like(c0)
    grads = [dict(W=np.zeros((cfg.G, cfg.H, cfg.layer_input(l))), R=np.zeros_like(lay["R"]),
                  bW=np.zeros_like(lay["bW"]), bR=np.zeros_like(lay["bR"]),
                  P=None if lay["P"] is None else np.zeros_like(lay["P"]))
             for l in range(cfg.L) for lay in layers[l * cfg.D:(l + 1) * cfg.D]]
    for l in reversed(range(cfg.L)):
        dX = np.zeros_like(inputs[l])
        for d in range(cfg.D):
            p = l * cfg.D + d
            lay, gr = layers[p], grads[p]
            dh_carry, dc_carry = dhT[p].copy(), dcT[p].copy()
            for cache in reversed(caches[p]):
                t, valid = cache["t"], cache["valid"]
                dh_tot = dh_carry + dY[t, :, d * cfg.Hr:(d + 1) * cfg.Hr]
                # zoneout: w·ds reaches the cell's new state, (1 - w)·ds the previous one
                zh, zc = cache["zoneout"]
                dx, dhp, dcp, dax, dah = _step_backward(
                    cfg, lay, cache, _zone(zh, t, dh_tot, 0.0) * valid,
                    _zone(zc, t, dc_carry, 0.0) * valid, gr)
                dhp = dhp + _zone(zh, t, 0.0, dh_tot)
                dcp = dcp + _zone(zc, t, 0.0, dc_carry)
                v3 = valid[:, :, None]
                dax, dah = dax * v3, dah * v3
                x_masks, h_masks = cache["masks"]
                gr["W"] += np.einsum("bgh,gbo->gho", dax, _gate_operands(cache["x"], x_masks)
                                     * np.ones((cfg.G, 1, 1)))
                gr["bW"] += dax.sum(axis=0)
                operands = _gate_operands(cache["h"], h_masks) * np.ones((cfg.G, 1, 1))
                if "rh" in cache:  # a GRU resetting before: the candidate's product read r ⊙ h
                    operands[2] = cache["rh"]
                gr["R"] += np.einsum("bgh,gbo->gho", dah, operands)
                gr["bR"] += dah.sum(axis=0)
                dX[t] += dx * valid
                dh_carry = np.where(valid, dhp, dh_carry)
                dc_carry = np.where(valid, dcp, dc_carry)
            dh0[p], dc0[p] = dh_carry, dc_carry
        if l > 0 and scale is not None:
            dX = dX * scale[l - 1]
        dY = dX
    for p, gr in enumerate(grads):
        if p < cfg.D and cfg.skip:
            gr["W"] = None
    dx = dY if time_major else dY.transpose(1, 0, 2)
    return dict(
        input_backprop=dx,
        input_h_backprop=_state_out(dh0, time_major),
        input_c_backprop=_state_out(dc0, time_major) if cfg.is_lstm else np.zeros(()),
        params_backprop=pack(cfg, grads),
    )


# ----------------------------------------------------------------------------------------------
# test-input helpers (NumPy only)
# ----------------------------------------------------------------------------------------------

def state_shape(cfg, B, n, time_major=True):
    LD = cfg.L * cfg.D
    return (LD, B, n) if time_major else (B, LD, n)


def random_inputs(rng, cfg, T, B, time_major=True, scale=1.0):
    """dict(input, input_h, input_c, params) in TF's layouts (input_c is None for non-LSTM)."""
    weights, biases = random_canonical(rng, cfg, scale)
    x_shape = (T, B, cfg.I) if time_major else (B, T, cfg.I)
    return dict(
        input=rng.uniform(-1, 1, x_shape),
        input_h=rng.uniform(-0.8, 0.8, state_shape(cfg, B, cfg.Hr, time_major)),
        input_c=(rng.uniform(-1, 1, state_shape(cfg, B, cfg.H, time_major)) if cfg.is_lstm
                 else None),
        params=canonical_to_params(cfg, weights, biases),
    )


def random_cotangents(rng, cfg, T, B, time_major=True):
    """dict(dy, dh, dc) matching the forward outputs (dc is None for non-LSTM)."""
    y_shape = (T, B, cfg.D * cfg.Hr) if time_major else (B, T, cfg.D * cfg.Hr)
    return dict(
        dy=rng.uniform(-1, 1, y_shape),
        dh=rng.uniform(-1, 1, state_shape(cfg, B, cfg.Hr, time_major)),
        dc=rng.uniform(-1, 1, state_shape(cfg, B, cfg.H, time_major)) if cfg.is_lstm else None,
    )


# ----------------------------------------------------------------------------------------------
# TF glue shared by the plugin tests (TensorFlow is imported lazily: the reference itself does
# not need it)
# ----------------------------------------------------------------------------------------------

DTYPE_NAMES = ("half", "bfloat16", "float32", "float64")
# comparison tolerances vs the float64 reference, relative to max(1, max|expected|)
TOL = {"float64": 1e-10, "float32": 1e-5, "half": 5e-3, "bfloat16": 2e-2}
OP_NAMES = ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNBackpropV2",
            "CudnnRNNBackpropV3", "CudnnRNNParamsSize", "CudnnRNNParamsToCanonical",
            "CudnnRNNParamsToCanonicalV2", "CudnnRNNCanonicalToParams",
            "CudnnRNNCanonicalToParamsV2")


def tf_dtype(name):
    import tensorflow as tf

    return {"half": tf.float16, "bfloat16": tf.bfloat16, "float32": tf.float32,
            "float64": tf.float64}[name]


def get_op(where, name):
    """where='plugin': tf_lstm_ops.raw.<name>; where='tf': tf.raw_ops.<name> (which runs the
    plugin's CPU kernels once tf_lstm_ops is imported)."""
    import tensorflow as tf
    import tf_lstm_ops

    tf_lstm_ops.load_library()
    return getattr(tf_lstm_ops.raw if where == "plugin" else tf.raw_ops, name)


def to_tf(a, dtype):
    import tensorflow as tf

    return tf.cast(tf.constant(np.asarray(a, np.float64)), tf_dtype(dtype))


def round_to(a, dtype):
    """float64 values rounded to `dtype`, as float64 (None stays None)."""
    if a is None:
        return None
    return to_tf(a, dtype).numpy().astype(np.float64)


def rounded(d, dtype):
    return {k: round_to(v, dtype) for k, v in d.items()}


def tf_attrs(cfg, version=3, time_major=True, **extra):
    attrs = dict(rnn_mode=cfg.rnn_mode, input_mode=cfg.input_mode, direction=cfg.direction)
    if version == 3:
        attrs.update(num_proj=cfg.num_proj, time_major=time_major)
    attrs.update(extra)
    return attrs


def tf_forward_inputs(cfg, inp, dtype, seq_lengths=None, version=3, time_major=True):
    """Op kwargs input, input_h, input_c (scalar 0 for non-LSTM), params and, for V3,
    sequence_lengths (all T when None)."""
    import tensorflow as tf

    kw = dict(input=to_tf(inp["input"], dtype), input_h=to_tf(inp["input_h"], dtype),
              input_c=(to_tf(inp["input_c"], dtype) if inp.get("input_c") is not None
                       else tf.zeros([], tf_dtype(dtype))),
              params=to_tf(inp["params"], dtype))
    if version == 3:
        T, B = inp["input"].shape[:2] if time_major else inp["input"].shape[1::-1]
        lens = np.full(B, T) if seq_lengths is None else seq_lengths
        kw["sequence_lengths"] = tf.constant(np.asarray(lens, np.int32))
    return kw


def backprop_inputs(fwd_kwargs, out, dh=None, dc=None, **replace):
    """A Backprop op's tensor inputs for a forward call: its inputs (fwd_kwargs), its outputs,
    cotangents (dy ones; dh, dc ones unless given; a non-LSTM's scalar dc 0), its reserve space
    and, from V2 on, host_reserved; `replace` overrides any of them."""
    import tensorflow as tf

    kw = dict(fwd_kwargs, output=out.output, output_h=out.output_h, output_c=out.output_c,
              output_backprop=tf.ones_like(out.output),
              output_h_backprop=tf.ones_like(out.output_h) if dh is None else dh,
              output_c_backprop=(dc if dc is not None else tf.ones_like(out.output_c)
                                 if out.output_c.shape.rank else tf.zeros_like(out.output_c)),
              reserve_space=out.reserve_space)
    if hasattr(out, "host_reserved"):
        kw["host_reserved"] = out.host_reserved
    kw.update(replace)
    return kw


def to_np(t):
    return np.asarray(t.numpy() if hasattr(t, "numpy") else t, dtype=np.float64)


def assert_close(actual, expected, tol, name=""):
    """Shapes equal, all finite, max|actual - expected| <= tol * max(1, max|expected|)."""
    actual, expected = to_np(actual), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, "%s: shape %s != expected %s" % (
        name, actual.shape, expected.shape)
    if actual.size == 0:
        return
    assert np.all(np.isfinite(actual)), "%s: non-finite values" % name
    scale = max(1.0, float(np.max(np.abs(expected))))
    err = float(np.max(np.abs(actual - expected)))
    assert err <= tol * scale, "%s: max abs err %.3g > %.3g (scale %.3g) at %s" % (
        name, err, tol * scale, scale,
        np.unravel_index(np.argmax(np.abs(actual - expected)), actual.shape))
