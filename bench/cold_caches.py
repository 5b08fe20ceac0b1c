"""What the benches that time cold compiles share.

Importing this module, before torch starts CUDA, turns the CUDA driver's compute cache
(~/.nv/ComputeCache) off for the process: NVRTC's cubins go through it as well, so it would
otherwise hand back any kernel an earlier process on this machine compiled (a kernel that took
150 ms to compile on an H200 host took 16-27 ms from it). CUDA_CACHE_DISABLE set beforehand
wins.

empty_caches_env() is the environment of a fresh process whose compiles are all cold;
collect_garbage() goes right before each timed first call.
"""
import gc
import os
import tempfile

os.environ.setdefault("CUDA_CACHE_DISABLE", "1")


def fresh_inductor_cache(prefix="inductor-bench-"):
    """Points Inductor's on-disk caches (FX graphs, Triton kernels, autotuning) at a new empty
    folder, so that the torch.compile first call measured next is a cold compile even where an
    earlier run on this machine compiled the same workload."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=prefix)


def empty_caches_env(**overrides):
    """os.environ for a child process with every cache a compile reads new and empty:
    Inductor's, torchfuse's, and the CUDA driver's compute cache (NVRTC's cubins go through
    it, and it would hand back kernels an earlier process compiled); `overrides` on top."""
    return dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(),
                TORCHFUSE_CACHE_DIR=tempfile.mkdtemp(), CUDA_CACHE_PATH=tempfile.mkdtemp(),
                **overrides)


def collect_garbage():
    """A full collection of Python's garbage, right before a timed first call, so that the call
    pays for none that earlier ones left: compilers allocate many Python objects, and a
    generation-2 collection that falls inside a first call took 170-230 ms on an H200 host
    (a process that had imported torch and compiled a few workloads)."""
    gc.collect()
