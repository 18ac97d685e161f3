"""Validation of the float64 CudnnRNN reference (tools/references/cudnn_rnn.py) itself:
(a) its backward against central finite differences of its forward;
(b) its forward against Keras 3 CPU LSTM / GRU(reset_after=True) layers through the weight mappings
    of docs/cudnn_rnn.md §6.5 (single layer, bidirectional and stacked, with and without masks);
(c) ParamsSize examples of docs/cudnn_rnn.md §6.3;
(d) PyTorch CPU RNNs, when torch is importable (it usually is not: those tests skip).
None of this needs the plugin."""

import os

import numpy as np
import pytest

from tools.references import cudnn_rnn as R

MODES = R.MODES
DIRS = ("unidirectional", "bidirectional")


def call_forward(cfg, inp, **kw):
    return R.forward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"], **kw)


def call_backward(cfg, inp, cot, **kw):
    return R.backward(cfg, inp["input"], inp["input_h"], inp["input_c"], inp["params"],
                      cot["dy"], cot["dh"], cot["dc"], **kw)


def objective(cfg, inp, cot, **kw):
    out = call_forward(cfg, inp, **kw)
    total = np.sum(out["output"] * cot["dy"]) + np.sum(out["output_h"] * cot["dh"])
    if cfg.is_lstm:
        total += np.sum(out["output_c"] * cot["dc"])
    return total


def finite_difference(cfg, inp, cot, key, eps=1e-6, **kw):
    a = inp[key]
    grad = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        old = a[idx]
        a[idx] = old + eps
        plus = objective(cfg, inp, cot, **kw)
        a[idx] = old - eps
        minus = objective(cfg, inp, cot, **kw)
        a[idx] = old
        grad[idx] = (plus - minus) / (2 * eps)
    return grad


# ----------------------------------------------------------------------------------------------
# (a) backward vs finite differences
# ----------------------------------------------------------------------------------------------

def _fd_cases():
    cases = []
    for mode in MODES:
        for direction in DIRS:
            for proj in ((0, 2) if mode == "lstm" else (0,)):
                for time_major, lens in ((True, None), (True, [3, 1]), (False, [2, 3])):
                    cases.append((mode, direction, proj, 1 + (len(cases) % 2), "linear_input",
                                  time_major, lens))
    # input modes (layer 0 skip needs I == H), zero-length sequences, three layers
    cases += [
        ("lstm", "bidirectional", 0, 2, "skip_input", True, [3, 2]),
        ("gru", "unidirectional", 0, 2, "auto_select", False, [1, 3]),
        ("rnn_tanh", "bidirectional", 0, 1, "skip_input", True, None),
        ("lstm", "bidirectional", 0, 2, "linear_input", False, [0, 2]),
        ("gru", "bidirectional", 0, 1, "linear_input", True, [2, 0]),
        ("rnn_relu", "unidirectional", 0, 3, "linear_input", True, [3, 2]),
        ("lstm", "unidirectional", 2, 3, "linear_input", False, [1, 3]),
    ]
    return cases


FD_CASES = _fd_cases()


@pytest.mark.parametrize("mode,direction,proj,L,input_mode,time_major,lens", FD_CASES,
                         ids=["%s-%s-P%d-L%d-%s-%s-%s" % (c[0], c[1][:3], c[2], c[3], c[4][:4],
                                                          "tm" if c[5] else "bm", c[6])
                              for c in FD_CASES])
def test_backward_matches_finite_differences(rng, mode, direction, proj, L, input_mode,
                                             time_major, lens):
    H = 3
    I = H if input_mode in ("skip_input", "auto_select") else 2
    cfg = R.Cfg(mode, L, H, I, direction, input_mode, proj)
    T, B = 3, 2
    inp = R.random_inputs(rng, cfg, T, B, time_major)
    if mode == "rnn_relu":  # keep pre-activations away from the kink at 0
        inp["params"] = np.abs(inp["params"])
        inp["input"] = np.abs(inp["input"])
        inp["input_h"] = np.abs(inp["input_h"])
    cot = R.random_cotangents(rng, cfg, T, B, time_major)
    kw = dict(seq_lengths=lens, time_major=time_major)
    grads = call_backward(cfg, inp, cot, **kw)
    keys = ["input", "input_h", "params"] + (["input_c"] if cfg.is_lstm else [])
    for key in keys:
        fd = finite_difference(cfg, inp, cot, key, **kw)
        got = grads[key + "_backprop"]
        assert got.shape == fd.shape, key
        np.testing.assert_allclose(got, fd, atol=1e-7, rtol=1e-6, err_msg=key)
    if not cfg.is_lstm:
        assert grads["input_c_backprop"].shape == ()
    if lens is not None:  # padded positions: exactly zero input gradient
        dx = grads["input_backprop"] if time_major else grads["input_backprop"].transpose(1, 0, 2)
        for b, n in enumerate(lens):
            assert np.all(dx[n:, b] == 0.0)


