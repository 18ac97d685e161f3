"""Float64 NumPy reference for the LayerNorm LSTM (docs/layer_norm_lstm.md), written from its
specification: TF Addons' LayerNormLSTMCell ("addons": the normalised c carried) and Ba et al.'s
supplement / haste ("paper": the raw c carried, LN(c) inside the output's tanh).

    w = random_weights(rng, I, H)
    out = forward(x, h0, c0, w, lengths, norm="addons", epsilon=1e-3, time_major=False)
    grads = backward(x, h0, c0, w, dy, dh, dc, lengths, norm="addons", epsilon=1e-3)

Weights in Keras' layout: kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H] (gates i, f, c, o),
gamma_x / beta_x and gamma_h / beta_h [4H], gamma_c / beta_c [H]. x is [B, T, I] ([T, B, I]
time-major), the states [B, H]; recurrent_mask [B, H] (TF Addons' one mask on h_{t-1}); zoneout
weights (docs/cudnn_rnn.md §4.9) a scalar or [B, T, H] ([T, B, H] time-major). backward is
the chain rule through the same steps, by hand (the GPU self-test has no TensorFlow to
differentiate with); the tests check it against the fused LayerNormLSTMGrad op.
"""

import numpy as np

WEIGHTS = ("kernel", "recurrent_kernel", "bias", "gamma_x", "beta_x", "gamma_h", "beta_h",
           "gamma_c", "beta_c")


def random_weights(rng, input_size, units, scale=0.6):
    G = 4 * units
    shapes = dict(kernel=(input_size, G), recurrent_kernel=(units, G), bias=(G,), gamma_x=(G,),
                  beta_x=(G,), gamma_h=(G,), beta_h=(G,), gamma_c=(units,), beta_c=(units,))
    w = {k: rng.uniform(-scale, scale, s) for k, s in shapes.items()}
    for k in ("gamma_x", "gamma_h", "gamma_c"):
        w[k] += 1.0  # (γ near its initial value 1)
    return w


