"""All-reduce bus bandwidth: Tessera (allreduce.tsr through `tsr run --devices N --device cuda`)
beside PyTorch's torch.distributed.all_reduce on NCCL, in the same run, 1 MiB to 1 GiB of f32.
Bus bandwidth as nccl-tests defines it: algbw * 2 (n - 1) / n, algbw = bytes / time per call.

  python3 allreduce.py TSR [--gpus N] [--min_mib 1] [--max_mib 1024] [--reps 20]

Prints a Markdown table: size, Tessera's and PyTorch's time per call and bus bandwidth, and their
ratio (the issue's goal: Tessera >= 0.9x PyTorch+NCCL)."""
import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def torch_worker(rank, n, port, sizes, reps, warmup, q):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=n)
    out = {}
    for b in sizes:
        x = torch.ones(b // 4, dtype=torch.float32, device="cuda")
        for _ in range(warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        out[b] = (time.perf_counter() - t0) / reps
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tsr")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--min_mib", type=int, default=1)
    ap.add_argument("--max_mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    n = a.gpus
    here = os.path.dirname(os.path.abspath(__file__))
    # Tessera.
    p = subprocess.run([a.tsr, "run", os.path.join(here, "allreduce.tsr"), "--devices", str(n), "--device", "cuda",
                        "--min_mib", str(a.min_mib), "--max_mib", str(a.max_mib), "--reps", str(a.reps), "--warmup", str(a.warmup)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout + p.stderr)
        print(f"FAIL tessera all-reduce run (exit {p.returncode})")
        sys.exit(1)
    tsr = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if f and f[0] == "allreduce":
            tsr[int(f[1])] = float(f[2])
            if float(f[6]) != float(n):
                print(f"FAIL tessera all-reduce of ones gave {f[6]}, not {n}")
                sys.exit(1)
    sizes = sorted(tsr)
    # PyTorch + NCCL.
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=torch_worker, args=(r, n, port, sizes, a.reps, a.warmup, q)) for r in range(n)]
    for pr in procs:
        pr.start()
    ref = q.get(timeout=1800)
    for pr in procs:
        pr.join()
    factor = 2 * (n - 1) / n
    print(f"All-reduce (sum, f32) on {n} GPUs; bus bandwidth = bytes / time * 2(n-1)/n (nccl-tests)\n")
    print("| size | Tessera time | Tessera busbw GB/s | PyTorch+NCCL time | PyTorch busbw GB/s | Tessera / PyTorch |")
    print("|---:|---:|---:|---:|---:|---:|")
    for b in sizes:
        bt, bp = b / tsr[b] / 1e9 * factor, b / ref[b] / 1e9 * factor
        size = f"{b >> 20} MiB" if b < 1 << 30 else f"{b >> 30} GiB"
        print(f"| {size} | {tsr[b] * 1e3:.3f} ms | {bt:.1f} | {ref[b] * 1e3:.3f} ms | {bp:.1f} | {bt / bp:.2f}x |")


if __name__ == "__main__":
    main()
