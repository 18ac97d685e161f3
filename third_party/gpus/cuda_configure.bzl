"""Repository rule @local_config_cuda: the local CUDA toolkit, or a CUDA-disabled stand-in.

No crosstool and nothing downloaded: nvcc is called by the small cuda_objects rule (cuda.bzl),
and the op library links the toolkit's static cudart. Policy (TF_NEED_CUDA, written by
configure.sh into .tf_configure.bazelrc):
  1      CUDA required: no usable toolkit fails the build with the reason;
  0      CUDA disabled (CPU-only library);
  unset  auto-detect: CUDA when a usable toolkit is found.
The toolkit is $CUDA_HOME, else $CUDA_PATH, else the one the `nvcc` on PATH belongs to (asked
with `nvcc --dryrun`: a PATH entry may be a wrapper script outside the toolkit). It must have
bin/nvcc, include/cuda_runtime.h and lib64/ (or lib/) libcudart_static.a.

Generates:
  :cuda_headers     include/ (cc_library, for g++ code that includes CUDA runtime headers)
  :cudart_static    the static CUDA runtime (+ -ldl -lrt -lpthread): no libcudart.so dependency
  :nvcc, :nvcc_files  the compiler and the files it reads (inputs of the nvcc actions)
  build_defs.bzl    CUDA_AVAILABLE, CUDA_VERSION ("13.0"; "" without CUDA), CUDA_HOME,
                    CUDA_COMPUTE_CAPABILITIES (TF_CUDA_COMPUTE_CAPABILITIES, default "80,90"),
                    CUDA_DISABLED_REASON and if_cuda(a, b = []).
"""

_DEFAULT_CAPABILITIES = "80,90"

_ENVIRON = [
    "TF_NEED_CUDA",
    "CUDA_HOME",
    "CUDA_PATH",
    "TF_CUDA_COMPUTE_CAPABILITIES",
    "PATH",  # where `nvcc` is looked for without CUDA_HOME (re-running is cheap; same results)
]

def _fail(msg):
    fail("\n[cuda_configure] " + msg + "\nRe-run ./configure.sh (--cuda-home DIR, --no-cuda) " +
         "or set TF_NEED_CUDA=0 for a CPU-only build.\n")

def _realpath(rctx, path):
    result = rctx.execute(["readlink", "-f", path])
    if result.return_code != 0 or not result.stdout.strip():
        return path
    return result.stdout.strip()

def _nvcc_top(rctx, nvcc):
    """The toolkit directory of an nvcc that may be a wrapper: nvcc --dryrun prints TOP=."""
    rctx.file("probe/probe.cu", "")
    result = rctx.execute([nvcc, "--dryrun", "-c", "probe/probe.cu", "-o", "probe/probe.o"])
    for line in (result.stdout + "\n" + result.stderr).splitlines():
        line = line.strip()
        if line.startswith("#$ TOP="):
            return _realpath(rctx, line[len("#$ TOP="):].strip())
    return None

def _static_cudart(rctx, home):
    for sub in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"]:
        path = rctx.path(home + "/" + sub + "/libcudart_static.a")
        if path.exists:
            return str(path)
    return None

def _problems(rctx, home):
    """Why `home` is not a usable toolkit ([] when it is)."""
    problems = []
    for rel in ["bin/nvcc", "include/cuda_runtime.h"]:
        if not rctx.path(home + "/" + rel).exists:
            problems.append("%s/%s does not exist" % (home, rel))
    if not problems and _static_cudart(rctx, home) == None:
        problems.append("%s has no lib64/libcudart_static.a (the static CUDA runtime)" % home)
    return problems

def _find_toolkit(rctx):
    """(home, how found, reason none was found)."""
    env = rctx.os.environ
    for var in ["CUDA_HOME", "CUDA_PATH"]:
        value = env.get(var, "").strip()
        if value:
            home = _realpath(rctx, value)
            problems = _problems(rctx, home)
            if problems:
                # An explicit toolkit that is unusable is an error, never a silent CPU build.
                _fail("%s=%s is not a usable CUDA toolkit: %s." % (var, value, "; ".join(problems)))
            return home, "$" + var, None
    nvcc = rctx.which("nvcc")
    if nvcc == None:
        return None, None, "no nvcc on PATH and neither CUDA_HOME nor CUDA_PATH is set"
    top = _nvcc_top(rctx, str(nvcc))
    if top == None:
        return None, None, "'%s --dryrun' did not report its toolkit directory (TOP=)" % nvcc
    problems = _problems(rctx, top)
    if problems:
        why = "the toolkit of %s (%s) is not usable: %s" % (nvcc, top, "; ".join(problems))
        return None, None, why
    return top, "nvcc on PATH (%s)" % nvcc, None

def _version(rctx, home):
    result = rctx.execute([home + "/bin/nvcc", "--version"])
    for line in result.stdout.splitlines():
        if "release " in line:
            return line.split("release ")[1].split(",")[0].strip()
    _fail("'%s/bin/nvcc --version' failed or printed no release:\n%s%s" %
          (home, result.stdout, result.stderr))
    return None

def _capability_key(cap):
    return (int(cap.rstrip("af")), cap)