def test_backward_with_dropout_masks_matches_finite_differences(rng):
    cfg = R.Cfg("lstm", 3, 2, 3, "bidirectional")
    T, B, p = 3, 2, 0.4
    inp = R.random_inputs(rng, cfg, T, B)
    cot = R.random_cotangents(rng, cfg, T, B)
    masks = [rng.uniform(size=(T, B, 4)) > p for _ in range(2)]
    kw = dict(seq_lengths=[3, 2], dropout=p, dropout_masks=masks)
    grads = call_backward(cfg, inp, cot, **kw)
    for key in ("input", "input_h", "input_c", "params"):
        np.testing.assert_allclose(grads[key + "_backprop"],
                                   finite_difference(cfg, inp, cot, key, **kw),
                                   atol=1e-7, rtol=1e-6, err_msg=key)
    # and the masks matter
    plain = call_forward(cfg, inp, seq_lengths=[3, 2])["output"]
    assert np.max(np.abs(call_forward(cfg, inp, **kw)["output"] - plain)) > 1e-3


# ----------------------------------------------------------------------------------------------
# forward semantics that need no external framework
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("direction", DIRS)
def test_padding_zero_length_and_padding_independence(rng, mode, direction):
    cfg = R.Cfg(mode, 2, 3, 2, direction)
    T, B = 4, 3
    lens = [4, 0, 2]
    inp = R.random_inputs(rng, cfg, T, B)
    out = call_forward(cfg, inp, seq_lengths=lens)
    for b, n in enumerate(lens):
        assert np.all(out["output"][n:, b] == 0.0)
    if mode != "rnn_relu":  # (relu outputs may legitimately be 0)
        assert np.all(out["output"][:2, 2] != 0.0)
    # zero-length sequence: final state = initial state
    np.testing.assert_array_equal(out["output_h"][:, 1], inp["input_h"][:, 1])
    if cfg.is_lstm:
        np.testing.assert_array_equal(out["output_c"][:, 1], inp["input_c"][:, 1])
    # padding content never matters
    inp2 = dict(inp, input=inp["input"].copy())
    inp2["input"][2:, 2] = 100.0
    inp2["input"][:, 1] = -100.0
    out2 = call_forward(cfg, inp2, seq_lengths=lens)
    for k in out:
        np.testing.assert_array_equal(out2[k], out[k])
    # a sequence of length n equals running that sequence alone with T = n
    single = dict(input=inp["input"][:2, 2:3], input_h=inp["input_h"][:, 2:3],
                  input_c=None if inp["input_c"] is None else inp["input_c"][:, 2:3],
                  params=inp["params"])
    alone = call_forward(cfg, single)
    np.testing.assert_allclose(out["output"][:2, 2:3], alone["output"], rtol=0, atol=1e-14)
    np.testing.assert_allclose(out["output_h"][:, 2:3], alone["output_h"], rtol=0, atol=1e-14)


