"""The machine and process the benchmark runs in: usable CPUs, the CPU time other processes take
(from /proc/stat), TF's and torch's threads, the optional torch import, and the machine facts the
report records."""

import os
import platform
import sys
import time

from tf_lstm_ops.bench._common import _first_line


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_snapshot():
    """(wall s, busy CPU s of the whole machine, steal s, CPU s of this process and its children)
    from /proc/stat; None where that is unreadable."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
        tick = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError):
        return None
    user, nice, system, _, _, irq, softirq, steal = values + [0] * (8 - len(values))
    own = os.times()
    return (time.monotonic(), (user + nice + system + irq + softirq) / tick, steal / tick,
            own.user + own.system + own.children_user + own.children_system)


def other_cpu_use(before, after):
    """Percent of the machine's CPU time that other processes (and the hypervisor, as steal)
    used between two snapshots: the noise indicator printed with each case."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    capacity = (after[0] - before[0]) * (os.cpu_count() or 1)
    others = (after[1] - before[1]) - (after[3] - before[3]) + (after[2] - before[2])
    return max(0.0, min(100.0, 100.0 * others / capacity))


def import_torch(disabled, paths):
    """(torch module or None, note)."""
    if disabled:
        return None, "torch contenders disabled (--no-torch)"
    for path in paths or ():
        if path not in sys.path:
            sys.path.append(path)
    try:
        import torch
    except Exception as error:  # ImportError, or a broken install
        return None, "torch not importable (%s: %s): torch contenders skipped" % (
            type(error).__name__, _first_line(error))
    return torch, None


def setup_threads(threads, notes):
    """Applies --threads to TF; returns the intra-op thread count TF uses."""
    import tensorflow as tf

    if threads:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        except RuntimeError as error:  # the TF context already exists (an in-process caller)
            notes.append("--threads %d not applied to TF: %s" % (threads, _first_line(error)))
    return tf.config.threading.get_intra_op_parallelism_threads() or usable_cpus()


def machine_info(intra_threads, torch):
    import tensorflow as tf
    import keras

    from tf_lstm_ops._loader import cpu_isa

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    cpu_model = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu_model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                             None)
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tf_version": tf.__version__,
        "keras_version": keras.__version__,
        "torch_version": getattr(torch, "__version__", None),
        "cpu_kernels_isa": cpu_isa(),
        "tf_intra_op_threads": intra_threads,
        "tf_inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "load_average_start": list(load) if load else None,
    }
