"""--memory: the peak resident memory a step (fwd+bwd, an HVP, an inference forward) adds,
measured in a fresh subprocess (python -m tf_lstm_ops.bench --memory-worker) per case and
contender; memory_worker is what runs there."""

import gc
import json
import os
import subprocess
import sys

from tf_lstm_ops.bench._common import _first_line
from tf_lstm_ops.bench.contenders import STEP_PHASES, Case, contenders_for
from tf_lstm_ops.bench.environment import import_torch, setup_threads

# The --memory subprocess: TF's oneDNN builds allocate through a caching BFC allocator by default,
# which would hide a step's memory after the first call; the system allocator with these glibc
# settings returns every block of 64 KiB or more to the OS on free.
MEMORY_ENV = {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "true", "MALLOC_MMAP_THRESHOLD_": "65536",
              "MALLOC_TRIM_THRESHOLD_": "0"}


def _proc_status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise OSError("no %s in /proc/self/status" % field)


def memory_worker(spec):
    """Runs in the subprocess: prints {contender key: peak MB or "error: ..."} as JSON."""
    torch, _ = import_torch(spec["no_torch"], spec["torch_path"])
    threads = setup_threads(spec["threads"], [])
    import tf_lstm_ops  # noqa: F401  (loads the ops)

    case = Case(spec["family"], spec["dtype"], spec["shape"], threads, torch)
    out = {}
    for contender in contenders_for(spec["family"], spec["contenders"]):
        if not _measures_memory(contender, spec["dtype"]):
            continue
        try:
            fn = contender.build(case)[memory_phase(contender)]
            for _ in range(2):
                fn()
            growth = []
            for _ in range(2):
                gc.collect()
                base = _proc_status_mb("VmRSS")
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to the current RSS
                fn()
                growth.append(_proc_status_mb("VmHWM") - base)
            out[contender.key] = max(growth)
            del fn
        except Exception as error:
            out[contender.key] = "error: %s: %s" % (type(error).__name__, _first_line(error))
        gc.collect()
    print("MEMORY-RESULT " + json.dumps(out))


def memory_phase(contender):
    """The phase whose peak memory --memory reports: fwd+bwd, the HVP of an HVP contender, the
    forward of an inference contender (None for one with none of them)."""
    return next((p for p in STEP_PHASES if p in contender.phases), None)


def _measures_memory(contender, dtype):
    return memory_phase(contender) in contender.phases and dtype in contender.dtypes


def measure_memory(family, dtype, shape, args, progress):
    """{contender key: peak MB or "error: ..."}, each contender in its own fresh subprocess: in a
    shared one, what earlier contenders left resident (freed heap, TF's and torch's caches) would
    serve the later ones' allocations and hide their memory."""
    env = dict(os.environ, **MEMORY_ENV)
    # The directory holding tf_lstm_ops/ (this file is tf_lstm_ops/bench/memory.py), so the
    # worker imports this same copy of the package.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    progress.say("%s %s (%s): peak memory of a step (a subprocess per contender) ..."
                 % (family, dtype, ",".join(map(str, shape))))
    results, errors = {}, []
    for contender in contenders_for(family, args.contenders):
        if not _measures_memory(contender, dtype) or (contender.needs == "torch"
                                                       and args.no_torch):
            continue
        spec = {"family": family, "dtype": dtype, "shape": list(shape), "threads": args.threads,
                "contenders": [contender.key], "no_torch": args.no_torch,
                "torch_path": args.torch_path}
        proc = subprocess.run([sys.executable, "-m", "tf_lstm_ops.bench", "--memory-worker",
                               json.dumps(spec)], env=env, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("MEMORY-RESULT ")]
        if lines:
            results.update(json.loads(lines[-1][len("MEMORY-RESULT "):]))
        else:
            errors.append("memory subprocess for %s failed (exit %d): %s" % (
                contender.key, proc.returncode,
                (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]))
    return results, "; ".join(errors) or None