def test_batch_major_state_is_reinterpreted_not_transposed(rng):
    cfg = R.Cfg("lstm", 2, 3, 2, "bidirectional")
    T, B = 3, 2
    tm = R.random_inputs(rng, cfg, T, B, time_major=True)
    lens = [3, 1]
    ref = call_forward(cfg, tm, seq_lengths=lens)
    # same memory for the states, transposed input: batch-major call
    bm = dict(tm, input=tm["input"].transpose(1, 0, 2),
              input_h=tm["input_h"].reshape(B, 4, 3), input_c=tm["input_c"].reshape(B, 4, 3))
    out = call_forward(cfg, bm, seq_lengths=lens, time_major=False)
    np.testing.assert_array_equal(out["output"], ref["output"].transpose(1, 0, 2))
    assert out["output_h"].shape == (B, 4, 3)
    np.testing.assert_array_equal(out["output_h"].reshape(-1), ref["output_h"].reshape(-1))
    np.testing.assert_array_equal(out["output_c"].reshape(-1), ref["output_c"].reshape(-1))
    # ... which differs from a semantic transposition when L*D > 1
    sem = dict(bm, input_h=tm["input_h"].transpose(1, 0, 2),
               input_c=tm["input_c"].transpose(1, 0, 2))
    assert not np.allclose(call_forward(cfg, sem, seq_lengths=lens, time_major=False)["output"],
                           out["output"])


@pytest.mark.parametrize("mode", MODES)
def test_skip_input_equals_identity_input_weights(rng, mode):
    H = 3
    skip = R.Cfg(mode, 2, H, H, "bidirectional", "skip_input")
    lin = R.Cfg(mode, 2, H, H, "bidirectional", "linear_input")
    ws, bs = R.params_to_canonical(skip, R.random_inputs(rng, skip, 1, 1)["params"])
    assert all(w.shape == (H, 0) for k, w in enumerate(ws) if k < 2 * 2 * skip.G
               and k % (2 * skip.G) < skip.G)
    ws_lin = [np.eye(H) if w.shape == (H, 0) else w for w in ws]
    inp = R.random_inputs(rng, lin, 4, 2)
    inp["params"] = R.canonical_to_params(lin, ws_lin, bs)
    expected = call_forward(lin, inp, seq_lengths=[4, 2])
    inp_skip = dict(inp, params=R.canonical_to_params(skip, ws, bs))
    got = call_forward(skip, inp_skip, seq_lengths=[4, 2])
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=0, atol=1e-14)
    # auto_select with I == H is skip; with I != H it is linear
    assert R.Cfg(mode, 1, H, H, input_mode="auto_select").skip
    assert not R.Cfg(mode, 1, H, H + 1, input_mode="auto_select").skip


def test_cell_equations_one_step_by_hand(rng):
    """One step of each mode from the equations of docs/cudnn_rnn.md §4, written out
    independently."""
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    H, I, B = 2, 3, 2
    x, h, c = rng.uniform(-1, 1, (B, I)), rng.uniform(-1, 1, (B, H)), rng.uniform(-1, 1, (B, H))
    for mode in MODES:
        cfg = R.Cfg(mode, 1, H, I)
        ws, bs = R.random_canonical(rng, cfg)
        params = R.canonical_to_params(cfg, ws, bs)
        G = cfg.G
        W, Rm, bW, bR = ws[:G], ws[G:], bs[:G], bs[G:]
        pre = [x @ W[g].T + bW[g] + h @ Rm[g].T + bR[g] for g in range(G)]
        if mode == "rnn_tanh":
            hn, cn = np.tanh(pre[0]), None
        elif mode == "rnn_relu":
            hn, cn = np.maximum(pre[0], 0), None
        elif mode == "lstm":
            cn = sig(pre[1]) * c + sig(pre[0]) * np.tanh(pre[2])
            hn = sig(pre[3]) * np.tanh(cn)
        else:
            r, u = sig(pre[0]), sig(pre[1])
            hh = np.tanh(x @ W[2].T + bW[2] + r * (h @ Rm[2].T + bR[2]))
            hn, cn = (1 - u) * hh + u * h, None
        out = R.forward(cfg, x[None], h[None], c[None] if cfg.is_lstm else None, params)
        np.testing.assert_allclose(out["output"][0], hn, atol=1e-14, rtol=0)
        np.testing.assert_allclose(out["output_h"][0], hn, atol=1e-14, rtol=0)
        if cn is not None:
            np.testing.assert_allclose(out["output_c"][0], cn, atol=1e-14, rtol=0)
        else:
            assert out["output_c"].shape == ()


# ----------------------------------------------------------------------------------------------
# (c) params size and layout
# ----------------------------------------------------------------------------------------------