def _capabilities(rctx, home):
    """TF_CUDA_COMPUTE_CAPABILITIES as ["80", "90", ...]; accepts 8.0, sm_80, compute_80."""
    raw = rctx.os.environ.get("TF_CUDA_COMPUTE_CAPABILITIES", "").strip() or _DEFAULT_CAPABILITIES
    caps = []
    for item in raw.replace(" ", "").split(","):
        if not item:
            continue
        cap = item.replace("sm_", "").replace("compute_", "").replace(".", "")
        digits = cap.rstrip("af")
        if not digits.isdigit() or len(cap) - len(digits) > 1:
            _fail("TF_CUDA_COMPUTE_CAPABILITIES=%s: '%s' is not a compute capability " % (raw, item) +
                  "(use e.g. 80,90 or 8.0,9.0)")
        if cap not in caps:
            caps.append(cap)
    if not caps:
        _fail("TF_CUDA_COMPUTE_CAPABILITIES=%s names no compute capability" % raw)
    caps = sorted(caps, key = _capability_key)

    # Reject what this nvcc cannot target (e.g. sm_70 with CUDA 13) here, not in every action.
    result = rctx.execute([home + "/bin/nvcc", "--list-gpu-code"])
    if result.return_code == 0:
        lines = [l.strip() for l in result.stdout.splitlines()]
        supported = [l[len("sm_"):] for l in lines if l.startswith("sm_")]
        unsupported = [c for c in caps if c.rstrip("af") not in supported]  # 90a: sm_90
        if unsupported and supported:
            _fail("nvcc in %s cannot compile for compute capability %s; it supports %s" %
                  (home, ", ".join(unsupported), ", ".join(supported)))
    return caps

def _write_build_defs(rctx, available, version, home, caps, reason):
    rctx.file("build_defs.bzl", """\"\"\"Generated by cuda_configure: what @local_config_cuda found.\"\"\"

CUDA_AVAILABLE = {available}
CUDA_VERSION = "{version}"
CUDA_HOME = "{home}"
CUDA_COMPUTE_CAPABILITIES = {caps}
CUDA_DISABLED_REASON = "{reason}"

def if_cuda(if_true, if_false = []):
    \"\"\"`if_true` when the library is built with CUDA, else `if_false`.\"\"\"
    return if_true if CUDA_AVAILABLE else if_false
""".format(
        available = available,
        version = version,
        home = home,
        caps = repr(caps),
        reason = reason.replace("\\", "\\\\").replace("\"", "\\\""),
    ))

_DISABLED_BUILD = """
package(default_visibility = ["//visibility:public"])

# CUDA is disabled ({reason}): empty stand-ins, so every label exists.
cc_library(name = "cuda_headers")

cc_library(name = "cudart_static")

filegroup(name = "nvcc_files")

sh_binary(name = "nvcc", srcs = ["nvcc_disabled.sh"])
"""

_ENABLED_BUILD = """
package(default_visibility = ["//visibility:public"])

# CUDA {version} at {home} (found via {how}).
cc_library(
    name = "cuda_headers",
    hdrs = glob(["cuda/include/**"]),
    includes = ["cuda/include"],
)

# Static runtime: the op library depends on no libcudart.so (it dlopens libcuda.so.1 itself).
cc_library(
    name = "cudart_static",
    srcs = ["cuda_lib/libcudart_static.a"],
    linkopts = ["-ldl", "-lrt", "-lpthread"],
    deps = [":cuda_headers"],
)

# What nvcc reads besides the sources: its tools, libdevice and the toolkit's headers.
filegroup(
    name = "nvcc_files",
    srcs = glob(["cuda/bin/**", "cuda/nvvm/**", "cuda/include/**"]),
)

alias(name = "nvcc", actual = "cuda/bin/nvcc")
"""

def _cuda_configure_impl(rctx):
    need = rctx.os.environ.get("TF_NEED_CUDA", "").strip()
    if need not in ["", "0", "1"]:
        _fail("TF_NEED_CUDA must be 1 (require CUDA), 0 (disable) or unset (auto-detect), " +
              "not '%s'" % need)
    home, how, reason = None, None, "TF_NEED_CUDA=0"
    if need != "0":
        home, how, reason = _find_toolkit(rctx)
        if home == None and need == "1":
            _fail("TF_NEED_CUDA=1 but no usable CUDA toolkit was found: %s." % reason)

    if home == None:
        rctx.file(
            "nvcc_disabled.sh",
            "#!/bin/sh\necho 'CUDA is disabled (%s): re-run ./configure.sh --cuda' >&2\nexit 1\n" %
            reason.replace("'", ""),
            executable = True,
        )
        rctx.file("BUILD", _DISABLED_BUILD.format(reason = reason))
        _write_build_defs(rctx, False, "", "", [], reason)
        return

    version = _version(rctx, home)
    caps = _capabilities(rctx, home)
    rctx.symlink(home, "cuda")
    rctx.symlink(_static_cudart(rctx, home), "cuda_lib/libcudart_static.a")
    rctx.file("BUILD", _ENABLED_BUILD.format(version = version, home = home, how = how))
    _write_build_defs(rctx, True, version, home, caps, "")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = _ENVIRON,
    local = True,
)
