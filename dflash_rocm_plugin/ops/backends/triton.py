"""The plugin's own Triton kernels: they serve every call that passed validation."""

from __future__ import annotations

import operator

import torch

from dflash_rocm_plugin.ops import _runtime, launch_config, workspace
from dflash_rocm_plugin.ops.backends.triton_direct import Relauncher
from dflash_rocm_plugin.ops.call import AttentionCall
from dflash_rocm_plugin.ops.kv_cache import FP8_CODES
from dflash_rocm_plugin.ops.support import FP8_DOT_QUERY_DTYPES, fp8_dots_problem, native_fp8_dtype

NAME = "triton"


def plan(call: AttentionCall) -> launch_config.AttentionLaunch:
    return launch_config.choose(
        num_tokens=call.num_tokens, num_seqs=call.num_seqs, num_kv_heads=call.num_kv_heads,
        group=call.num_q_heads // call.num_kv_heads, head_dim=call.head_dim, kv_capacity=call.kv_capacity,
        max_query_len=call.max_query_len, num_splits=call.num_kv_splits, device_index=call.q.device.index,
        page_size=call.page_size, window=call.window or None, dtype=call.q.dtype,
        kv_cache_dtype=call.k_cache.dtype, causal=call.causal)


def soft_fp8(cache_dtype, device_index) -> int:
    """0: the cache is read with the hardware conversion; 1 (e4m3fn) / 2 (e4m3fnuz): as bytes,
    decoded by bit arithmetic -- under the interpreter, whose fp8 casts are wrong, and where the
    GPU has no conversion for that format (e4m3fnuz outside gfx94x, e4m3fn on gfx94x)."""
    code = FP8_CODES.get(cache_dtype, 0)
    if not code or _runtime.interpreting():
        return code
    return 0 if cache_dtype == native_fp8_dtype(_runtime.gpu_arch(device_index)) else code


