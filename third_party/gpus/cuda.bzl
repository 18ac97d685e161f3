"""cuda_objects: compiles .cu.cc files with nvcc into position-independent objects.

One nvcc action per source (no crosstool):
  nvcc -std=c++17 -x cu -c -O3 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden
       --expt-relaxed-constexpr -DNDEBUG -gencode arch=compute_XX,code=sm_XX ... (each capability)
       -gencode arch=compute_<max>,code=compute_<max> (PTX of the highest, for newer GPUs)
       -ccbin <the C++ toolchain's compiler> <-D/-I/-isystem of the deps' CcInfo> <copts>
The outputs (_objs/<name>/<source>.pic.o) go into a cc_library's srcs. The sources must not
include TensorFlow headers (raw pointers and cudaStream_t only), and use whole-program device
code (no -rdc), so no device-link step is needed.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@local_config_cuda//:build_defs.bzl", "CUDA_COMPUTE_CAPABILITIES")

_NVCC_FLAGS = [
    "-std=c++17",
    "-x",
    "cu",
    "-c",
    "-O3",
    "-Xcompiler",
    "-fPIC",
    "-Xcompiler",
    "-fvisibility=hidden",
    "--expt-relaxed-constexpr",
    "-DNDEBUG",
]

def _gencode(capabilities):
    flags = []
    for cap in capabilities:
        flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (cap, cap)]
    if capabilities:
        top = capabilities[-1]
        flags += ["-gencode", "arch=compute_%s,code=compute_%s" % (top, top)]
    return flags

def _object_name(src):
    name = src.basename
    for suffix in [".cu.cc", ".cu", ".cc"]:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name

def _cuda_objects_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    compilation = cc_common.merge_cc_infos(
        cc_infos = [dep[CcInfo] for dep in ctx.attr.deps],
    ).compilation_context

    flags = list(_NVCC_FLAGS) + _gencode(ctx.attr.gpu_capabilities)
    flags += ["-ccbin", cc_toolchain.compiler_executable]
    flags += ["-D" + d for d in compilation.defines.to_list()]
    flags += ["-D" + d for d in ctx.attr.defines]

    # The repository root first: sources include "cc/core/...", "cc/gpu/..." and the families'.
    include_dirs = ["."]
    for d in compilation.quote_includes.to_list() + compilation.includes.to_list():
        if d not in include_dirs:
            include_dirs.append(d)
    flags += ["-I" + d for d in include_dirs]
    for d in compilation.system_includes.to_list():
        flags += ["-isystem", d]
    flags += ctx.attr.copts

    inputs = depset(
        ctx.files.hdrs,
        transitive = [
            compilation.headers,
            ctx.attr._nvcc_files.files,
            cc_toolchain.all_files,
        ],
    )
    outputs = []
    for src in ctx.files.srcs:
        out = ctx.actions.declare_file("_objs/%s/%s.pic.o" % (ctx.label.name, _object_name(src)))
        ctx.actions.run(
            executable = ctx.executable._nvcc,
            arguments = flags + [src.path, "-o", out.path],
            inputs = depset([src], transitive = [inputs]),
            outputs = [out],
            mnemonic = "NvccCompile",
            progress_message = "Compiling CUDA %s" % src.short_path,
            use_default_shell_env = True,  # PATH for the host compiler, TMPDIR for nvcc
        )
        outputs.append(out)
    return [DefaultInfo(files = depset(outputs))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    doc = "Compiles .cu.cc files with nvcc to .pic.o objects for a cc_library's srcs.",
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu.cc", ".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "defines": attr.string_list(),
        "copts": attr.string_list(doc = "Extra nvcc flags."),
        "gpu_capabilities": attr.string_list(default = CUDA_COMPUTE_CAPABILITIES),
        "_nvcc": attr.label(
            default = "@local_config_cuda//:nvcc",
            executable = True,
            cfg = "exec",
            allow_files = True,
        ),
        "_nvcc_files": attr.label(default = "@local_config_cuda//:nvcc_files"),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
    incompatible_use_toolchain_transition = True,
)
