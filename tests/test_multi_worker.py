"""MultiWorkerMirroredStrategy across two worker processes on 127.0.0.1 (TF_CONFIG, free ports,
bounded time): both workers end with identical weights, equal to one process trained on the
global batch. The same command runs across real machines (README: "Several machines")."""

import json
import os
import socket
import subprocess
import sys

import numpy as np

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi_worker_worker.py")
TIMEOUT_S = 300


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_train_like_one_process(tmp_path):
    ports = [str(p) for p in free_ports(2)]
    outs = {k: str(tmp_path / ("%s.json" % k)) for k in ("0", "1", "single")}
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    procs = {k: subprocess.Popen([sys.executable, WORKER, k] + ports + [outs[k]], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in ("0", "1")}
    single = subprocess.run([sys.executable, WORKER, "single"] + ports + [outs["single"]],
                            env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    logs = {}
    try:
        for k, proc in procs.items():
            logs[k], _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        for proc in procs.values():
            proc.kill()
    for k, proc in procs.items():
        assert proc.returncode == 0, "worker %s:\n%s" % (k, logs[k][-4000:])

    results = {}
    for k, path in outs.items():
        with open(path) as f:
            results[k] = json.load(f)
    assert results["0"]["replicas"] == 2 and results["single"]["replicas"] == 1
    w0, w1, ws = ([np.asarray(w) for w in results[k]["weights"]] for k in ("0", "1", "single"))
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)  # the workers agree exactly
    for a, b in zip(w0, ws):
        np.testing.assert_allclose(a, b, atol=2e-5)  # and equal one process on the global batch
    np.testing.assert_allclose(results["0"]["loss"], results["single"]["loss"], rtol=1e-4)
    assert results["single"]["loss"][1] < results["single"]["loss"][0]  # it trained