class Launch:
    """Everything of a call's Triton launches that its shapes decide (``ops/call_cache.py``)."""

    __slots__ = ("cfg", "soft", "grid", "ints", "constexprs", "merge_grid", "merge_ints", "merge_constexprs",
                 "scratch", "relaunch", "_launches")

    def __init__(self, call: AttentionCall):
        cfg = self.cfg = plan(call)
        q, out, k_cache, v_cache = call.q, call.out, call.k_cache, call.v_cache
        self.soft = soft = soft_fp8(k_cache.dtype, q.device.index)
        # The interpreter's bf16 dots are wrong; it runs them in fp32.  fp8 tiles under bf16
        # queries convert to fp16 for the dots: half the conversion work of bf16 (kernel docstring).
        # With ``fp8_dots`` a natively converted fp8 cache dots in fp8 instead (the kernel docstring).
        fp8_dots = (cfg.fp8_dots if call.fp8 and not soft and q.dtype in FP8_DOT_QUERY_DTYPES
                    and not _runtime.interpreting() else "none")
        problem = fp8_dots != "none" and fp8_dots_problem(fp8_dots, _runtime.gpu_arch(q.device.index))
        if problem:
            raise ValueError(f"{problem}; choose one of {[m for m in launch_config.FP8_DOTS_MODES if m != fp8_dots]}")
        qk_in_fp8, pv_in_fp8 = launch_config.FP8_DOT_PRODUCTS[fp8_dots]
        # The kernel's FP8_DOTS: how P joins V's format (1 rounded, 2 as two parts); 0: V converted.
        fp8_code = (2 if fp8_dots in launch_config.FP8_PV_SPLIT_MODES else 1) if pv_in_fp8 else 0
        fp8_qk = FP8_CODES[k_cache.dtype] if qk_in_fp8 else 0
        fp16_dots = call.fp8 and q.dtype == torch.bfloat16 and not (qk_in_fp8 and pv_in_fp8)
        upcast = q.dtype == torch.bfloat16 and not fp16_dots and not fp8_qk and _runtime.interpreting()
        # bf16 P rounded by integer arithmetic where the GPU has no f32 -> bf16 conversion (the kernel).
        p_int_round = (q.dtype == torch.bfloat16 and not fp16_dots and fp8_code == 0
                   and _lacks_bf16_conversion(_runtime.gpu_arch(q.device.index)))
        tokens, hq, d = q.shape
        seqs, hkv, splits = call.num_seqs, k_cache.shape[2], cfg.num_splits
        # The split-KV workspace views, (splits, tokens, heads, head_dim); None with one split.
        self.scratch = workspace.LaunchScratch(splits, tokens, hq, d) if splits > 1 else None
        partial_strides = _partial_strides(splits, tokens, hq, d)
        scale_per_head = [1 if s is not None and s.numel() > 1 else 0 for s in (call.k_scale, call.v_scale)]
        self.grid = (tokens // cfg.block_q + seqs, hkv, splits)
        out_strides = out.stride()
        # A uint8 view of an fp8 cache has the same strides.
        self.ints = (*scale_per_head, call.scale, call.softcap, call.window, seqs,
                     *q.stride(), *k_cache.stride(), *v_cache.stride(), *out_strides,
                     *call.block_table.stride(), *partial_strides)
        self.constexprs = dict(
            HEAD_DIM=d, HEAD_DIM_PAD=cfg.head_dim_pad,
            GQA=hq // hkv, BLOCK_Q=cfg.block_q, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, PAGE_SIZE=k_cache.shape[1], CAUSAL=call.causal, USE_WINDOW=call.window > 0,
            EDGE_N=launch_config.window_edge_keys(cfg.block_q, cfg.block_n, fp8_dots != "none"),
            USE_SOFTCAP=call.softcap > 0.0, NUM_SPLITS=splits,
            DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else None,
            PAGE_IDS_ASM=cfg.page_ids_asm, OVERLAP_QK=cfg.overlap_qk,
            OFFSETS_32=cfg.offsets_32 and _fits_int32(k_cache) and _fits_int32(v_cache),
            USE_SINKS=call.sinks is not None, USE_K_SCALE=call.k_scale is not None,
            USE_V_SCALE=call.v_scale is not None,
            SOFT_FP8=soft, UPCAST_DOTS=upcast, FP16_DOTS=fp16_dots, FP8_DOTS=fp8_code,
            FP8_QK=fp8_qk, QK_SPLIT=bool(fp8_qk) and fp8_dots in launch_config.FP8_QK_SPLIT_MODES,
            PV_T=cfg.pv_transposed, P_INT_ROUND=p_int_round,
            HEAVY_FIRST=cfg.heavy_first, EXTEND_MIN_Q=call.extend_min_q, EXTEND_CHUNKS=call.extend_chunks,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )
        if cfg.mfma_nonkdim and _runtime.is_rocm() and not _runtime.interpreting():
            self.constexprs["matrix_instr_nonkdim"] = cfg.mfma_nonkdim  # an AMD compile option
        self.merge_grid = (tokens, hq, 1)
        self.merge_ints = (seqs, *out_strides, *partial_strides)
        self.merge_constexprs = dict(
            HEAD_DIM=d, HEAD_DIM_PAD=cfg.head_dim_pad,
            NUM_SPLITS=splits, SPLITS_PAD=max(2, _runtime.next_power_of_2(splits)),
            num_warps=cfg.merge_warps,
        )
        self.relaunch = Relauncher()
        self._launches = None

    def launches(self) -> tuple:
        """``(jit, grid, take, ints, constexprs)`` of each kernel, in order (``Relauncher``); the
        kernels are imported at the first launch, not when a call is validated."""
        kernels, _ = _runtime.kernels()
        found = self._launches
        if found is None or found[0][0] is not kernels.paged_attention_kernel:
            if found is not None:
                self.relaunch = Relauncher()  # what it kept was compiled from other kernel objects
            found = ((kernels.paged_attention_kernel, self.grid, None, self.ints, self.constexprs),)
            if self.scratch is not None:
                found += ((kernels.merge_splits_kernel, self.merge_grid, _MERGE_POINTERS, self.merge_ints,
                           self.merge_constexprs),)
            self._launches = found
        return found


# A call's pointers, all of them the attention kernel's: q, k_cache, v_cache, out, block_table,
# seq_lens, query_start_loc, partial out, partial lse, sinks, k_scale, v_scale (q standing in for
# each one switched off).  The split merge's:
_MERGE_POINTERS = operator.itemgetter(3, 7, 8, 6)  # out, partial out, partial lse, query_start_loc


def launch(prepared: Launch, q, k_cache, v_cache, out, block_table, seq_lens, query_start_loc, sinks, k_scale,
           v_scale, given_workspace) -> None:
    """Run a prepared launch on this call's tensors (of the shapes it was prepared for)."""
    if prepared.soft:
        k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
    if prepared.scratch is not None:
        # Flat tensors at the views' starts: the kernels read them through the strides in ``ints``.
        p_out, p_lse = prepared.scratch.views(q.device, given_workspace)
    else:
        p_out = p_lse = out  # not read when there is one split
    unused = q  # a valid pointer for switched-off operands
    launches = prepared.launches()  # first: it may replace the relauncher
    prepared.relaunch(launches, (q, k_cache, v_cache, out, block_table, seq_lens, query_start_loc, p_out, p_lse,
                                 unused if sinks is None else sinks, unused if k_scale is None else k_scale,
                                 unused if v_scale is None else v_scale))


def run(call: AttentionCall) -> None:
    launch(Launch(call), call.q, call.k_cache, call.v_cache, call.out, call.block_table, call.seq_lens,
           call.query_start_loc, call.sinks, call.k_scale, call.v_scale, call.workspace)


def _lacks_bf16_conversion(arch: str) -> bool:
    """CDNA2/CDNA3 (gfx90a, gfx94x) convert f32 to bf16 only in software; gfx950 and NVIDIA have
    an instruction for it."""
    return arch.startswith(("gfx90a", "gfx94"))


def _fits_int32(cache: torch.Tensor) -> bool:
    """Every element's offset from the base fits in int32 (the kernel's 32-bit address math)."""
    return sum((n - 1) * abs(st) for n, st in zip(cache.shape, cache.stride())) < 2**31


def _partial_strides(num_splits: int, num_tokens: int, num_q_heads: int, head_dim: int):
    """Strides of the contiguous partials ``workspace.scratch`` holds: out [S, T, H, D], lse [S, T, H]."""
    if num_splits == 1:
        return (0, 0, 0, 0, 0)
    return (num_tokens * num_q_heads * head_dim, num_q_heads * head_dim, head_dim, num_tokens * num_q_heads,
            num_q_heads)
