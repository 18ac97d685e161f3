"""Smoke tests of the benchmark CLI (python -m tf_lstm_ops.bench): argument handling, one tiny
in-process run (JSON keys and contenders, the table, the plot, the FMA peak), one tiny
--inference run and the torch-absent path.
No timing assertions: the numbers of a tiny run on a shared machine mean nothing."""

import argparse
import importlib.util
import io
import json
import os
import sys
from contextlib import redirect_stderr, redirect_stdout

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

from tf_lstm_ops import bench  # noqa: E402

SHAPE = (3, 2, 4, 4)
REPEATS = 2
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
try:
    import tf_lstm_ops.keras  # noqa: F401
    HAVE_OURS_KERAS = True
except Exception:  # the Keras layers are optional for the benchmark
    HAVE_OURS_KERAS = False
try:
    import tensorflow as tf

    HAVE_TFLITE = hasattr(tf.lite, "TFLiteConverter") and hasattr(tf.lite, "Interpreter")
except Exception:  # a TensorFlow without tf.lite
    HAVE_TFLITE = False

EXPECTED = {  # contender -> phases, per family (torch is blocked below)
    "lstm": {
        "ours_block": ("fwd", "bwd", "fwd+bwd"),
        "ours_tape": ("fwd+bwd",),
        "ours_cudnn": ("fwd", "bwd", "fwd+bwd"),
        "ours_cell_loop": ("fwd", "fwd+bwd"),
        "tf_block": ("fwd", "bwd", "fwd+bwd"),
        "tf_cell_loop": ("fwd",),
        "keras": ("fwd", "fwd+bwd"),
        "keras_fallback": ("fwd", "fwd+bwd"),
    },
    "gru": {
        "ours_cudnn": ("fwd", "bwd", "fwd+bwd"),
        "keras": ("fwd", "fwd+bwd"),
        "keras_fallback": ("fwd", "fwd+bwd"),
    },
}
if HAVE_OURS_KERAS:
    for _family in EXPECTED:
        for _key in ("ours_keras", "ours_keras_mask", "ours_keras_fallback"):
            EXPECTED[_family][_key] = ("fwd", "fwd+bwd")
# --inference: the contenders with a row here (torch is blocked; TFLite converts our layer's model)
EXPECTED_INFERENCE = {"lstm": {"ours_block_inf", "ours_cudnn_inf", "ours_cudnn_eager_inf",
                               "keras_inf"},
                      "gru": {"ours_cudnn_inf", "ours_cudnn_eager_inf", "keras_inf"}}
for _family in EXPECTED_INFERENCE:
    EXPECTED_INFERENCE[_family] |= {"ours_keras_inf"} if HAVE_OURS_KERAS else set()
    EXPECTED_INFERENCE[_family] |= {"tflite_inf"} if HAVE_OURS_KERAS and HAVE_TFLITE else set()