def test_params_size_spec_examples():
    assert R.params_size("lstm", 1, 2, 3) == 56
    assert R.params_size("gru", 2, 4, 3, "bidirectional") == 552
    # by hand: rnn_tanh, 1 layer, H=2, I=3: W 2x3, R 2x2, two biases of 2
    assert R.params_size("rnn_tanh", 1, 2, 3) == 6 + 4 + 4
    # lstm with projection H=4, P=2, I=3: 4*4*(3+2) + 2*4 + 2*4*4
    assert R.params_size("lstm", 1, 4, 3, num_proj=2) == 80 + 8 + 32
    # skip input (I == H): no layer-0 W
    assert R.params_size("lstm", 1, 3, 3, input_mode="skip_input") == 4 * 3 * 3 + 2 * 4 * 3
    assert R.params_size("lstm", 1, 3, 3, input_mode="auto_select") == 4 * 3 * 3 + 2 * 4 * 3
    assert R.params_size("lstm", 1, 3, 4, input_mode="auto_select") == R.params_size(
        "lstm", 1, 3, 4)


LAYOUT_CASES = [(m, d, L, v) for m in MODES for d in DIRS for L in (1, 3)
                for v in (("plain", "proj", "skip") if m == "lstm" else ("plain", "skip"))]


@pytest.mark.parametrize("mode,direction,L,variant", LAYOUT_CASES)
def test_layout_consistent_with_size_and_round_trips(rng, mode, direction, L, variant):
    H = 4
    cfg = R.Cfg(mode, L, H, H if variant == "skip" else 3, direction,
                "skip_input" if variant == "skip" else "linear_input",
                2 if variant == "proj" else 0)
    wshapes, bshapes = R.canonical_shapes(cfg)
    per = 2 * cfg.G + (variant == "proj")
    assert len(wshapes) == per * L * cfg.D and len(bshapes) == 2 * cfg.G * L * cfg.D
    assert sum(int(np.prod(s)) for s in wshapes + bshapes) == R.cfg_params_size(cfg)
    params = rng.uniform(-1, 1, R.cfg_params_size(cfg))
    ws, bs = R.params_to_canonical(cfg, params)
    np.testing.assert_array_equal(R.canonical_to_params(cfg, ws, bs), params)
    # all matrices first, then biases: the first bias starts at the total matrix size
    nw = sum(int(np.prod(s)) for s in wshapes)
    np.testing.assert_array_equal(bs[0], params[nw:nw + H])
    if variant == "proj":
        # Pmat of pseudo-layer 0 right after its G W and G R matrices
        off = cfg.G * H * 3 + cfg.G * H * 2
        np.testing.assert_array_equal(ws[2 * cfg.G], params[off:off + 2 * H].reshape(2, H))


# ----------------------------------------------------------------------------------------------
# (b) Keras 3 CPU layers
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Keras backend is not TensorFlow")
    return keras


def keras_layer(keras, mode, H, **kw):
    if mode == "lstm":
        return keras.layers.LSTM(H, return_sequences=True, return_state=True, dtype="float64", **kw)
    return keras.layers.GRU(H, return_sequences=True, return_state=True, reset_after=True,
                            dtype="float64", **kw)


def random_keras_weights(rng, layer):
    return [rng.uniform(-0.8, 0.8, np.shape(w)) for w in layer.get_weights()]


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("masked", [False, True])
def test_forward_matches_keras_single_layer(rng, keras, mode, masked):
    T, B, I, H = 5, 3, 4, 3
    x = rng.uniform(-1, 1, (B, T, I))
    h0, c0 = rng.uniform(-1, 1, (B, H)), rng.uniform(-1, 1, (B, H))
    lens = np.array([5, 2, 4]) if masked else np.full(B, T)
    mask = np.arange(T)[None, :] < lens[:, None]
    layer = keras_layer(keras, mode, H)
    layer.build((B, T, I))
    ws = random_keras_weights(rng, layer)
    layer.set_weights(ws)
    init = [h0, c0] if mode == "lstm" else [h0]
    got = [np.asarray(a) for a in layer(x, initial_state=init, mask=mask if masked else None)]
    cfg = R.Cfg(mode, 1, H, I)
    params = R.keras_to_params(cfg, [ws])
    # Keras inserts the state axis at axis 1 for batch-major input (docs/cudnn_rnn.md §6.5)
    ref = R.forward(cfg, x, h0[:, None], c0[:, None] if mode == "lstm" else None, params,
                    seq_lengths=lens if masked else None, time_major=False)
    np.testing.assert_allclose(ref["output"] * mask[..., None], got[0] * mask[..., None],
                               atol=1e-12, rtol=0)
    np.testing.assert_allclose(ref["output_h"][:, 0], got[1], atol=1e-12, rtol=0)
    if mode == "lstm":
        np.testing.assert_allclose(ref["output_c"][:, 0], got[2], atol=1e-12, rtol=0)
    # time-major gives the same numbers
    tm = R.forward(cfg, x.transpose(1, 0, 2), h0[None], c0[None] if mode == "lstm" else None,
                   params, seq_lengths=lens if masked else None)
    np.testing.assert_allclose(tm["output"].transpose(1, 0, 2), ref["output"], atol=1e-14, rtol=0)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("masked", [False, True])
