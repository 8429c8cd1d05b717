"""Host cost of one eager ``ops.paged_attention`` call on a GPU, against vLLM's unified_attention.

    python benchmarks/host_cost.py [--json host_cost.json] [--calls 2000] [--peers benchmarks/.peers]

Hosts run attention eagerly once per layer in vLLM's piecewise-graph prefill and SGLang's extend,
so the Python path and the Triton launch are paid 36-64 times a step.  For each shape this times
2000 calls issued back to back without synchronizing (``issue_us``: host time per call;
``wall_us``: until the GPU finished, per call) and, separately, the GPU time of one call from
events recorded while the stream is held behind a sleep (so launch gaps are not counted).  Shapes
(Qwen3-8B heads 32/8/128, bf16, page 16): verify q16 8x4K (split-KV), draft q16 1x4K, decode q1
64x1K, prefill q=2048 1x2K from the pages and from its own K/V rows (the dense kernel beside the paged
one, as the hosts' prefill calls it).  The plugin runs with the direct launch on and off
(``DFLASH_ROCM_DIRECT_LAUNCH``), each in its own process; vLLM's unified_attention (from
``benchmarks/get_peers.sh`` sources) runs in the first of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

SHAPES = [  # label, mode, batch, context, q_len, whether the call passes its own K/V rows
    ("verify q16 8x4K", "verify", 8, 4096, 16, False),
    ("draft q16 1x4K", "draft", 1, 4096, 16, False),
    ("decode q1 64x1K", "verify", 64, 1024, 1, False),
    ("prefill q2048 1x2K", "verify", 1, 2048, 2048, False),
    ("prefill own K/V 1x2K", "verify", 1, 2048, 2048, True),
]
SWITCH = "DFLASH_ROCM_DIRECT_LAUNCH"


def _timed(fn, calls: int) -> dict:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    # GPU time: hold the stream behind a sleep so that every call is queued before the first runs.
    n = 100
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    torch.cuda._sleep(200_000_000)
    for a, b in events:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    gpu = sorted(a.elapsed_time(b) for a, b in events)[n // 2] * 1e3
    return dict(issue_us=(issued - t0) / calls * 1e6, wall_us=(done - t0) / calls * 1e6, gpu_us=gpu)


def eager_call(mode: str, batch: int, context: int, q_len: int, device, own_kv: bool = False):
    """(shape, case, tensors, keywords) of one Qwen3-8B ``ops.paged_attention`` call as a host makes
    it: page 16, its own output and a workspace sized by ``ops.workspace_floats``."""
    from dflash_rocm_plugin import ops
    from dflash_rocm_plugin.bench import inputs
    from dflash_rocm_plugin.bench.shapes import Shape

    shape = Shape("qwen3-8b", mode, batch, context, 16, q_len=q_len)
    case = inputs.build(shape, device)
    hq, hkv, d = shape.heads
    ws = torch.empty(max(1, ops.workspace_floats(num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                                 max_num_seqs=batch, max_kv_len=context)),
                     dtype=torch.float32, device=device)
    tensors = (case.q, case.k_cache, case.v_cache, case.block_tables[0], case.seq_lens, case.query_start_loc)
    own = dict(new_keys=case.new_kv[0][0], new_values=case.new_kv[0][1]) if own_kv else {}
    return shape, case, tensors, dict(causal=shape.causal, out=torch.empty_like(case.q), max_query_len=q_len,
                                      workspace=ws, **own)


def child(calls: int, peers_dir: str | None) -> dict:
    from dflash_rocm_plugin import ops

    device = torch.device("cuda")
    results = {}
    peer = None
    if peers_dir:
        from dflash_rocm_plugin.bench import peers
        desc, peer = peers.load(peers_dir, ["vllm_unified"])["vllm_unified"]
        if isinstance(peer, str):
            results["vllm_unified_error"] = peer
            peer = None
    for label, mode, batch, context, q_len, own_kv in SHAPES:
        shape, case, args, kw = eager_call(mode, batch, context, q_len, device, own_kv)
        hq, hkv, d = shape.heads
        table = case.block_tables[0]

        def plugin():
            ops.paged_attention(*args, **kw)
        launch = ops.describe_launch(num_tokens=batch * q_len, num_seqs=batch, num_q_heads=hq, num_kv_heads=hkv,
                                     head_dim=d, page_size=16, kv_capacity=table.shape[1] * 16,
                                     causal=shape.causal, max_query_len=q_len, device=device).launch
        row = {"plugin": _timed(plugin, calls), "num_splits": launch.num_splits if launch else None}
        if peer is not None and not own_kv:
            try:
                calls_of_peer, _ = peer(case)
                row["vllm_unified"] = _timed(calls_of_peer[0], calls)
            except Exception as exc:  # noqa: BLE001 - a peer that fails is reported
                row["vllm_unified"] = f"{type(exc).__name__}: {exc}"
        results[label] = row
        del case, args, kw
        torch.cuda.empty_cache()
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--peers", default="benchmarks/.peers", help="peer sources (benchmarks/get_peers.sh); '' for none")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.calls, args.peers or None)))
        return 0
    if not torch.cuda.is_available():
        print("host_cost.py needs a GPU", file=sys.stderr)
        return 2
    runs = {}
    for switch, peers_dir in (("1", args.peers if os.path.isdir(args.peers or "") else ""), ("0", "")):
        env = dict(os.environ, **{SWITCH: switch})
        proc = subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls), "--peers", peers_dir],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr, file=sys.stderr)
            return proc.returncode
        runs[switch] = json.loads(proc.stdout.strip().splitlines()[-1])
    from dflash_rocm_plugin import ops
    import triton
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                arch=ops.gpu_arch(), calls=args.calls)
    table = []
    print(f"{'shape':22} {'impl':22} {'issue us':>9} {'wall us':>9} {'gpu us':>8}")
    for label, *_ in SHAPES:
        for name, row in (("plugin direct", runs["1"][label]["plugin"]), ("plugin JIT run", runs["0"][label]["plugin"]),
                          ("vLLM unified", runs["1"][label].get("vllm_unified"))):
            if row is None:
                continue
            if isinstance(row, str):
                print(f"{label:22} {name:22} {row}")
                continue
            print(f"{label:22} {name:22} {row['issue_us']:9.1f} {row['wall_us']:9.1f} {row['gpu_us']:8.1f}")
            table.append(dict(shape=label, impl=name, splits=runs["1"][label]["num_splits"], **row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=table, raw=runs), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
