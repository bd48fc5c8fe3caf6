"""One rank of a PyTorch all_reduce between ranks in network namespaces of one machine,
as scripts/device/run.sh starts them: each rank its own process, its own NCCL_HOSTID
(so NCCL takes the ranks for separate hosts and moves the data over its network
transport, NCCL_NET=IB on uroce or Socket on kernel TCP, never through shared memory or
the GPU's peer path), all ranks on the machine's one GPU.

For each size: WARMUP all_reduces, then ITERS timed ones, each of a float32 tensor filled
with rank + 1 and checked after (every element the sum over ranks, which float32 holds
exactly). Prints one JSON line a size: the median time, the algorithm bandwidth (bytes /
time) and the bus bandwidth (algbw x 2 (n - 1) / n, what nccl-tests calls busbw).
A rank whose result is wrong says so and exits 1. `--backend gloo` runs the same on the
CPU over Gloo: a dry run of everything but NCCL, where there is no GPU.
"""

import argparse
import datetime
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist


def size_of(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--master", required=True, help="ADDR:PORT of rank 0's rendezvous")
    p.add_argument("--sizes", default="16M,256M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--label", default="")
    p.add_argument("--timeout", type=int, default=60, help="seconds for NCCL's and the store's calls")
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    a = p.parse_args()

    gpu = a.backend == "nccl"
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.cuda.set_device(dev)
    init = dict(
        init_method=f"tcp://{a.master}",
        rank=a.rank,
        world_size=a.world,
        timeout=datetime.timedelta(seconds=a.timeout),
    )
    if not gpu:
        dist.init_process_group("gloo", **init)
    else:
        try:
            # NCCL's communicator made now, bound to the GPU (PyTorch 2.3 and later).
            dist.init_process_group("nccl", device_id=dev, **init)
        except TypeError:
            dist.init_process_group("nccl", **init)
    want = float(a.world * (a.world + 1) // 2)
    failed = False
    for s in a.sizes.split(","):
        ok = True
        nbytes = size_of(s)
        x = torch.empty(nbytes // 4, dtype=torch.float32, device=dev)
        times = []
        for i in range(a.warmup + a.iters):
            x.fill_(a.rank + 1)
            sync()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            sync()
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
            if not bool((x == want).all()):
                ok = False
        failed |= not ok
        t = statistics.median(times)
        algbw = nbytes / t / 1e9
        busbw = algbw * 2 * (a.world - 1) / a.world
        print(
            json.dumps(
                {
                    "label": a.label,
                    "rank": a.rank,
                    "bytes": nbytes,
                    "iters": a.iters,
                    "median_s": t,
                    "algbw_gbs": algbw,
                    "busbw_gbs": busbw,
                    "correct": ok,
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()
    if failed:
        print(f"allreduce.py: rank {a.rank}: a result was wrong", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