def test_forward_matches_keras_stacked_bidirectional(rng, keras, mode, masked):
    """Two stacked Bidirectional(concat) layers = a 2-layer bidirectional cuDNN net; checks the
    backward direction (starts at len-1 from input_h), concatenation, and layer stacking."""
    T, B, I, H = 4, 3, 2, 3
    x = rng.uniform(-1, 1, (B, T, I))
    lens = np.array([4, 1, 3]) if masked else np.full(B, T)
    mask = np.arange(T)[None, :] < lens[:, None]
    n_state = 2 if mode == "lstm" else 1
    h0 = rng.uniform(-1, 1, (4, B, H))  # p = l*D + d
    c0 = rng.uniform(-1, 1, (4, B, H))
    layers, per_p, y = [], [], x
    finals = []
    for l in range(2):
        bi = keras.layers.Bidirectional(keras_layer(keras, mode, H), merge_mode="concat",
                                        dtype="float64")
        bi.build((B, T, y.shape[-1]))
        fw_w = random_keras_weights(rng, bi.forward_layer)
        bw_w = random_keras_weights(rng, bi.backward_layer)
        bi.forward_layer.set_weights(fw_w)
        bi.backward_layer.set_weights(bw_w)
        per_p += [fw_w, bw_w]
        init = []
        for p in (2 * l, 2 * l + 1):
            init += [h0[p], c0[p]] if mode == "lstm" else [h0[p]]
        res = bi(y, initial_state=init, mask=mask if masked else None)
        res = [np.asarray(a) for a in res]
        y = res[0]
        finals.append(res[1:])
        layers.append(bi)
    cfg = R.Cfg(mode, 2, H, I, "bidirectional")
    params = R.keras_to_params(cfg, per_p)
    ref = R.forward(cfg, x.transpose(1, 0, 2), h0, c0 if mode == "lstm" else None, params,
                    seq_lengths=lens if masked else None)
    out = ref["output"].transpose(1, 0, 2)
    np.testing.assert_allclose(out * mask[..., None], y * mask[..., None], atol=1e-12, rtol=0)
    for l in range(2):
        for d in range(2):
            p = 2 * l + d
            np.testing.assert_allclose(ref["output_h"][p], finals[l][d * n_state], atol=1e-12,
                                       rtol=0, err_msg="h p=%d" % p)
            if mode == "lstm":
                np.testing.assert_allclose(ref["output_c"][p], finals[l][d * n_state + 1],
                                           atol=1e-12, rtol=0, err_msg="c p=%d" % p)


# ----------------------------------------------------------------------------------------------
# (d) PyTorch (optional)
# ----------------------------------------------------------------------------------------------

