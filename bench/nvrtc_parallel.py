"""NVRTC in parallel: k compiles of one row kernel (each a unique source) in k threads of one
process and in k worker processes (spawned, each warmed by earlier compiles). Run from the
project root with a kernel source in $KERNEL (default scratch_k.cu), e.g. the kernel that
`torchfuse inspect softmax_scripted.pt --input "bf16[4096,16384]" --arch sm_90` prints."""
import ctypes, glob, os, threading, time, multiprocessing as mp
cands = glob.glob("/usr/local/cuda/lib64/libnvrtc.so*") + glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/*/lib/libnvrtc.so*") + glob.glob("/usr/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so*")
path = sorted(c for c in cands if "builtins" not in c and "alt" not in c)[0]
src = open(os.environ.get("KERNEL", "scratch_k.cu")).read().encode()
opts = [b"--std=c++17", b"-default-device", b"--fmad=false", b"--gpu-architecture=sm_90"]
lib = None
counter = [0]
def compile_one(tag=None):
    global lib
    counter[0] += 1
    # A unique source each time (a different constant), so that no cache can answer.
    text = src + f"\n__device__ int tf_unique_{os.getpid()}_{counter[0]}_{tag} = {counter[0]};\n".encode()
    if lib is None: lib = ctypes.CDLL(path)
    arr = (ctypes.c_char_p * len(opts))(*opts)
    t = time.perf_counter()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), text, b"k.cu", 0, None, None) == 0
    assert lib.nvrtcCompileProgram(prog, len(opts), arr) == 0
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return time.perf_counter() - t
if __name__ == "__main__":
    print(path, os.cpu_count(), "cpus")
    compile_one(); compile_one()
    one = min(compile_one() for _ in range(3))
    print(f"one compile {one*1e3:.0f} ms")
    for k in (2, 4, 8, 16):
        res = [0.0] * k
        def work(i): res[i] = compile_one(f"t{i}")
        ts = [threading.Thread(target=work, args=(i,)) for i in range(k)]
        t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]; wall = time.perf_counter() - t
        print(f"threads {k:2d}: wall {wall*1e3:5.0f} ms ({wall/one:.1f}x one), each {min(res)*1e3:.0f}-{max(res)*1e3:.0f} ms")
    ctx = mp.get_context("spawn")
    with ctx.Pool(16) as pool:
        pool.map(compile_one, [f"w{i}" for i in range(64)], chunksize=1)  # loads NVRTC in the workers
        for k in (2, 4, 8, 16):
            t = time.perf_counter(); res = pool.map(compile_one, [f"p{k}_{i}" for i in range(k)], chunksize=1); wall = time.perf_counter() - t
            print(f"processes {k:2d}: wall {wall*1e3:5.0f} ms ({wall/one:.1f}x one), each {min(res)*1e3:.0f}-{max(res)*1e3:.0f} ms")
