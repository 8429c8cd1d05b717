"""Compile the attention kernels for a GPU that is not here (AMD gfx9xx, NVIDIA sm_90).

Triton ships both back ends, so the launches ops.paged_attention would make on an MI300X, an
MI355X or an H100 compile on a CPU-only machine: that catches kernels that do not build or that
overflow the target's shared memory (LDS) before anyone owns the hardware.  Arguments get the
specialisations the runtime would give them (pointers 16-byte aligned, unit strides constant).

Triton decides at import time whether every jit function (its own library's too) is interpreted,
and the tests run interpreted on a CPU-only machine; so compiling happens in a child process:

    python -m tests.core.offline_compile < jobs.json > results.json

Each job is {"arch", "launch": AttentionLaunch fields, "shape": keyword arguments of attention()};
each result is a list of Compiled fields (one per kernel), or {"error": text}.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import types

# Shared memory one block may use: LDS per CU on CDNA3 / CDNA4, the opt-in limit on Hopper.
SHARED_LIMIT = {"gfx942": 64 * 1024, "gfx950": 160 * 1024, "sm_90": 227 * 1024}


@dataclasses.dataclass
class Compiled:
    shared: int               # bytes of shared memory / LDS per block
    vgpr_spills: int          # AMD: VGPRs spilled to scratch (NVIDIA: 0, not reported offline)
    registers: int            # AMD: arch VGPRs + AGPRs per lane (NVIDIA: 0, known only once loaded)


def run(jobs: list[dict], timeout: float = 1200) -> list:
    """Compile every job in one child process without the interpreter (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-m", "tests.core.offline_compile"], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, cwd=root, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"offline compile failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def target(arch: str):
    from triton.backends.compiler import GPUTarget
    if arch.startswith("gfx"):
        return GPUTarget("hip", arch, 64)
    return GPUTarget("cuda", int(arch.split("_")[1]), 32)


def _signature(fn, values: dict, constexprs: dict):
    from triton.compiler import ASTSource
    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name], consts[name] = "constexpr", constexprs[name]
            continue
        v = values[name]
        if isinstance(v, str):                   # pointer element type
            sig[name] = v
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[name] = "fp32"
        elif v == 1:
            sig[name], consts[name] = "constexpr", 1
        else:
            sig[name] = "i32"
            if v % 16 == 0 and v != 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return ASTSource(fn, sig, consts, attrs)


# The last attention kernel compiled in this process (``attention_ttgir``).
_last = {}


def _compile(arch: str, src, num_warps: int, num_stages: int, mfma_nonkdim: int = 0) -> Compiled:
    import triton
    options = dict(num_warps=num_warps, num_stages=num_stages)
    if mfma_nonkdim and arch.startswith("gfx"):
        options["matrix_instr_nonkdim"] = mfma_nonkdim
    kernel = triton.compile(src, target=target(arch), options=options)
    _last.setdefault("kernel", kernel)
    if arch.startswith("gfx"):
        asm = kernel.asm["amdgcn"]

        def meta(key):
            found = re.findall(r"\.%s:\s+(\d+)" % key, asm)
            return int(found[0]) if found else 0
        return Compiled(kernel.metadata.shared, meta("vgpr_spill_count"), meta("vgpr_count") + meta("agpr_count"))
    return Compiled(kernel.metadata.shared, 0, 0)


# Cache element types as Triton names them; "u8-fn"/"u8-fnuz": bytes decoded in the kernel (SOFT_FP8).
_CACHE_TYPES = {"fp8-fn": ("fp8e4nv", 0), "fp8-fnuz": ("fp8e4b8", 0), "u8-fn": ("u8", 1), "u8-fnuz": ("u8", 2)}


