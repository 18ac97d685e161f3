"""Builds the GPU self-test module (the *.cu.cc launchers of cc/gpu and of every family in
FAMILIES, cc/gpu/cublas_runtime.cc and the bindings here) with nvcc, without TensorFlow or Bazel:
`python tools/gpu_selftest/build.py [--arch 90]` (from the repository root) or
`from tools.gpu_selftest import build; build.load()`.

The module lands in build/gpu_selftest/sm_<arch>/ (gitignored; one folder per target, so the
tests' sm_80 build and a GPU's own build do not evict each other) and is rebuilt only when a
source, the flags or nvcc change. Objects compile in parallel.

TF_LSTM_OPS_SELFTEST_HOST_FLAGS (e.g. "-fsanitize=address -fsanitize=undefined", as
tools/sanitize.sh sets it) adds host-compiler flags to every object and the link; such a build
lands in a folder of its own (sm_<arch>_<hash of the flags>).
"""

import argparse
import concurrent.futures
import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(ROOT, "build", "gpu_selftest")
MODULE = "_rnn_gpu_selftest"
# The engine families (cc/<family>/) whose GPU launchers the module holds.
FAMILIES = ("block_lstm", "cudnn_rnn", "layer_norm_lstm", "layer_norm_rnn")


def sources():
    """The module's translation units: the launcher files, the runtime, the bindings."""
    launchers = [os.path.join(ROOT, "cc", d, "*.cu.cc") for d in ("gpu",) + FAMILIES]
    return sorted(sum((glob.glob(g) for g in launchers), [])
                  + [os.path.join(ROOT, "cc", "gpu", "cublas_runtime.cc")]
                  + glob.glob(os.path.join(HERE, "*.cu.cc")))


def headers():
    folders = [os.path.join(ROOT, "cc", d) for d in ("core", "gpu") + FAMILIES]
    return sorted(sum((glob.glob(os.path.join(f, "*.h*")) for f in folders), [])
                  + glob.glob(os.path.join(HERE, "*.h")))


def find_nvcc():
    """$NVCC, nvcc on PATH, $CUDA_HOME/bin/nvcc, then /usr/local/cuda/bin/nvcc."""
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc")
    if not nvcc and os.environ.get("CUDA_HOME"):
        nvcc = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
    if not nvcc and os.path.exists("/usr/local/cuda/bin/nvcc"):
        nvcc = "/usr/local/cuda/bin/nvcc"
    if not nvcc or not os.path.exists(nvcc):
        raise RuntimeError("nvcc not found: put it on PATH or set NVCC or CUDA_HOME")
    return nvcc


def pybind11_include():
    import pybind11

    return pybind11.get_include()


def gencode(arch):
    """-gencode flags: the given compute capability (e.g. "90"), or sm_80 + sm_90 + PTX."""
    archs = [arch] if arch else ["80", "90"]
    flags = []
    for a in archs:
        flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
    flags += ["-gencode", "arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1])]
    return flags


def host_flags():
    """Extra host-compiler flags from TF_LSTM_OPS_SELFTEST_HOST_FLAGS."""
    return os.environ.get("TF_LSTM_OPS_SELFTEST_HOST_FLAGS", "").split()


def out_dir(arch=None):
    """Where the module for `arch` (and the extra host flags, if any) is built."""
    name = "sm_" + (arch or "80_90")
    if host_flags():
        name += "_" + hashlib.sha256(" ".join(host_flags()).encode()).hexdigest()[:8]
    return os.path.join(OUT_DIR, name)


def build(arch=None, verbose=False, jobs=None):
    """Compiles and links the module if it is out of date; returns its path."""
    nvcc = find_nvcc()
    OUT = out_dir(arch)
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    common = ["-std=c++17", "-O2", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden",
              "--expt-relaxed-constexpr", "-I" + ROOT, "-I" + pybind11_include(),
              "-I" + sysconfig.get_paths()["include"]] + gencode(arch)
    extra = [arg for flag in host_flags() for arg in ("-Xcompiler", flag)]
    common += extra
    srcs = sources()
    key = hashlib.sha256()
    for path in srcs + headers():
        key.update(path.encode())
        with open(path, "rb") as f:
            key.update(f.read())
    key.update(" ".join(common).encode())
    key.update(version.encode())
    digest = key.hexdigest()[:16]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = os.path.join(OUT, MODULE + suffix)
    stamp = os.path.join(OUT, "stamp")
    if os.path.exists(target) and os.path.exists(stamp) and open(stamp).read() == digest:
        return target
    os.makedirs(OUT, exist_ok=True)

    def compile_one(src):
        obj = os.path.join(OUT, os.path.basename(src) + ".o")
        cmd = [nvcc] + common + ["-x", "cu", "-c", src, "-o", obj]
        if verbose:
            print(" ".join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError("nvcc failed on %s:\n%s%s" % (src, proc.stdout, proc.stderr))
        return obj

    jobs = jobs or min(8, os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        objects = list(pool.map(compile_one, srcs))
    link = [nvcc, "-shared", "-o", target] + objects + gencode(arch) + extra + [
        "-cudart", "static", "-ldl", "-lrt"]
    proc = subprocess.run(link, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("linking %s failed:\n%s%s" % (target, proc.stdout, proc.stderr))
    with open(stamp, "w") as f:
        f.write(digest)
    return target


def load(arch=None, verbose=False):
    """Builds if needed and imports the module."""
    path = build(arch, verbose)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", help="compute capability to build for, e.g. 90 (default: "
                        "80 and 90 plus PTX)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    print(build(args.arch, args.verbose))


if __name__ == "__main__":
    sys.exit(main())