def torch_module(torch, cfg, params):
    kw = dict(num_layers=cfg.L, bidirectional=cfg.D == 2, dtype=torch.float64)
    if cfg.rnn_mode == "lstm":
        m = torch.nn.LSTM(cfg.I, cfg.H, proj_size=cfg.num_proj, **kw)
    elif cfg.rnn_mode == "gru":
        m = torch.nn.GRU(cfg.I, cfg.H, **kw)
    else:
        m = torch.nn.RNN(cfg.I, cfg.H, nonlinearity=cfg.rnn_mode[4:], **kw)
    layers = R.unpack(cfg, params)
    with torch.no_grad():
        for p, lay in enumerate(layers):
            sfx = "_l%d%s" % (p // cfg.D, "_reverse" if p % cfg.D else "")
            getattr(m, "weight_ih" + sfx).copy_(torch.tensor(np.concatenate(list(lay["W"]))))
            getattr(m, "weight_hh" + sfx).copy_(torch.tensor(np.concatenate(list(lay["R"]))))
            getattr(m, "bias_ih" + sfx).copy_(torch.tensor(lay["bW"].reshape(-1)))
            getattr(m, "bias_hh" + sfx).copy_(torch.tensor(lay["bR"].reshape(-1)))
            if cfg.proj:
                getattr(m, "weight_hr" + sfx).copy_(torch.tensor(lay["P"]))
    return m


def torch_params_grad(cfg, m):
    grads = []
    for p in range(cfg.L * cfg.D):
        sfx = "_l%d%s" % (p // cfg.D, "_reverse" if p % cfg.D else "")
        g = lambda name: getattr(m, name + sfx).grad.numpy()  # noqa: E731
        grads.append(dict(W=g("weight_ih").reshape(cfg.G, cfg.H, -1),
                          R=g("weight_hh").reshape(cfg.G, cfg.H, -1),
                          bW=g("bias_ih").reshape(cfg.G, cfg.H),
                          bR=g("bias_hh").reshape(cfg.G, cfg.H),
                          P=g("weight_hr") if cfg.proj else None))
    return R.pack(cfg, grads)


TORCH_CASES = [("lstm", 2, "bidirectional", 0), ("lstm", 2, "bidirectional", 2),
               ("gru", 3, "bidirectional", 0), ("rnn_tanh", 2, "unidirectional", 0),
               ("rnn_relu", 1, "bidirectional", 0), ("lstm", 1, "unidirectional", 0)]


@pytest.mark.parametrize("mode,L,direction,proj", TORCH_CASES)
@pytest.mark.parametrize("varlen", [False, True])
def test_forward_and_backward_match_torch(rng, mode, L, direction, proj, varlen):
    torch = pytest.importorskip("torch")
    cfg = R.Cfg(mode, L, 4, 3, direction, num_proj=proj)
    T, B = 4, 3
    lens = [4, 2, 3] if varlen else None
    inp = R.random_inputs(rng, cfg, T, B)
    cot = R.random_cotangents(rng, cfg, T, B)
    ref = call_forward(cfg, inp, seq_lengths=lens)
    grads = call_backward(cfg, inp, cot, seq_lengths=lens)
    m = torch_module(torch, cfg, inp["params"])
    x = torch.tensor(inp["input"], requires_grad=True)
    h0 = torch.tensor(inp["input_h"], requires_grad=True)
    state = h0
    if cfg.is_lstm:
        c0 = torch.tensor(inp["input_c"], requires_grad=True)
        state = (h0, c0)
    if varlen:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lens),
                                                         enforce_sorted=False)
        y, hn = m(packed, state)
        y = torch.nn.utils.rnn.pad_packed_sequence(y, total_length=T)[0]
    else:
        y, hn = m(x, state)
    h_n, c_n = hn if cfg.is_lstm else (hn, None)
    np.testing.assert_allclose(y.detach().numpy(), ref["output"], atol=1e-12, rtol=0)
    np.testing.assert_allclose(h_n.detach().numpy(), ref["output_h"], atol=1e-12, rtol=0)
    loss = (y * torch.tensor(cot["dy"])).sum() + (h_n * torch.tensor(cot["dh"])).sum()
    if cfg.is_lstm:
        np.testing.assert_allclose(c_n.detach().numpy(), ref["output_c"], atol=1e-12, rtol=0)
        loss = loss + (c_n * torch.tensor(cot["dc"])).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), grads["input_backprop"], atol=1e-11, rtol=0)
    np.testing.assert_allclose(h0.grad.numpy(), grads["input_h_backprop"], atol=1e-11, rtol=0)
    if cfg.is_lstm:
        np.testing.assert_allclose(c0.grad.numpy(), grads["input_c_backprop"], atol=1e-11,
                                   rtol=0)
    np.testing.assert_allclose(torch_params_grad(cfg, m), grads["params_backprop"], atol=1e-11,
                               rtol=0)
