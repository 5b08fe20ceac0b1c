"""What the benches that time cold compiles share.

Importing this module, before torch starts CUDA, turns the CUDA driver's compute cache
(~/.nv/ComputeCache) off for the process: NVRTC's cubins go through it as well, so it would
otherwise hand back any kernel an earlier process on this machine compiled (a kernel that took
150 ms to compile on an H200 host took 16-27 ms from it). CUDA_CACHE_DISABLE set beforehand
wins.
"""
import os
import tempfile

os.environ.setdefault("CUDA_CACHE_DISABLE", "1")


def fresh_inductor_cache(prefix="inductor-bench-"):
    """Points Inductor's on-disk caches (FX graphs, Triton kernels, autotuning) at a new empty
    folder, so that the torch.compile first call measured next is a cold compile even where an
    earlier run on this machine compiled the same workload."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix=prefix)
