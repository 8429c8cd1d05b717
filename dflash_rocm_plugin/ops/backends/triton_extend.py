"""The dense-K/V prefill kernel's launch (kernels/extend_attention.py), prepared once per call key.

It serves the call's whole prompts of at least ``cfg.block_m`` tokens, and with ``cfg.chunks`` its chunks
of that many tokens over a prefix of at most GQA times as many keys they see; the paged kernel, launched first for
the same call with ``EXTEND_MIN_Q`` (and ``EXTEND_CHUNKS``) set, serves the rest.  The order matters only where the
paged launch splits its keys (possible under the interpreter's short tiles): its merge then writes
every row, and this launch's rows overwrite the prompts'.

Like the paged launch it is relaunched without ``JITFunction.run`` on repeat calls
(``triton_direct.Relauncher``): hosts run prefill attention eagerly once per layer.  On Hopper its K/V
tiles come through TMA descriptors, built per call around the rows' addresses and handed to Triton's
launcher, which encodes them.

Over an fp8 cache a first kernel writes the values the cache holds for the call's rows, before their
scale, into two dense buffers of q's dtype (kernels/kv_cache.py, ``cached_rows_kernel``; 4 bytes per row
element read and written, ~2 % of a 1 x 8K prompt's attention), and the prompts read those: the answer the
paged kernel would give from the cache, at the dense kernel's rate.

With ``cfg.chunks`` a kernel before the attention copies the keys the chunks see of their prefixes (under a
window its last ``window - 1``) out of the pages into two buffers of GQA rows per query token
(kernels/kv_cache.py, ``cached_prefix_kernel``): a prefix's keys and values read and written once more,
against the attention's GQA x 4 FLOP per prefix element and query row.
"""

from __future__ import annotations

import functools
import operator

import torch

from dflash_rocm_plugin.ops import _runtime, kv_cache
from dflash_rocm_plugin.ops.backends.triton_direct import Relauncher
from dflash_rocm_plugin.ops.call import AttentionCall
from dflash_rocm_plugin.ops.extend_launch import ExtendLaunch

_data_ptr = torch.Tensor.data_ptr


def _buffer(shape: tuple, like: torch.Tensor) -> torch.Tensor:
    """A buffer of rows a first kernel fills for the attention (rows it does not fill hold anything)."""
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _aligned(*byte_offsets: int) -> bool:
    """Every offset a multiple of 16 bytes, as TMA copies need their bases and row strides."""
    return functools.reduce(operator.or_, byte_offsets) % 16 == 0


