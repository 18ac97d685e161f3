"""Float64 NumPy reference for the LayerNorm LSTM (docs/layer_norm_lstm.md), written from its
specification: TF Addons' LayerNormLSTMCell ("addons": the normalised c carried) and Ba et al.'s
supplement / haste ("paper": the raw c carried, LN(c) inside the output's tanh).

    w = random_weights(rng, I, H)
    out = forward(x, h0, c0, w, lengths, norm="addons", epsilon=1e-3, time_major=False)

Weights in Keras' layout: kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H] (gates i, f, c, o),
gamma_x / beta_x and gamma_h / beta_h [4H], gamma_c / beta_c [H]. x is [B, T, I] ([T, B, I]
time-major), the states [B, H]; recurrent_mask [B, H] (TF Addons' one mask on h_{t-1}); zoneout
weights (docs/cudnn_rnn.md §4.9) a scalar or [B, T, H] ([T, B, H] time-major).
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