def attention(arch: str, cfg, *, num_q_heads: int, num_kv_heads: int, head_dim: int, page_size: int,
              causal: bool, window: int = 0, softcap: float = 0.0, dtype: str = "bf16", cache: str | None = None,
              sinks: bool = False, num_tokens: int = 512, num_seqs: int = 32,
              table_width: int = 1024) -> list[Compiled]:
    """Compile the launch ``cfg`` (ops.launch_config.AttentionLaunch) as ops.paged_attention would run it.
    ``cache``: None (the model dtype) or a key of ``_CACHE_TYPES`` (fp8 with per-tensor scales)."""
    import triton

    from dflash_rocm_plugin.kernels import paged_attention as native
    from dflash_rocm_plugin.ops.backends.triton import _lacks_bf16_conversion
    from dflash_rocm_plugin.ops.launch_config import (FP8_DOT_PRODUCTS, FP8_PV_SPLIT_MODES, FP8_QK_SPLIT_MODES,
                                                      window_edge_keys)
    d, hq, hkv = head_dim, num_q_heads, num_kv_heads
    splits = cfg.num_splits
    cache_type, soft = _CACHE_TYPES[cache] if cache else (dtype, 0)
    fp8_code = {"fp8-fn": 1, "fp8-fnuz": 2}.get(cache, 0)
    qk_in_fp8, pv_in_fp8 = FP8_DOT_PRODUCTS[cfg.fp8_dots]
    values = dict(
        q_ptr=f"*{dtype}", k_cache_ptr=f"*{cache_type}", v_cache_ptr=f"*{cache_type}", out_ptr=f"*{dtype}",
        block_table_ptr="*i32", seq_lens_ptr="*i32", query_start_loc_ptr="*i32",
        partial_out_ptr="*fp32" if splits > 1 else f"*{dtype}",
        partial_lse_ptr="*fp32" if splits > 1 else f"*{dtype}",
        sinks_ptr="*fp32", k_scale_ptr="*fp32", v_scale_ptr="*fp32", k_scale_stride=0, v_scale_stride=0,
        scale=0.1, softcap=softcap or 1.0, window=max(window, 2), num_seqs=num_seqs,
        stride_qt=hq * d, stride_qh=d, stride_qd=1,
        stride_kb=page_size * hkv * d, stride_ks=hkv * d, stride_kh=d, stride_kd=1,
        stride_vb=page_size * hkv * d, stride_vs=hkv * d, stride_vh=d, stride_vd=1,
        stride_ot=hq * d, stride_oh=d, stride_od=1,
        stride_bts=table_width, stride_btb=1,
        stride_pos=num_tokens * hq * d if splits > 1 else 0, stride_pot=hq * d if splits > 1 else 0,
        stride_poh=d if splits > 1 else 0,
        stride_pls=num_tokens * hq if splits > 1 else 0, stride_plt=hq if splits > 1 else 0,
    )
    constexprs = dict(
        HEAD_DIM=d, HEAD_DIM_PAD=cfg.head_dim_pad, GQA=hq // hkv, BLOCK_Q=cfg.block_q, BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, PAGE_SIZE=page_size, CAUSAL=causal, USE_WINDOW=window > 0,
        EDGE_N=window_edge_keys(cfg.block_q, cfg.block_n, cfg.fp8_dots != "none" and cache is not None),
        USE_SOFTCAP=softcap > 0.0, NUM_SPLITS=splits, DOT_PRECISION="ieee" if dtype == "fp32" else None,
        PAGE_IDS_ASM=cfg.page_ids_asm, OFFSETS_32=cfg.offsets_32, OVERLAP_QK=cfg.overlap_qk,
        USE_SINKS=sinks, USE_K_SCALE=cache is not None, USE_V_SCALE=cache is not None, SOFT_FP8=soft,
        UPCAST_DOTS=False,
        FP16_DOTS=cache is not None and dtype == "bf16" and not (qk_in_fp8 and pv_in_fp8),
        FP8_DOTS=(2 if cfg.fp8_dots in FP8_PV_SPLIT_MODES else 1) if pv_in_fp8 else 0,
        FP8_QK=fp8_code if qk_in_fp8 else 0,
        QK_SPLIT=bool(qk_in_fp8) and cfg.fp8_dots in FP8_QK_SPLIT_MODES,
        PV_T=cfg.pv_transposed,
        P_INT_ROUND=dtype == "bf16" and cache is None and _lacks_bf16_conversion(arch),
        HEAVY_FIRST=cfg.heavy_first, EXTEND_MIN_Q=0, EXTEND_CHUNKS=False,
    )
    out = [_compile(arch, _signature(native.paged_attention_kernel, values, constexprs),
                    cfg.num_warps, cfg.num_stages, cfg.mfma_nonkdim)]
    if splits > 1:
        merge_values = {k: values[k] for k in native.merge_splits_kernel.arg_names if k in values}
        merge_consts = dict(HEAD_DIM=d, HEAD_DIM_PAD=cfg.head_dim_pad, NUM_SPLITS=splits,
                            SPLITS_PAD=max(2, triton.next_power_of_2(splits)))
        out.append(_compile(arch, _signature(native.merge_splits_kernel, merge_values, merge_consts),
                            cfg.merge_warps, 1))
    return out


