"""Smoke tests of the benchmark CLI (python -m tf_lstm_ops.bench): argument handling, one tiny
in-process run (JSON keys and contenders, the table, the plot) and the torch-absent path.
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


def run_main(argv, capsys):
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
        code = bench.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One tiny --quick run of both families, torch made unimportable; (json, stdout, stderr,
    plot path or None). capsys is function-scoped, so the output is captured by hand."""
    out_dir = tmp_path_factory.mktemp("bench")
    json_path = out_dir / "bench.json"
    plot_path = out_dir / "bench.png" if HAVE_MATPLOTLIB else None
    argv = ["--quick", "--shape", ",".join(map(str, SHAPE)), "--repeats", str(REPEATS),
            "--json", str(json_path)]
    if plot_path:
        argv += ["--plot", str(plot_path)]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(out), redirect_stderr(err):
        patch.setitem(sys.modules, "torch", None)
        code = bench.main(argv)
    assert code == 0, err.getvalue()
    with open(json_path) as f:
        report = json.load(f)
    return report, out.getvalue(), err.getvalue(), plot_path


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--shape", "--dtype", "--family", "--repeats", "--warmup", "--quick", "--json",
                 "--plot", "--quiet", "--memory", "--torch-path"):
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
    args = bench.parse_args(["--quick", "--shape", "5x4x3x2", "--dtype", "fp16,bfloat16",
                             "--dtype", "half", "--family", "gru"])
    assert args.shapes == [(5, 4, 3, 2)]
    assert args.dtypes == ["half", "bfloat16"] and args.families == ["gru"]
    assert args.repeats == bench.QUICK_REPEATS


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


def test_json_has_raw_numbers_and_expected_contenders(quick_run):
    report = quick_run[0]
    for key in ("config", "machine", "sgemm", "results", "speedups", "skipped", "notes",
                "runtime_s"):
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
                    "min_ms", "samples_ms", "flop", "gflops", "pct_peak", "speedup", "baseline"):
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


def test_torch_absence_is_a_note_not_an_error(quick_run):
    report, out = quick_run[0], quick_run[1]
    skipped = [s for s in report["skipped"] if s["contender"] == "torch"]
    assert {s["family"] for s in skipped} == {"lstm", "gru"}
    assert all("torch not importable" in s["reason"] for s in skipped)
    assert "torch not importable" in out


def test_table_is_printed(quick_run):
    out, err = quick_run[1], quick_run[2]
    for text in ("contender", "median ms", "GFLOP/s", "% peak", "speedup", "sgemm peak",
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