def run_main(argv, capsys):
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
        code = bench.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _quick_report(out_dir, extra_argv=(), plot_path=None):
    """One tiny --quick run at SHAPE, torch made unimportable; (json, stdout, stderr). capsys is
    function-scoped, so the module fixtures capture the output by hand."""
    json_path = out_dir / "bench.json"
    argv = ["--quick", "--shape", ",".join(map(str, SHAPE)), "--repeats", str(REPEATS),
            "--json", str(json_path)] + list(extra_argv)
    if plot_path:
        argv += ["--plot", str(plot_path)]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        patch.setitem(sys.modules, "torch", None)
        code = bench.main(argv)
    assert code == 0, err.getvalue()
    with open(json_path) as f:
        report = json.load(f)
    return report, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One tiny --quick run of both families; (json, stdout, stderr, plot path or None)."""
    out_dir = tmp_path_factory.mktemp("bench")
    plot_path = out_dir / "bench.png" if HAVE_MATPLOTLIB else None
    return _quick_report(out_dir, plot_path=plot_path) + (plot_path,)


@pytest.fixture(scope="module")
def inference_run(tmp_path_factory):
    """One tiny --quick --inference run of both families; (json, stdout, stderr)."""
    return _quick_report(tmp_path_factory.mktemp("bench_inference"), ["--inference"])


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--shape", "--dtype", "--family", "--repeats", "--warmup", "--quick", "--json",
                 "--plot", "--quiet", "--memory", "--torch-path", "--hvp", "--inference",
                 "--configs"):
        assert flag in out


@pytest.mark.parametrize("argv", [
    ["--shape", "1,2,3"],
    ["--shape", "0,1,1,1"],
    ["--shape", "a,b,c,d"],
    ["--dtype", "int8"],
    ["--family", "rnn"],
    ["--repeats", "0"],
    ["--warmup", "-1"],
    ["--contenders", "ours_block,nope"],
    ["--contenders", "tf_block", "--family", "gru"],
    ["--baseline", "nope"],
    ["--plot", "chart.jpg"],
    ["--cooldown", "-1"],
    ["--lead-in", "-1"],
    ["--inference", "--hvp"],
    ["--configs", "--inference"],
    ["--no-such-flag"],
])
def test_bad_arguments_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "error:" in err
    assert "Traceback" not in err


def test_argument_defaults_and_lists():
    args = bench.parse_args([])
    assert args.shapes == list(bench.DEFAULT_SHAPES)
    assert args.dtypes == ["float32"] and args.families == ["lstm", "gru"]
    assert args.repeats == bench.DEFAULT_REPEATS
    assert args.cooldown == bench.DEFAULT_COOLDOWN_MS
    assert args.lead_in == bench.DEFAULT_LEAD_IN == 1
    assert bench.parse_args(["--quick"]).lead_in == bench.QUICK_LEAD_IN == 0
    assert bench.parse_args(["--inference"]).lead_in == 0
    assert bench.parse_args(["--lead-in", "3"]).lead_in == 3
    args = bench.parse_args(["--quick", "--shape", "5x4x3x2", "--dtype", "fp16,bfloat16",
                             "--dtype", "half", "--family", "gru"])
    assert args.shapes == [(5, 4, 3, 2)]
    assert args.dtypes == ["half", "bfloat16"] and args.families == ["gru"]
    assert args.repeats == bench.QUICK_REPEATS


@pytest.mark.parametrize("lead_in", [0, 2])
def test_each_timed_call_follows_its_lead_in_calls(lead_in):
    """The timed rounds: after the untimed first call and --warmup calls, each of --repeats timed
    calls of a callable comes right after --lead-in untimed calls of the same callable."""
    from tf_lstm_ops.bench.contenders import Case, Contender
    from tf_lstm_ops.bench.timing import Progress, run_case

    log = []

    def build(case):
        return {phase: (lambda phase=phase: log.append(phase)) for phase in ("fwd", "bwd")}

    contender = Contender("fake", "lstm", "fake", ("fwd", "bwd"), build, dtypes=("float32",))
    args = argparse.Namespace(warmup=1, repeats=3, cooldown=0.0, lead_in=lead_in)
    cells = run_case(Case("lstm", "float32", SHAPE, 1), [contender], args,
                     Progress(quiet=True, total=2), [])
    assert [len(cell.samples) for cell in cells] == [3, 3]
    timed = log[2 * (1 + args.warmup):]  # after the first call and the warm-up of each phase
    # rounds rotate the order; each timed call is one run of lead_in + 1 calls of one phase
    runs = [timed[i:i + lead_in + 1] for i in range(0, len(timed), lead_in + 1)]
    assert len(runs) == 2 * args.repeats
    assert all(len(set(run)) == 1 for run in runs)


def test_hvp_contenders_run_only_when_asked_for():
    from tf_lstm_ops.bench.contenders import HVP_CONTENDERS, contenders_for

    default = {c.key for c in contenders_for("lstm", None)}
    assert not any(key.endswith("_hvp") for key in default)
    args = bench.parse_args(["--hvp"])
    assert args.contenders == list(HVP_CONTENDERS) and args.baseline == "ours_cudnn_hvp"
    assert {c.key for c in contenders_for("lstm", args.contenders)} == set(HVP_CONTENDERS)
    # the block op is LSTM-only
    assert {c.key for c in contenders_for("gru", args.contenders)} == set(HVP_CONTENDERS) - {
        "ours_block", "ours_block_hvp"}
    args = bench.parse_args(["--hvp", "--contenders", "keras_hvp", "--baseline", "keras_hvp"])
    assert args.contenders == ["keras_hvp"] and args.baseline == "keras_hvp"


def test_configs_mode_runs_the_configurations_beside_our_layer(tmp_path):
    from tf_lstm_ops.bench.contenders import CONFIG_CONTENDERS, contenders_for

    args = bench.parse_args(["--configs"])
    assert args.contenders == list(CONFIG_CONTENDERS) and args.baseline == "ours_keras"
    if not HAVE_OURS_KERAS:
        return
    report = _quick_report(tmp_path, ["--configs", "--family", "lstm"])[0]
    rows = {(r["contender"], r["phase"]) for r in report["results"] if r.get("median_ms")}
    lstm_keys = {c.key for c in contenders_for("lstm", CONFIG_CONTENDERS)}
    assert "ours_keras_zoneout" in lstm_keys and "ours_keras_reset_before" not in lstm_keys
    for key in lstm_keys:  # (GRU's reset_before and zoneout rows run with --family gru)
        assert (key, "fwd+bwd") in rows, key


def test_layernorm_mode_runs_ours_and_the_keras_cell(tmp_path):
    from tf_lstm_ops.bench.contenders import LAYER_NORM_CONTENDERS, contenders_for

    args = bench.parse_args(["--layernorm"])
    assert args.contenders == list(LAYER_NORM_CONTENDERS)
    assert args.families == ["lstm", "gru"] and args.baseline == "ours_layernorm"
    if not HAVE_OURS_KERAS:
        return
    report = _quick_report(tmp_path, ["--layernorm"])[0]
    rows = {(r["family"], r["contender"], r["phase"]) for r in report["results"]
            if r.get("median_ms")}
    for family in ("lstm", "gru"):  # (the quick report blocks torch)
        for contender in contenders_for(family, LAYER_NORM_CONTENDERS):
            if contender.needs == "torch":
                continue
            for phase in ("fwd", "fwd+bwd"):
                assert (family, contender.key, phase) in rows, (family, contender.key)


def test_inference_contenders_run_only_when_asked_for():
    from tf_lstm_ops.bench.contenders import INFERENCE_CONTENDERS, contenders_for

    for family in ("lstm", "gru"):
        assert not any(c.key.endswith("_inf") for c in contenders_for(family, None))
    args = bench.parse_args([])
    assert args.shapes == list(bench.DEFAULT_SHAPES) and not args.inference
    assert bench.STREAMING_SHAPE not in args.shapes
    args = bench.parse_args(["--inference"])
    assert args.contenders == list(INFERENCE_CONTENDERS) and args.baseline == "ours_keras_inf"
    assert args.shapes == list(bench.DEFAULT_SHAPES) + [(1, 1, 256, 256)]
    assert {c.key for c in contenders_for("lstm", args.contenders)} == set(INFERENCE_CONTENDERS)
    # the block op is LSTM-only
    assert {c.key for c in contenders_for("gru", args.contenders)} == set(
        INFERENCE_CONTENDERS) - {"ours_block_inf"}
    assert all(c.phases == ("inf",) for c in contenders_for("gru", args.contenders))
    args = bench.parse_args(["--inference", "--quick"])
    assert args.shapes == list(bench.QUICK_SHAPES)
    args = bench.parse_args(["--inference", "--contenders", "keras_inf,tflite_inf",
                             "--baseline", "keras_inf", "--shape", "1,1,8,8"])
    assert args.contenders == ["keras_inf", "tflite_inf"] and args.baseline == "keras_inf"
    assert args.shapes == [(1, 1, 8, 8)]


def test_json_has_raw_numbers_and_expected_contenders(quick_run):
    report = quick_run[0]
    for key in ("config", "machine", "fma_peak", "sgemm", "results", "speedups", "skipped",
                "notes", "runtime_s"):
        assert key in report
    for key in ("cpu_count", "usable_cpus", "tf_version", "keras_version", "torch_version",
                "tf_intra_op_threads", "tf_inter_op_threads"):
        assert key in report["machine"]
    assert report["machine"]["torch_version"] is None
    assert report["sgemm"]["gflops"] > 0 and report["sgemm"]["samples_ms"]
    assert report["config"]["repeats"] == REPEATS

    found = {}
    for row in report["results"]:
        for key in ("family", "dtype", "shape", "contender", "name", "phase", "median_ms",
                    "min_ms", "samples_ms", "flop", "gflops", "pct_peak", "pct_sgemm", "speedup",
                    "baseline"):
            assert key in row, key
        assert row["shape"] == list(SHAPE) and row["dtype"] == "float32"
        assert len(row["samples_ms"]) == REPEATS
        assert row["median_ms"] > 0 and row["gflops"] > 0 and row["pct_peak"] > 0
        found.setdefault(row["family"], {}).setdefault(row["contender"], []).append(row["phase"])
    for family, contenders in EXPECTED.items():
        assert {k: tuple(v) for k, v in found[family].items()} == contenders, family

    lstm_fwd = [r for r in report["results"] if r["family"] == "lstm" and r["phase"] == "fwd"]
    T, B, I, H = SHAPE
    assert all(r["flop"] == 8 * B * H * (I + H) * T for r in lstm_fwd)
    base = next(r for r in lstm_fwd if r["contender"] == "ours_block")
    assert base["speedup"] == pytest.approx(1.0)
    assert any(p["ours"] == "ours_block" and p["other"] == "keras" for p in report["speedups"])


def test_pct_peak_is_of_the_measured_fma_peak(quick_run):
    report = quick_run[0]
    fma, machine = report["fma_peak"], report["machine"]
    # one concurrent thread per TF intra-op thread, summed
    assert fma["threads"] == machine["tf_intra_op_threads"]
    assert len(fma["per_thread_gflops"]) == fma["threads"]
    assert all(v > 0 for v in fma["per_thread_gflops"])
    assert fma["gflops"] == pytest.approx(sum(fma["per_thread_gflops"]))
    assert fma["seconds"] == bench.QUICK_FMA_SECONDS
    assert fma["isa"] == machine["cpu_kernels_isa"]
    for row in report["results"]:
        assert row["pct_peak"] == pytest.approx(100.0 * row["gflops"] / fma["gflops"])
        assert row["pct_sgemm"] == pytest.approx(100.0 * row["gflops"] / report["sgemm"]["gflops"])


def test_fma_peak_of_an_older_library_is_a_note(monkeypatch):
    """A library built before tf_lstm_ops_fma_peak_gflops: no peak, a note, % peak empty."""
    import tf_lstm_ops._loader as loader

    from tf_lstm_ops.bench.table import _pct

    def missing(seconds):
        raise AttributeError("undefined symbol: tf_lstm_ops_fma_peak_gflops")

    class Quiet:
        def say(self, _):
            pass

    monkeypatch.setattr(loader, "fma_peak_gflops", missing)
    notes = []
    assert bench.measure_fma_peak(2, 0.01, Quiet(), notes) is None
    assert len(notes) == 1 and "FMA peak not measured" in notes[0]
    assert _pct(None) == "-"


def test_inference_run_has_a_row_per_contender(inference_run):
    report = inference_run[0]
    assert report["config"]["inference"] and report["config"]["baseline"] == "ours_keras_inf"
    found = {}
    for row in report["results"]:
        assert row["phase"] == "inf" and len(row["samples_ms"]) == REPEATS
        assert row["median_ms"] > 0 and row["pct_peak"] > 0
        found.setdefault(row["family"], set()).add(row["contender"])
    assert found == EXPECTED_INFERENCE
    T, B, I, H = SHAPE
    lstm = [r for r in report["results"] if r["family"] == "lstm"]
    assert all(r["flop"] == 8 * B * H * (I + H) * T for r in lstm)  # an inference forward
    if HAVE_OURS_KERAS:
        base = next(r for r in lstm if r["contender"] == "ours_keras_inf")
        assert base["speedup"] == pytest.approx(1.0)
        assert all(r["baseline"] == "ours_keras_inf" for r in report["results"])
    skipped = {(s["family"], s["contender"]): s["reason"] for s in report["skipped"]}
    assert "torch not importable" in skipped[("lstm", "torch_inf")]
    assert "torch not importable" in skipped[("gru", "torch_inf")]


@pytest.mark.skipif(not (HAVE_OURS_KERAS and HAVE_TFLITE),
                    reason="needs tf_lstm_ops.keras and tf.lite")
def test_inference_run_notes_what_tflite_runs(inference_run):
    report, out = inference_run[0], inference_run[1]
    # The note says whether the converted LSTM is TFLite's fused builtin; a GRU never is.
    lstm_note = next(n for n in report["notes"] if n.startswith("TFLite lstm: converted from"))
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in lstm_note
    assert any(n.startswith("TFLite gru: converted from") and "NOT fused" in n
               for n in report["notes"])
    for text in ("TFLite LSTM (stock export)", "ours keras.LSTM inference", "== gru float32",
                 "inf = fwd", "TFLite lstm: converted from"):
        assert text in out, text


def test_tflite_skips_dtypes_it_cannot_run(capsys):
    code, out, err = run_main(["--quick", "--quiet", "--shape", "2,1,3,2", "--repeats", "1",
                               "--inference", "--family", "lstm", "--dtype", "bfloat16",
                               "--contenders", "ours_cudnn_inf,tflite_inf", "--json", "-"],
                              capsys)
    assert code == 0
    report = json.loads(out)
    assert {r["contender"] for r in report["results"]} == {"ours_cudnn_inf"}
    assert [s["contender"] for s in report["skipped"]] == ["tflite_inf"]
    assert "float32 models only" in report["skipped"][0]["reason"]
    assert "skipped TFLite LSTM (stock export)" in err


def test_torch_absence_is_a_note_not_an_error(quick_run):
    report, out = quick_run[0], quick_run[1]
    skipped = [s for s in report["skipped"] if s["contender"] == "torch"]
    assert {s["family"] for s in skipped} == {"lstm", "gru"}
    assert all("torch not importable" in s["reason"] for s in skipped)
    assert "torch not importable" in out


def test_table_is_printed(quick_run):
    out, err = quick_run[1], quick_run[2]
    for text in ("contender", "median ms", "GFLOP/s", "% peak", "speedup", "FMA peak (hardware",
                 "sgemm (information): tf.matmul", "% peak = GFLOP/s / FMA peak",
                 "== lstm float32  T=3 B=2 I=4 H=4", "== gru float32", "ours BlockLSTMV2",
                 "tf.raw_ops BlockLSTMV2", "keras.layers.LSTM", "keras.layers.GRU", "fwd+bwd",
                 "runtime"):
        assert text in out, text
    assert "compile + warm-up" in err and "timing round" in err  # progress on stderr


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="matplotlib is not installed")
def test_plot_writes_a_png(quick_run):
    plot_path = quick_run[3]
    with open(plot_path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_json_to_stdout_quiet_and_unsupported_dtype_note(capsys):
    code, out, err = run_main(["--quick", "--quiet", "--shape", "2,1,3,2", "--repeats", "1",
                               "--family", "lstm", "--dtype", "bfloat16",
                               "--contenders", "ours_block,tf_block", "--json", "-"], capsys)
    assert code == 0
    report = json.loads(out)  # stdout is the JSON alone; the table went to stderr
    assert {r["contender"] for r in report["results"]} == {"ours_block"}
    assert [s["contender"] for s in report["skipped"]] == ["tf_block"]
    assert "bfloat16" in report["skipped"][0]["reason"]
    assert "ours BlockLSTMV2" in err and "skipped tf.raw_ops BlockLSTMV2" in err
    assert "compile + warm-up" not in err  # --quiet


def test_import_torch_handles_absence_and_disabling():
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)
        torch, note = bench.import_torch(False, ["/nonexistent/site-packages"])
        assert torch is None and "torch not importable" in note
    torch, note = bench.import_torch(True, None)
    assert torch is None and "--no-torch" in note


def test_memory_worker_reports_a_number(capsys):
    bench.memory_worker({"family": "gru", "dtype": "float32", "shape": [2, 1, 3, 2],
                         "threads": None, "contenders": ["ours_cudnn"], "no_torch": True,
                         "torch_path": None})
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("MEMORY-RESULT ")
    values = json.loads(line[len("MEMORY-RESULT "):])
    assert isinstance(values["ours_cudnn"], float)


def test_memory_runs_each_contender_in_its_own_process():
    """A contender measured after others in one process would reuse what they left resident;
    measure_memory starts a fresh worker per contender and merges their numbers."""
    class Quiet:
        def say(self, _):
            pass

    args = argparse.Namespace(threads=None, contenders=["ours_block", "tf_block"], no_torch=True,
                              torch_path=None)
    values, error = bench.measure_memory("lstm", "float32", (2, 1, 3, 2), args, Quiet())
    assert error is None
    assert sorted(values) == ["ours_block", "tf_block"]
    assert all(isinstance(v, float) for v in values.values()), values
