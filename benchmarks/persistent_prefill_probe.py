"""Does a dense prefill program's fixed cost explain the gap to cuDNN on short prompts?

    python benchmarks/persistent_prefill_probe.py [--json probe.json] [--shapes 1x8192,4x4096,16x1024]

The dense prefill kernel (``kernels/extend_attention.py``) is at 0.97-0.99x cuDNN on 8K-32K prompts,
0.88x at 4 x 4K and 0.75x at 16 x 1K on the H200: its loss grows as a program's key loop shortens,
as a fixed cost per program would (on Hopper its 128 x 128 tiles hold one program per SM, so a
program's first loads and its output store are not hidden behind another program's dots).  This
times, in one process, Qwen3-8B heads (32 / 8 of 128), bf16, causal, equal-length prompts:

* ``plugin``: the kernel's own launch as the ops layer makes it on Hopper (TMA K/V, q and out);
* ``heavy_first``: one program per tile as there, the tiles of every prompt ordered heaviest first;
* ``persistent``: one program per SM looping over those tiles, ``flatten`` off / on (Triton's
  loop-nest fusion, which lets the software pipeline fetch the next tile's keys during this one's
  epilogue), and with the outer loop warp-specialized;

each against cuDNN SDPA on the same tensors (graph replay back to back, and one call after the bench's
L2 flush), with its largest difference from cuDNN's output.  A variant Triton cannot build is
reported as such.  It reuses the kernel's tile function, so it measures the schedule and nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton
import triton.language as tl

from dflash_rocm_plugin.bench import timing
from dflash_rocm_plugin.kernels.extend_attention import LOG2E, _block_tile, extend_attention_kernel

HQ, HKV, D = 32, 8, 128


@triton.jit
def _tile(w, q_desc, k_desc, v_desc, out_desc, scale, num_seqs, tiles_per_seq, seq_len,
          HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, GQA: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr):
    head = w % HEADS
    t = w // HEADS
    local_tile = tiles_per_seq - 1 - t // num_seqs  # every prompt's heaviest tile first
    seq = t % num_seqs
    q_start = seq * seq_len
    first_row = q_start + local_tile * BLOCK_M
    q = q_desc.load([first_row, head * HEAD_DIM])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    kv_col = (head // GQA) * HEAD_DIM
    diag = local_tile * BLOCK_M
    q_tok = diag + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    for n0 in range(0, diag, BLOCK_N):
        acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, q_start, seq_len, q_tok, k_desc, v_desc, 0, 0, kv_col,
                                    scale, 0, dims, BLOCK_N, False, False, False, True, False, None)
    for n0 in range(diag, diag + BLOCK_M, BLOCK_N):
        acc, l_i, m_i = _block_tile(acc, l_i, m_i, q, n0, q_start, seq_len, q_tok, k_desc, v_desc, 0, 0, kv_col,
                                    scale, 0, dims, BLOCK_N, True, False, False, True, False, None)
    out_desc.store([first_row, head * HEAD_DIM], (acc / l_i[:, None]).to(tl.bfloat16))


@triton.jit
def probe_kernel(q_desc, k_desc, v_desc, out_desc, scale, num_seqs, tiles_per_seq, seq_len,
                 HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, GQA: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, PERSISTENT: tl.constexpr, FLATTEN: tl.constexpr, WS: tl.constexpr):
    scale = scale * LOG2E
    if PERSISTENT:
        total = HEADS * tiles_per_seq * num_seqs
        for w in tl.range(tl.program_id(0), total, tl.num_programs(0), flatten=FLATTEN, warp_specialize=WS):
            _tile(w, q_desc, k_desc, v_desc, out_desc, scale, num_seqs, tiles_per_seq, seq_len,
                  HEADS, HEAD_DIM, GQA, BLOCK_M, BLOCK_N)
    else:
        _tile(tl.program_id(0), q_desc, k_desc, v_desc, out_desc, scale, num_seqs, tiles_per_seq, seq_len,
              HEADS, HEAD_DIM, GQA, BLOCK_M, BLOCK_N)


def main() -> int:
    from triton.tools.tensor_descriptor import TensorDescriptor
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--shapes", default="1x8192,4x4096,16x1024,1x32768")
    args = ap.parse_args()
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    record = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "triton": triton.__version__,
              "unit": "TFLOP/s (causal: half the square)", "rows": []}
    print(json.dumps({k: v for k, v in record.items() if k != "rows"}), flush=True)
    tiles = {"128x128w8s3": (128, 128, 8, 3), "128x64w4s2": (128, 64, 4, 2)}
    for spec in args.shapes.split(","):
        b, n = map(int, spec.split("x"))
        tokens = b * n
        torch.manual_seed(0)
        q = torch.randn(tokens, HQ, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(tokens, HKV, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(tokens, HKV, D, device=dev, dtype=torch.bfloat16)
        scale = D ** -0.5
        flop = 4 * b * HQ * D * n * n / 2
        qd, kd, vd = (x.view(b, n, -1, D).transpose(1, 2) for x in (q, k, v))
        ref = torch.empty_like(q)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                o = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, scale=scale, enable_gqa=True)
            ref.view(b, n, HQ, D).copy_(o.transpose(1, 2))

        variants = {"cudnn": (cudnn, ref)}
        seq_lens = torch.full((b,), n, device=dev, dtype=torch.int32)
        qsl = torch.arange(0, b + 1, device=dev, dtype=torch.int32) * n
        for tname, (bm, bn, warps, stages) in tiles.items():
            rows = [tokens, HKV * D]
            kdesc = TensorDescriptor(k.view(tokens, -1), rows, [HKV * D, 1], [bn, D])
            vdesc = TensorDescriptor(v.view(tokens, -1), rows, [HKV * D, 1], [bn, D])
            qdesc = TensorDescriptor(q.view(tokens, -1), [tokens, HQ * D], [HQ * D, 1], [bm, D])
            items = HQ * (n // bm) * b
            per_sm = 1 if bm * bn >= 128 * 128 else 2
            out = torch.full_like(q, float("nan"))
            odesc = TensorDescriptor(out.view(tokens, -1), [tokens, HQ * D], [HQ * D, 1], [bm, D])

            def plugin(out=out, kdesc=kdesc, vdesc=vdesc, qdesc=qdesc, odesc=odesc, bm=bm, bn=bn, w=warps, s=stages):
                extend_attention_kernel[(HQ, tokens // bm + b, 1)](
                    q, qdesc, kdesc, vdesc, out, odesc, seq_lens, qsl, q, scale, 0, b,
                    q.stride(0), q.stride(1), HKV * D, HKV * D, out.stride(0), out.stride(1),
                    HEAD_DIM=D, GQA=HQ // HKV, BLOCK_M=bm, BLOCK_N=bn, MIN_QUERY=bm, USE_WINDOW=False,
                    USE_SINKS=False, USE_DESC=True, DESC_QO=True, UPCAST=False, DOT_PRECISION=None,
                    num_warps=w, num_stages=s)
            variants[f"plugin {tname}"] = (plugin, out)
            for name, persistent, flatten, ws in (("heavy_first", False, False, False),
                                                   ("persistent", True, False, False),
                                                   ("persistent flatten", True, True, False),
                                                   ("persistent ws", True, False, True),
                                                   ("persistent flatten ws", True, True, True)):
                o2 = torch.full_like(q, float("nan"))
                od2 = TensorDescriptor(o2.view(tokens, -1), [tokens, HQ * D], [HQ * D, 1], [bm, D])
                grid = (min(items, sms * per_sm) if persistent else items,)

                def run(grid=grid, od2=od2, persistent=persistent, flatten=flatten, ws=ws, qdesc=qdesc, kdesc=kdesc,
                        vdesc=vdesc, bm=bm, bn=bn, w=warps, s=stages):
                    probe_kernel[grid](qdesc, kdesc, vdesc, od2, scale, b, n // bm, n, HEADS=HQ, HEAD_DIM=D,
                                       GQA=HQ // HKV, BLOCK_M=bm, BLOCK_N=bn, PERSISTENT=persistent,
                                       FLATTEN=flatten, WS=ws, num_warps=w, num_stages=s)
                variants[f"{name} {tname}"] = (run, o2)
        cudnn()
        torch.cuda.synchronize()
        for name, (fn, out) in variants.items():
            row = {"shape": spec, "variant": name}
            try:
                fn()
                torch.cuda.synchronize()
                row["max_abs_diff_vs_cudnn"] = float((out.float() - ref.float()).abs().max())
                row["graph"] = round(flop / timing.graph_us([fn]) / 1e6, 1)
                row["one_call"] = round(flop / timing.flushed_us([fn]) / 1e6, 1)
            except Exception as exc:  # noqa: BLE001 - a variant Triton cannot build is a result too
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            record["rows"].append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
