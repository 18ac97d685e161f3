"""Float64 NumPy reference for the LayerNorm GRU and SimpleRNN (docs/layer_norm_rnn.md), written
from their specification: haste's LayerNormGRU on Keras' GRU(reset_after=True) weights
(cell="gru") and TF Addons' LayerNormSimpleRNNCell (cell="simple_rnn").

    w = random_weights(rng, "gru", I, H)
    out = forward("gru", x, h0, w, lengths, epsilon=1e-5, time_major=False)
    grads = backward("gru", x, h0, w, dy, dh, lengths, epsilon=1e-5)

Weights in Keras' layout: kernel [I, G·H], recurrent_kernel [H, G·H] (G = 3, gates z, r, h, for
the GRU; 1 for the SimpleRNN); bias [2, 3H] (b_x, b_h) for the GRU, [H] for the SimpleRNN;
gamma_x [G·H] (the GRU's norm of x·W; the SimpleRNN's of x·W + h·R) and, for the GRU, gamma_h
[3H] (of h·R). x is [B, T, I] ([T, B, I] time-major), the state [B, H]; recurrent_mask [B, H]
(one mask on h_{t-1} in the product, for every gate); zoneout weights of h (docs/cudnn_rnn.md
§4.9) a scalar or [B, T, H] ([T, B, H] time-major). backward is the chain rule through the same
steps, by hand (the GPU self-test has no TensorFlow); the tests check it against the fused
LayerNormRNNGrad op.
"""

import numpy as np

from tools.references.cudnn_rnn import ACTIVATIONS
from tools.references.layer_norm_lstm import (_layer_norm_backward, _normalized, _per_step,
                                              _zone, layer_norm)

CELLS = ("gru", "simple_rnn")


def weight_names(cell):
    return (("kernel", "recurrent_kernel", "bias", "gamma_x", "gamma_h") if cell == "gru"
            else ("kernel", "recurrent_kernel", "bias", "gamma_x"))


def weight_shapes(cell, input_size, units):
    G = (3 if cell == "gru" else 1) * units
    shapes = dict(kernel=(input_size, G), recurrent_kernel=(units, G),
                  bias=(2, G) if cell == "gru" else (G,), gamma_x=(G,))
    if cell == "gru":
        shapes["gamma_h"] = (G,)
    return shapes


def random_weights(rng, cell, input_size, units, scale=0.6):
    w = {k: rng.uniform(-scale, scale, s)
         for k, s in weight_shapes(cell, input_size, units).items()}
    for k in ("gamma_x", "gamma_h"):
        if k in w:
            w[k] += 1.0  # (γ near its initial value 1)
    return w


def _cell_forward(cell, w, x_t, h, operand, epsilon, activation, recurrent_activation):
    """One step: (h̃, what the backward reads)."""
    act = ACTIVATIONS[activation][0]
    H = h.shape[-1]
    if cell == "simple_rnn":
        v = x_t @ w["kernel"] + operand @ w["recurrent_kernel"]
        xhat, r = _normalized(v, epsilon)
        a = xhat * w["gamma_x"] + w["bias"]
        return act(a), dict(xhat=xhat, r=r, a=a)
    rec = ACTIVATIONS[recurrent_activation][0]
    xhat_x, r_x = _normalized(x_t @ w["kernel"], epsilon)
    xhat_h, r_h = _normalized(operand @ w["recurrent_kernel"], epsilon)
    X = xhat_x * w["gamma_x"] + w["bias"][0]
    U = xhat_h * w["gamma_h"] + w["bias"][1]
    a_z = X[:, :H] + U[:, :H]
    a_r = X[:, H:2 * H] + U[:, H:2 * H]
    r_gate = rec(a_r)
    a_g = X[:, 2 * H:] + r_gate * U[:, 2 * H:]
    z, g = rec(a_z), act(a_g)
    h_new = z * h + (1.0 - z) * g
    return h_new, dict(xhat_x=xhat_x, r_x=r_x, xhat_h=xhat_h, r_h=r_h, a_z=a_z, a_r=a_r,
                       a_g=a_g, U_g=U[:, 2 * H:])