class Launch:
    """Everything of a call's dense launch that its key decides; the TMA choice waits for the rows'
    addresses (a misaligned base takes pointer loads)."""

    __slots__ = ("cfg", "grid", "ints", "constexprs", "rows", "tma_strides", "qo_strides", "fp8_rows", "prefix",
                 "prefix_rows", "_variants", "_jit")

    def __init__(self, call: AttentionCall, cfg: ExtendLaunch, new_keys: torch.Tensor, new_values: torch.Tensor):
        self.cfg = cfg
        q, out = call.q, call.out
        tokens, hq, d = q.shape
        hkv = new_keys.shape[1]
        # The interpreter's bf16 dots are wrong; it runs them in fp32.
        upcast = q.dtype == torch.bfloat16 and _runtime.interpreting()
        fp8 = kv_cache.FP8_CODES.get(call.k_cache.dtype, 0)
        k_scale, v_scale = call.k_scale, call.v_scale  # None but over an fp8 cache (support.kv_scale_problem)
        scale_strides = (int(k_scale is not None and k_scale.numel() > 1),
                         int(v_scale is not None and v_scale.numel() > 1))
        # [tokens, kv_heads * head_dim]: each token's heads side by side (support.extend_layout_problem).
        self.rows = (tokens, hkv * d)
        # Over an fp8 cache: the launch of the kernel that writes the rows the prompts read (see above).
        self.fp8_rows = None
        row_strides = (new_keys.stride(0), new_values.stride(0))
        if fp8:
            block_t = 32
            self.fp8_rows = ((-(-tokens // block_t), hkv, 1),
                             (*scale_strides, tokens, new_keys.stride(0), new_keys.stride(1), new_values.stride(0),
                              new_values.stride(1), hkv * d),
                             dict(HEAD_DIM=d, BLOCK_T=block_t, FP8=fp8, USE_K_SCALE=k_scale is not None,
                                  USE_V_SCALE=v_scale is not None, num_warps=4))
            row_strides = (hkv * d, hkv * d)
        # With chunks: the launch of the kernel that copies their prefixes into GQA rows per query token.
        gqa = hq // hkv
        self.prefix = self.prefix_rows = None
        if cfg.chunks:
            block_t = 64
            self.prefix_rows = (gqa * tokens, hkv * d)
            kc, vc, table = call.k_cache, call.v_cache, call.block_table
            self.prefix = ((gqa * tokens // block_t + call.num_seqs, hkv, 1),
                           (call.window, call.num_seqs, *kc.stride()[:3], *vc.stride()[:3], *table.stride(), hkv * d),
                           dict(HEAD_DIM=d, PAGE_SIZE=kc.shape[1], GQA=gqa, MIN_QUERY=cfg.block_m,
                                USE_WINDOW=call.window > 0, BLOCK_T=block_t, FP8=fp8, num_warps=4))
        self.grid = (hq, tokens // cfg.block_m + call.num_seqs, 1)
        self.ints = (call.scale, call.window, call.num_seqs, q.stride(0), q.stride(1), *row_strides,
                     out.stride(0), out.stride(1), *scale_strides, hkv * d)
        self.constexprs = dict(
            HEAD_DIM=d, GQA=gqa, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, MIN_QUERY=cfg.block_m,
            CHUNKS=cfg.chunks, USE_WINDOW=call.window > 0, USE_SINKS=call.sinks is not None,
            USE_K_SCALE=k_scale is not None, USE_V_SCALE=v_scale is not None, UPCAST=upcast,
            DOT_PRECISION="ieee" if q.dtype == torch.float32 or upcast else None,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        size = q.element_size()  # the rows the kernel reads are in q's dtype either way
        self.tma_strides = cfg.use_desc and _aligned(row_strides[0] * size, row_strides[1] * size)
        # q and out as [tokens, heads * head_dim] tiles: heads side by side, 16-byte row strides.
        self.qo_strides = (self.tma_strides and cfg.qo_desc and q.stride(1) == d and out.stride(1) == d
                           and _aligned(q.stride(0) * size, out.stride(0) * size))
        self._variants: dict = {}   # (K/V descriptors, q/out descriptors) -> (launches, relauncher)
        self._jit = None

    def _launches(self, kv_desc: bool, qo_desc: bool):
        jit = _runtime.extend_kernel()
        if jit is not self._jit:  # kernels imported anew (interpreter switched): what was kept is stale
            self._variants.clear()
            self._jit = jit
        found = self._variants.get((kv_desc, qo_desc))
        if found is None:
            kv_kernels = _runtime.kernels()[1]
            launches = ((jit, self.grid, _ATTENTION_POINTERS, self.ints,
                         dict(self.constexprs, USE_DESC=kv_desc, DESC_QO=qo_desc)),)
            if self.prefix is not None:
                launches = ((kv_kernels.cached_prefix_kernel, *self.prefix[:1], _PREFIX_POINTERS, *self.prefix[1:]),
                            *launches)
            if self.fp8_rows is not None:
                grid, ints, constexprs = self.fp8_rows
                launches = ((kv_kernels.cached_rows_kernel, grid, _FP8_ROWS_POINTERS, ints, constexprs), *launches)
            found = self._variants[kv_desc, qo_desc] = (launches, Relauncher(descriptors=kv_desc))
        return found


# What each kernel takes of ``launch``'s pointers: (q, q tiles, K rows, V rows, out, out tiles, seq_lens,
# query_start_loc, sinks, k_scale, v_scale, prefix K and V rows (tensors or tiles), then over an fp8 cache
# the host's K and V and the two buffers the attention reads, then with chunks the K and V caches, the
# block table and the two prefix buffers); q stands in for what a call has not.
_ATTENTION_POINTERS = operator.itemgetter(*range(13))
_FP8_ROWS_POINTERS = operator.itemgetter(13, 14, 15, 16, 9, 10)
_PREFIX_POINTERS = operator.itemgetter(17, 18, 19, 6, 7, 20, 21)


def launch(prepared: Launch, q: torch.Tensor, out: torch.Tensor, seq_lens: torch.Tensor,
           query_start_loc: torch.Tensor, new_keys: torch.Tensor, new_values: torch.Tensor,
           sinks: torch.Tensor | None, k_scale: torch.Tensor | None = None,
           v_scale: torch.Tensor | None = None, k_cache: torch.Tensor | None = None,
           v_cache: torch.Tensor | None = None, block_table: torch.Tensor | None = None) -> None:
    """Run a prepared dense launch on this call's tensors (of the shapes it was prepared for); the cache
    and block table are read for a launch with chunks."""
    rows = (q, q, q, q)
    if prepared.fp8_rows is not None:  # the attention reads the buffers the rounding writes
        k_rows, v_rows = _buffer(prepared.rows, q), _buffer(prepared.rows, q)
        rows = (new_keys, new_values, k_rows, v_rows)
        new_keys, new_values = k_rows, v_rows
    prefix = ()
    pre_k = pre_v = q
    if prepared.prefix is not None:  # the attention reads the prefixes' copies
        pre_k, pre_v = _buffer(prepared.prefix_rows, q), _buffer(prepared.prefix_rows, q)
        if prepared.fp8_rows is not None:  # bytes, decoded by the copy (a uint8 view has the same strides)
            k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
        prefix = (k_cache, v_cache, block_table, pre_k, pre_v)
    keys, values, q_tiles, out_tiles = new_keys, new_values, q, out
    kv_desc = prepared.tma_strides and _aligned(_data_ptr(keys), _data_ptr(values))
    qo_desc = kv_desc and prepared.qo_strides and _aligned(_data_ptr(q), _data_ptr(out))
    if kv_desc:
        from triton.tools.tensor_descriptor import TensorDescriptor
        d = q.shape[2]
        block = [prepared.cfg.block_n, d]
        keys = TensorDescriptor(keys, list(prepared.rows), [keys.stride(0), 1], block)
        values = TensorDescriptor(values, list(prepared.rows), [values.stride(0), 1], block)
        if prefix:  # fresh buffers: 16-byte aligned, rows of kv_heads * head_dim
            pre_k = TensorDescriptor(pre_k, list(prepared.prefix_rows), [prepared.prefix_rows[1], 1], block)
            pre_v = TensorDescriptor(pre_v, list(prepared.prefix_rows), [prepared.prefix_rows[1], 1], block)
        if qo_desc:
            tokens, heads = q.shape[0], q.shape[1] * d
            block = [prepared.cfg.block_m, d]
            q_tiles = TensorDescriptor(q, [tokens, heads], [q.stride(0), 1], block)
            out_tiles = TensorDescriptor(out, [tokens, heads], [out.stride(0), 1], block)
    launches, relaunch = prepared._launches(kv_desc, qo_desc)
    relaunch(launches, (q, q_tiles, keys, values, out, out_tiles, seq_lens, query_start_loc,
                        q if sinks is None else sinks, q if k_scale is None else k_scale,
                        q if v_scale is None else v_scale, pre_k, pre_v, *rows, *prefix))