def attention_ttgir(arch: str, cfg, **shape) -> str:
    """The attention kernel of ``attention(arch, cfg, **shape)`` as Triton's GPU IR, after pipelining."""
    _last.clear()
    attention(arch, cfg, **shape)
    return _last["kernel"].asm["ttgir"]


def kv_write(arch: str, *, num_kv_heads: int, head_dim: int, dtype: str = "bf16", fp8: int = 0) -> list[Compiled]:
    """Compile the KV-cache write as ops.write_kv_cache runs it (fp8: 1 e4m3fn, 2 e4m3fnuz, scaled)."""
    import triton

    from dflash_rocm_plugin.kernels import kv_cache
    cache = "u8" if fp8 else dtype
    values = dict(key_ptr=f"*{dtype}", value_ptr=f"*{dtype}", k_cache_ptr=f"*{cache}", v_cache_ptr=f"*{cache}",
                  slot_mapping_ptr="*i64", k_scale_ptr="*fp32", v_scale_ptr="*fp32", k_scale_stride=0,
                  v_scale_stride=0, num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=16)
    for prefix, rows in (("stride_k", ("t", "h", "d")), ("stride_v", ("t", "h", "d"))):
        values.update({f"{prefix}{r}": v for r, v in zip(rows, (num_kv_heads * head_dim, head_dim, 1))})
    for prefix in ("stride_kc", "stride_vc"):
        values.update({f"{prefix}b": 16 * num_kv_heads * head_dim, f"{prefix}s": num_kv_heads * head_dim,
                       f"{prefix}h": head_dim, f"{prefix}d": 1})
    consts = dict(BLOCK_H=triton.next_power_of_2(num_kv_heads), BLOCK_D=triton.next_power_of_2(head_dim),
                  FP8=fp8, USE_K_SCALE=bool(fp8), USE_V_SCALE=bool(fp8))
    return [_compile(arch, _signature(kv_cache.write_kv_cache_kernel, values, consts), 4, 1)]