def layer_norm(v, gamma, beta, epsilon):
    if v.shape[-1] == 0:  # (no units: nothing to normalise)
        return v
    mean = v.mean(axis=-1, keepdims=True)
    variance = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    return (v - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _normalized(v, epsilon):
    """(x̂, r) of each row: x̂ = (v - mean) * r, r = 1 / sqrt(variance + epsilon)."""
    if v.shape[-1] == 0:
        return v, np.ones(v.shape[:-1] + (1,))
    mean = v.mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(((v - mean) ** 2).mean(axis=-1, keepdims=True) + epsilon)
    return (v - mean) * r, r


def _layer_norm_backward(dy, xhat, r, gamma):
    """The gradients of <dy, x̂·γ + β> w.r.t. the rows v, γ and β."""
    if xhat.shape[-1] == 0:
        return np.zeros_like(dy), np.zeros(xhat.shape[-1]), np.zeros(xhat.shape[-1])
    d = dy * gamma
    dv = r * (d - d.mean(axis=-1, keepdims=True)
              - xhat * (d * xhat).mean(axis=-1, keepdims=True))
    return dv, (dy * xhat).sum(axis=0), dy.sum(axis=0)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _per_step(w, time_major):
    """Zoneout weights as a function of the step: None, a scalar, or [T, B, H]."""
    if w is None:
        return lambda t: None
    w = np.asarray(w, np.float64)
    if w.ndim == 0:
        return lambda t: w
    w = w if time_major else w.transpose(1, 0, 2)
    return lambda t: w[t]


def _zone(w, new, previous):
    return new if w is None else w * new + (1.0 - w) * previous


def forward(x, h0, c0, w, lengths=None, norm="addons", epsilon=1e-3, time_major=False,
            recurrent_mask=None, zoneout_h=None, zoneout_c=None):
    """dict(output, output_h, output_c): outputs zero past each row's length, the final states
    those after its last step."""
    x = np.asarray(x, np.float64)
    xs = x if time_major else x.transpose(1, 0, 2)
    T, B = xs.shape[:2]
    lengths = np.full(B, T) if lengths is None else np.asarray(lengths)
    H = np.asarray(h0).shape[-1]
    h, c = np.array(h0, np.float64), np.array(c0, np.float64)
    wh, wc = _per_step(zoneout_h, time_major), _per_step(zoneout_c, time_major)
    ys = np.zeros((T, B, H))
    for t in range(T):
        operand = h if recurrent_mask is None else h * recurrent_mask
        z = (layer_norm(xs[t] @ w["kernel"], w["gamma_x"], w["beta_x"], epsilon) + w["bias"]
             + layer_norm(operand @ w["recurrent_kernel"], w["gamma_h"], w["beta_h"], epsilon))
        i, f, g, o = (z[:, k * H:(k + 1) * H] for k in range(4))
        i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
        c_cell = f * c + i * g
        q = layer_norm(c_cell, w["gamma_c"], w["beta_c"], epsilon)
        h_new = _zone(wh(t), o * np.tanh(q), h)
        c_new = _zone(wc(t), q if norm == "addons" else c_cell, c)
        valid = (t < lengths)[:, None]
        h, c = np.where(valid, h_new, h), np.where(valid, c_new, c)
        ys[t] = np.where(valid, h, 0.0)
    return dict(output=ys if time_major else ys.transpose(1, 0, 2), output_h=h, output_c=c)


def backward(x, h0, c0, w, dy, dh, dc, lengths=None, norm="addons", epsilon=1e-3,
             time_major=False, recurrent_mask=None, zoneout_h=None, zoneout_c=None):
    """The gradients of <dy, output> + <dh, output_h> + <dc, output_c> (forward's outputs) w.r.t.
    input, input_h, input_c and every weight (WEIGHTS), as a dict of those names."""
    x = np.asarray(x, np.float64)
    xs = x if time_major else x.transpose(1, 0, 2)
    dys = np.asarray(dy, np.float64)
    dys = dys if time_major else dys.transpose(1, 0, 2)
    T, B = xs.shape[:2]
    lengths = np.full(B, T) if lengths is None else np.asarray(lengths)
    H = np.asarray(h0).shape[-1]
    wh, wc = _per_step(zoneout_h, time_major), _per_step(zoneout_c, time_major)
    # the forward again, keeping what each step's backward reads
    h, c = np.array(h0, np.float64), np.array(c0, np.float64)
    steps = []
    for t in range(T):
        operand = h if recurrent_mask is None else h * recurrent_mask
        xhat_x, r_x = _normalized(xs[t] @ w["kernel"], epsilon)
        xhat_h, r_h = _normalized(operand @ w["recurrent_kernel"], epsilon)
        z = (xhat_x * w["gamma_x"] + w["beta_x"] + w["bias"] + xhat_h * w["gamma_h"]
             + w["beta_h"])
        i, f, g, o = (z[:, k * H:(k + 1) * H] for k in range(4))
        i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
        c_cell = f * c + i * g
        xhat_c, r_c = _normalized(c_cell, epsilon)
        q = xhat_c * w["gamma_c"] + w["beta_c"]
        steps.append(dict(operand=operand, xhat_x=xhat_x, r_x=r_x, xhat_h=xhat_h, r_h=r_h,
                          gates=(i, f, g, o), c_prev=c, xhat_c=xhat_c, r_c=r_c, q=q))
        h_new = _zone(wh(t), o * np.tanh(q), h)
        c_new = _zone(wc(t), q if norm == "addons" else c_cell, c)
        valid = (t < lengths)[:, None]
        h, c = np.where(valid, h_new, h), np.where(valid, c_new, c)
    grads = {k: np.zeros_like(np.asarray(v, np.float64)) for k, v in w.items()}
    dxs = np.zeros(xs.shape)
    dh, dc = np.array(dh, np.float64), np.array(dc, np.float64)
    for t in reversed(range(T)):
        s = steps[t]
        valid = (t < lengths)[:, None]
        # rows past their length pass their state gradients through: zero for the step
        dh_t = np.where(valid, dh + dys[t], 0.0)
        dc_t = np.where(valid, dc, 0.0)
        kh = 1.0 if wh(t) is None else wh(t)
        kc = 1.0 if wc(t) is None else wc(t)
        i, f, g, o = s["gates"]
        th = np.tanh(s["q"])
        dh_new, dc_new = kh * dh_t, kc * dc_t
        dq = dh_new * o * (1 - th ** 2) + (dc_new if norm == "addons" else 0.0)
        dc_cell, dgamma_c, dbeta_c = _layer_norm_backward(dq, s["xhat_c"], s["r_c"],
                                                          w["gamma_c"])
        if norm != "addons":
            dc_cell = dc_cell + dc_new
        dz = np.concatenate([dc_cell * g * i * (1 - i), dc_cell * s["c_prev"] * f * (1 - f),
                             dc_cell * i * (1 - g ** 2), dh_new * th * o * (1 - o)], axis=1)
        dah, dgamma_h, dbeta_h = _layer_norm_backward(dz, s["xhat_h"], s["r_h"], w["gamma_h"])
        dax, dgamma_x, dbeta_x = _layer_norm_backward(dz, s["xhat_x"], s["r_x"], w["gamma_x"])
        for k, v in (("gamma_c", dgamma_c), ("beta_c", dbeta_c), ("gamma_h", dgamma_h),
                     ("beta_h", dbeta_h), ("gamma_x", dgamma_x), ("beta_x", dbeta_x),
                     ("bias", dz.sum(axis=0)), ("recurrent_kernel", s["operand"].T @ dah),
                     ("kernel", xs[t].T @ dax)):
            grads[k] += v
        dxs[t] = dax @ w["kernel"].T
        d_operand = dah @ w["recurrent_kernel"].T
        if recurrent_mask is not None:
            d_operand = d_operand * recurrent_mask
        dh = np.where(valid, d_operand + (1 - kh) * dh_t, dh)
        dc = np.where(valid, dc_cell * f + (1 - kc) * dc_t, dc)
    grads.update(input=dxs if time_major else dxs.transpose(1, 0, 2), input_h=dh, input_c=dc)
    return grads
