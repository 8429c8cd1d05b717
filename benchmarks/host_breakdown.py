"""Where the host time of one repeat ``ops.paged_attention`` call goes, stage by stage, on a GPU.

    python benchmarks/host_breakdown.py [--json breakdown.json] [--calls 200] [--processes 3] [--pin]

``host_cost.py`` says what a call costs; this says which part of the repeat path pays it.  For the
verify q16 8x4K (attention + split merge) and decode q1 64x1K (one launch) calls of Qwen3-8B heads
it times the host's part of each call, issued back to back while the stream is held behind a sleep
(so no launch waits for the GPU): the call cache's key, the key and its lookup, ``run_prepared``
(the launch path without the key), the relaunch of the call's kernels, the bare ``CompiledKernel.run`` of each
kernel (Triton's launcher alone, given addresses as the relaunch passes them, and given tensors),
the whole call, vLLM's unified_attention on the same call (with ``--peers``), and as floors a
one-argument Triton kernel's bare and JIT launches and ``torch.empty_like``.  Each row is the median of 9 rounds.
Every process runs each stage; ``--processes`` repeats them in fresh processes (the cost has moved
between processes), the first one pinned to one CPU when ``--pin`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from host_cost import eager_call  # this folder: the scripts run as ``python benchmarks/<name>.py``


def _per_call_us(fn, calls: int) -> float:
    """Host microseconds per call, with the stream held behind a sleep so that no call waits for
    the GPU (each round's launches stay well inside the queue's depth)."""
    rounds = []
    for _ in range(9):
        torch.cuda.synchronize()
        torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time; a round issues in a few ms
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def child(calls: int, peers_dir: str | None) -> dict:
    import triton
    import triton.language as tl

    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.ops import backends, call_cache, workspace
    from dflash_rocm_plugin.ops.backends import triton as triton_backend

    @triton.jit
    def _touch(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1.0)

    device = torch.device("cuda")
    peer = None
    if peers_dir:
        from dflash_rocm_plugin.bench import peers
        _, peer = peers.load(peers_dir, ["vllm_unified"])["vllm_unified"]
        peer = None if isinstance(peer, str) else peer
    x = torch.zeros(1, device=device)
    compiled_touch = _touch[(1,)](x)
    stream = torch.cuda.current_stream().cuda_stream
    rows = {"cpu": len(os.sched_getaffinity(0)), "floors": {
        "torch.empty_like(1 float)": _per_call_us(lambda: torch.empty_like(x), calls),
        "1-argument kernel, CompiledKernel.run": _per_call_us(
            lambda: compiled_touch.run(1, 1, 1, stream, compiled_touch.function, compiled_touch.packed_metadata,
                                       None, None, None, x), calls),
        "1-argument kernel, JIT launch": _per_call_us(lambda: _touch[(1,)](x), calls),
    }}
    for label, mode, batch, context, q_len in (("verify q16 8x4K", "verify", 8, 4096, 16),
                                               ("decode q1 64x1K", "verify", 64, 1024, 1)):
        shape, case, tensors, kw = eager_call(mode, batch, context, q_len, device)
        out, ws = kw["out"], kw["workspace"]
        table = case.block_tables[0]
        ops.paged_attention(*tensors, **kw)
        key_args = (*tensors, None, None, None, out, ws, shape.causal, None, None, None, q_len, None, None)
        key = call_cache.key(*key_args)
        prepared = call_cache.get(key)
        launch = prepared.triton
        arguments = None
        p_out, p_lse = workspace.scratch(device, *launch.scratch.shape, ws) if launch.scratch else (out, out)
        q = case.q
        pointers = (q, case.k_cache, case.v_cache, out, table, case.seq_lens, case.query_start_loc, p_out, p_lse,
                    q, q, q)
        relaunch = launch.relaunch
        stage = {
            "call_cache.key": lambda: call_cache.key(*key_args),
            "key + lookup": lambda: call_cache.get(call_cache.key(*key_args)),
            "run_prepared": lambda: backends.run_prepared(prepared, None, *tensors, out, ws, None, None, None),
            "triton.launch (both kernels)": lambda: triton_backend.launch(
                launch, q, case.k_cache, case.v_cache, out, table, case.seq_lens, case.query_start_loc,
                None, None, None, ws),
            "relaunch (every kernel of the call)": lambda: relaunch(launch.launches(), pointers),
        }
        addresses = tuple(t.data_ptr() for t in pointers)
        for name, kept in zip(("attention", "merge"), next(iter(relaunch.variants.values()), ())):
            own = addresses if kept.take is None else kept.take(addresses)
            stage[f"{name} CompiledKernel.run"] = lambda k=kept, a=own: k.run(
                k.gx, k.gy, k.gz, stream, k.function, k.metadata, None, None, None, *a, *k.fixed)
            if name == "attention":
                # What the relaunch paid before it passed addresses: the launcher asks each tensor for
                # its address and the driver whether the GPU can reach it.
                stage["attention CompiledKernel.run, tensors"] = lambda k=kept: k.run(
                    k.gx, k.gy, k.gz, stream, k.function, k.metadata, None, None, None, *pointers, *k.fixed)
                arguments = len(pointers) + len(kept.fixed)
        stage["whole ops.paged_attention"] = lambda: ops.paged_attention(*tensors, **kw)
        if peer is not None:
            stage["vLLM unified_attention, whole call"] = peer(case)[0][0]
        rows[label] = {name: _per_call_us(fn, calls) for name, fn in stage.items()}
        rows[label]["kernel arguments"] = arguments
        del case, out, ws
        torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=None)
    p.add_argument("--calls", type=int, default=200, help="calls per round (9 rounds)")
    p.add_argument("--processes", type=int, default=3)
    p.add_argument("--pin", action="store_true", help="pin the first process to one CPU (taskset -c 2)")
    p.add_argument("--peers", default="benchmarks/.peers", help="peer sources (benchmarks/get_peers.sh); '' for none")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.calls, args.peers if os.path.isdir(args.peers or "") else None)))
        return 0
    if not torch.cuda.is_available():
        print("host_breakdown.py needs a GPU", file=sys.stderr)
        return 2
    runs = []
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--child", "--calls", str(args.calls), "--peers", args.peers or ""]
        if args.pin and i == 0:
            cmd = ["taskset", "-c", "2", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    import triton
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                calls=args.calls, pinned_first=args.pin, cpus=os.cpu_count())
    for section in runs[0]:
        if section == "cpu":
            continue
        print(f"-- {section} (us per call; one column per process)")
        for name in runs[0][section]:
            values = [r[section][name] for r in runs]
            print(f"  {name:40} " + " ".join(f"{v:8.2f}" for v in values))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, runs=runs), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