def extend(arch: str, cfg, *, num_q_heads: int, num_kv_heads: int, head_dim: int, dtype: str = "bf16",
           window: bool = False, sinks: bool = False, fp8: int = 0) -> list[Compiled]:
    """Compile the dense-K/V prefill kernel as ops.paged_attention(new_keys=...) launches it with
    pointer loads (``cfg``: ExtendLaunch fields; TMA tiles compile on the GPU that has them).  ``fp8`` (1
    e4m3fn, 2 e4m3fnuz, per-head scales): over an fp8 cache, the rows' rounding first, then the attention
    over its buffers.  With ``cfg.chunks`` the prefixes' copy comes before the attention (page 16)."""
    from dflash_rocm_plugin.kernels import extend_attention, kv_cache
    hq, hkv, d = num_q_heads, num_kv_heads, head_dim
    row = (hq + 2 * hkv) * d  # q, k and v side by side per token, as the hosts' fused projection leaves them
    kv_row = hkv * d if fp8 else row
    values = dict(q_ptr=f"*{dtype}", q_desc=f"*{dtype}", new_k=f"*{dtype}", new_v=f"*{dtype}",
                  out_ptr=f"*{dtype}", out_desc=f"*{dtype}", seq_lens_ptr="*i32", query_start_loc_ptr="*i32",
                  sinks_ptr="*fp32", k_scale_ptr="*fp32", v_scale_ptr="*fp32", pre_k=f"*{dtype}",
                  pre_v=f"*{dtype}", scale=d ** -0.5, window=128,
                  num_seqs=3, stride_qt=row, stride_qh=d, stride_nkt=kv_row, stride_nvt=kv_row, stride_ot=hq * d,
                  stride_oh=d, k_scale_stride=int(bool(fp8)), v_scale_stride=int(bool(fp8)), stride_pt=hkv * d)
    consts = dict(HEAD_DIM=d, GQA=hq // hkv, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                  MIN_QUERY=cfg.block_m, CHUNKS=cfg.chunks, USE_WINDOW=window, USE_SINKS=sinks, USE_K_SCALE=bool(fp8),
                  USE_V_SCALE=bool(fp8), USE_DESC=False, DESC_QO=False, UPCAST=False, DOT_PRECISION=None)
    compiled = [_compile(arch, _signature(extend_attention.extend_attention_kernel, values, consts),
                         cfg.num_warps, cfg.num_stages)]
    if fp8:
        values = dict(key_ptr=f"*{dtype}", value_ptr=f"*{dtype}", k_rows_ptr=f"*{dtype}", v_rows_ptr=f"*{dtype}",
                      k_scale_ptr="*fp32", v_scale_ptr="*fp32", k_scale_stride=1, v_scale_stride=1,
                      num_tokens=8192, stride_kt=row, stride_kh=d, stride_vt=row, stride_vh=d, stride_rt=kv_row)
        consts = dict(HEAD_DIM=d, BLOCK_T=32, FP8=fp8, USE_K_SCALE=True, USE_V_SCALE=True)
        compiled.insert(0, _compile(arch, _signature(kv_cache.cached_rows_kernel, values, consts), 4, 1))
    if cfg.chunks:
        cache = "u8" if fp8 else dtype
        page = 16 * hkv * d
        values = dict(k_cache_ptr=f"*{cache}", v_cache_ptr=f"*{cache}", block_table_ptr="*i32", seq_lens_ptr="*i32",
                      query_start_loc_ptr="*i32", k_rows_ptr=f"*{dtype}", v_rows_ptr=f"*{dtype}", window=128,
                      num_seqs=3, stride_kcb=page, stride_kcs=hkv * d, stride_kch=d, stride_vcb=page,
                      stride_vcs=hkv * d, stride_vch=d, stride_bt=512, stride_bp=1, stride_rt=hkv * d)
        consts = dict(HEAD_DIM=d, PAGE_SIZE=16, GQA=hq // hkv, MIN_QUERY=cfg.block_m, USE_WINDOW=window, BLOCK_T=64,
                      FP8=fp8)
        compiled.insert(len(compiled) - 1,
                        _compile(arch, _signature(kv_cache.cached_prefix_kernel, values, consts), 4, 1))
    return compiled


def _main() -> int:
    results = []
    for job in json.load(sys.stdin):
        try:
            if job.get("kernel") == "attention_asm":
                attention_ttgir(job["arch"], types.SimpleNamespace(**job["launch"]), **job["shape"])
                results.append({"asm": _last["kernel"].asm["amdgcn" if job["arch"].startswith("gfx") else "ptx"]})
                continue
            if job.get("kernel") == "attention_ttgir":
                results.append({"ttgir": attention_ttgir(job["arch"], types.SimpleNamespace(**job["launch"]),
                                                         **job["shape"])})
                continue
            if job.get("kernel") == "extend":
                from dflash_rocm_plugin.ops.extend_launch import ExtendLaunch

                # The launch's own type: a field it no longer has fails the job instead of going unread.
                results.append([dataclasses.asdict(c) for c in extend(
                    job["arch"], ExtendLaunch(**job["launch"]), **job["shape"])])
                continue
            if job.get("kernel") == "kv_write":
                results.append([dataclasses.asdict(c) for c in kv_write(job["arch"], **job["shape"])])
                continue
            compiled = attention(job["arch"], types.SimpleNamespace(**job["launch"]), **job["shape"])
            results.append([dataclasses.asdict(c) for c in compiled])
        except Exception as exc:  # reported to the test, which fails on it
            results.append({"error": f"{type(exc).__name__}: {str(exc)[-2000:]}"})
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
