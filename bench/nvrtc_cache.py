"""NVRTC compile times of one kernel source with the CUDA driver's compute cache on (an empty
CUDA_CACHE_PATH of its own) and off (CUDA_CACHE_DISABLE=1). Each setting runs two processes one
after the other; each process warms NVRTC on an empty kernel, then compiles the source twice
and two unique variants of it (a comment appended). Where the cache is on and NVRTC's cubins go
through it, the second process compiles the source from the first's entry.

    python3 bench/nvrtc_cache.py KERNEL.cu [--arch sm_90]

KERNEL.cu: a kernel torchfuse wrote, e.g. with TORCHFUSE_DUMP=source TORCHFUSE_DUMP_DIR=DIR, or
the source `torchfuse inspect MODEL --input SPEC --arch sm_90` prints.
"""
import argparse
import ctypes
import glob
import os
import subprocess
import sys
import tempfile
import time


def nvrtc():
    paths = sorted(p for p in glob.glob("/usr/local/cuda/lib64/libnvrtc.so*")
                   if "builtins" not in p and "alt" not in p)
    if not paths:
        sys.exit("no libnvrtc.so under /usr/local/cuda/lib64")
    return ctypes.CDLL(paths[0])


def child(source_path, arch):
    """One process: milliseconds per compile, printed one per line."""
    lib = nvrtc()
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17", b"-default-device",
            b"--fmad=false"]
    argv = (ctypes.c_char_p * len(opts))(*opts)

    def compile_ms(text):
        prog = ctypes.c_void_p()
        t0 = time.perf_counter()
        lib.nvrtcCreateProgram(ctypes.byref(prog), text, b"k.cu", 0, None, None)
        status = lib.nvrtcCompileProgram(prog, len(opts), argv)
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        if status != 0:
            sys.exit(f"NVRTC failed ({status})")
        return (time.perf_counter() - t0) * 1e3

    source = open(source_path, "rb").read()
    warm = compile_ms(b'extern "C" __global__ void tf_warm() {}\n')
    print(f"warm-up (an empty kernel) {warm:.0f}")
    for i in range(2):
        print(f"source {i} {compile_ms(source):.0f}")
    for i in range(2):
        unique = source + f"\n// {os.getpid()} {i}\n".encode()
        print(f"unique source {i} {compile_ms(unique):.0f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.source, args.arch)
        return
    for label, extra in (("compute cache on (an empty CUDA_CACHE_PATH)",
                          {"CUDA_CACHE_PATH": tempfile.mkdtemp(prefix="cuda-cache-")}),
                         ("compute cache off (CUDA_CACHE_DISABLE=1)", {"CUDA_CACHE_DISABLE": "1"})):
        env = {k: v for k, v in os.environ.items()
               if k not in ("CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE")}
        env.update(extra)
        for run in (1, 2):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), args.source,
                                  "--arch", args.arch, "--child"], env=env, check=True,
                                 capture_output=True, text=True).stdout
            print(f"{label}, process {run}: " + ", ".join(
                f"{line.rsplit(' ', 1)[0]} {line.rsplit(' ', 1)[1]} ms"
                for line in out.splitlines()), flush=True)


if __name__ == "__main__":
    main()