def _steps(cell, x, h0, w, lengths, epsilon, time_major, recurrent_mask, zoneout_h, activation,
           recurrent_activation):
    xs = np.asarray(x, np.float64)
    xs = xs if time_major else xs.transpose(1, 0, 2)
    T, B = xs.shape[:2]
    lengths = np.full(B, T) if lengths is None else np.asarray(lengths)
    wh = _per_step(zoneout_h, time_major)
    h = np.array(h0, np.float64)
    H = h.shape[-1]
    ys = np.zeros((T, B, H))
    saved = []
    for t in range(T):
        operand = h if recurrent_mask is None else h * recurrent_mask
        h_new, s = _cell_forward(cell, w, xs[t], h, operand, epsilon, activation,
                                 recurrent_activation)
        s.update(operand=operand, h_prev=h)
        saved.append(s)
        valid = (t < lengths)[:, None]
        h = np.where(valid, _zone(wh(t), h_new, h), h)
        ys[t] = np.where(valid, h, 0.0)
    return xs, lengths, wh, ys, h, saved


def forward(cell, x, h0, w, lengths=None, epsilon=1e-5, time_major=False, recurrent_mask=None,
            zoneout_h=None, activation="tanh", recurrent_activation="sigmoid"):
    """dict(output, output_h): outputs zero past each row's length, the final state that after
    its last step."""
    _, _, _, ys, h, _ = _steps(cell, x, h0, w, lengths, epsilon, time_major, recurrent_mask,
                               zoneout_h, activation, recurrent_activation)
    return dict(output=ys if time_major else ys.transpose(1, 0, 2), output_h=h)


def backward(cell, x, h0, w, dy, dh, lengths=None, epsilon=1e-5, time_major=False,
             recurrent_mask=None, zoneout_h=None, activation="tanh",
             recurrent_activation="sigmoid"):
    """The gradients of <dy, output> + <dh, output_h> (forward's outputs) w.r.t. input, input_h
    and every weight (weight_names(cell)), as a dict of those names."""
    xs, lengths, wh, _, _, saved = _steps(cell, x, h0, w, lengths, epsilon, time_major,
                                          recurrent_mask, zoneout_h, activation,
                                          recurrent_activation)
    dys = np.asarray(dy, np.float64)
    dys = dys if time_major else dys.transpose(1, 0, 2)
    T = xs.shape[0]
    slope = ACTIVATIONS[activation][1]
    grads = {k: np.zeros_like(np.asarray(w[k], np.float64)) for k in weight_names(cell)}
    dxs = np.zeros(xs.shape)
    dh = np.array(dh, np.float64)
    for t in reversed(range(T)):
        s = saved[t]
        valid = (t < lengths)[:, None]
        # rows past their length pass their state gradient through: zero for the step
        dh_t = np.where(valid, dh + dys[t], 0.0)
        keep = 1.0 if wh(t) is None else wh(t)
        dh_new = keep * dh_t
        if cell == "simple_rnn":
            da = dh_new * slope(s["a"])
            dv, dgamma, _ = _layer_norm_backward(da, s["xhat"], s["r"], w["gamma_x"])
            grads["gamma_x"] += dgamma
            grads["bias"] += da.sum(axis=0)
            dax = dah = dv
            direct = 0.0
        else:
            rec, rec_slope = ACTIVATIONS[recurrent_activation]
            z, r_gate = rec(s["a_z"]), rec(s["a_r"])
            g = ACTIVATIONS[activation][0](s["a_g"])
            da_g = dh_new * (1.0 - z) * slope(s["a_g"])
            da_z = dh_new * (s["h_prev"] - g) * rec_slope(s["a_z"])
            da_r = da_g * s["U_g"] * rec_slope(s["a_r"])
            dX = np.concatenate([da_z, da_r, da_g], axis=1)
            dU = np.concatenate([da_z, da_r, da_g * r_gate], axis=1)
            dax, dgamma_x, _ = _layer_norm_backward(dX, s["xhat_x"], s["r_x"], w["gamma_x"])
            dah, dgamma_h, _ = _layer_norm_backward(dU, s["xhat_h"], s["r_h"], w["gamma_h"])
            grads["gamma_x"] += dgamma_x
            grads["gamma_h"] += dgamma_h
            grads["bias"] += np.stack([dX.sum(axis=0), dU.sum(axis=0)])
            direct = dh_new * z
        grads["kernel"] += xs[t].T @ dax
        grads["recurrent_kernel"] += s["operand"].T @ dah
        dxs[t] = dax @ w["kernel"].T
        d_operand = dah @ w["recurrent_kernel"].T
        if recurrent_mask is not None:
            d_operand = d_operand * recurrent_mask
        dh = np.where(valid, d_operand + direct + (1.0 - keep) * dh_t, dh)
    grads.update(input=dxs if time_major else dxs.transpose(1, 0, 2), input_h=dh)
    return grads
