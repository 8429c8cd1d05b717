"""``RocmDflashAttnBackend``: SGLang's attention-backend interface over ``ops.paged_attention``.

Every forward first writes this step's K/V (through the pool's ``set_kv_buffer``; into an fp8
pool through ``ops.write_kv_cache``, which saturates and rounds as the reads expect, where the
pool's own write divides the caller's tensor in place and does not clamp) and then attends over
the paged cache alone, so EXTEND (with a radix prefix), DECODE,
TARGET_VERIFY and DRAFT_EXTEND_V2 are one ops call that differs only in metadata and
causality.  Causality comes from the layer: ``ENCODER_ONLY`` (the DFLASH draft block)
is non-causal, ``DECODER`` causal.  A verify ``custom_mask`` is never read: DFLASH
verify is causal by definition, and SGLang may hand an all-True placeholder at graph
capture (see ``registration.allow_verify_without_custom_mask``).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.srt.layers.radix_attention import AttentionType

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.sglang import compat
from dflash_rocm_plugin.sglang import metadata as md
from dflash_rocm_plugin.sglang.config_check import check_runner


def sglang_window_to_ops(sliding_window_size) -> int | None:
    """SGLang stores window_left W (HF window - 1): keys p-W..p are visible, W+1 of them.
    ops keeps key j iff p - j < window, so window = W + 1.  -1/None mean no window."""
    if sliding_window_size is None or sliding_window_size < 0:
        return None
    return int(sliding_window_size) + 1


def layer_is_causal(layer) -> bool:
    if layer.is_cross_attention:
        _refuse(layer, ["cross_attention"])
    if layer.attn_type == AttentionType.ENCODER_ONLY:
        return False
    if layer.attn_type == AttentionType.DECODER:
        return True
    feature = "bidirectional_decoder" if layer.attn_type.name == "DECODER_BIDIRECTIONAL" else "encoder"
    _refuse(layer, [feature], f"attention type {layer.attn_type.name}: ")


def paged_view(buffer: torch.Tensor, page_size: int) -> torch.Tensor:
    """[slots, H, D] token pool -> [pages, page_size, H, D] view (no copy)."""
    whole = buffer.shape[0] - buffer.shape[0] % page_size
    return buffer[:whole].view(whole // page_size, page_size, *buffer.shape[1:])


class RocmDflashAttnBackend(AttentionBackend):
    # Metadata is built from device tensors; seq_lens_cpu / seq_lens_sum are never read.
    needs_cpu_seq_lens = False

    def __init__(self, model_runner):
        layout = check_runner(model_runner)
        super().__init__()
        mc = model_runner.model_config
        tp, dcp = compat.attn_tp_size(), compat.attn_dcp_size()
        self.device = torch.device(model_runner.device)
        self.page_size = getattr(model_runner, "page_size", 1) or 1
        # HybridLinearAttnBackend, wrapping this backend for GDN hybrids, reads the pools off it.
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.swa_pool = layout.swa_pool  # hybrid sliding-window memory (pools.py), or None
        self.swa_layers = layout.swa_layers
        self.kv_index_translator = compat.kv_index_translator(model_runner)  # None before 0.5.20
        self.num_q_heads = compat.num_q_heads(mc, tp)
        self.num_kv_heads = compat.num_kv_heads(mc, tp, dcp)
        self.head_dim = mc.head_dim
        self.verify_tokens = compat.verify_tokens(model_runner)
        self.draft_extend_tokens = int(compat.spec_config(model_runner).speculative_num_draft_tokens or 1)
        self.pages_per_row = md.pages_per_row(self.req_to_token, self.page_size)
        self.fp8_cache = model_runner.token_to_kv_pool.dtype in ops.FP8_KV_CACHE_DTYPES
        self.forward_metadata = None
        self._graph: md.GraphBuffers | None = None
        # One split-KV scratch for every batch, eager or captured: sized for any query lengths
        # of up to as many requests as the request pool holds, and for each sub-pool's heads
        # (a hybrid sliding-window model's window layers may differ).
        floats = max(ops.workspace_floats(
            num_q_heads=self.num_q_heads, num_kv_heads=kv_heads, head_dim=head_dim,
            max_num_seqs=model_runner.req_to_token_pool.size,
            max_kv_len=self.pages_per_row * self.page_size, device=self.device)
            for kv_heads, head_dim in _sub_pool_heads(self.token_to_kv_pool, layout.probe_layers,
                                                      (self.num_kv_heads, self.head_dim)))
        self.workspace = torch.empty(floats, dtype=torch.float32, device=self.device) if floats else None

    # ---- metadata ---------------------------------------------------------------------

    def _kv_ids(self):
        return self.kv_index_translator if self.kv_index_translator is not None else self.req_to_token

    def _layout(self, fb, bs: int):
        return md.query_layout(fb, bs, verify_tokens=self.verify_tokens,
                               draft_extend_tokens=self.draft_extend_tokens)

    def init_forward_metadata(self, forward_batch):
        """Eager batches: fresh metadata tensors."""
        bs = forward_batch.batch_size
        if forward_batch.forward_mode.is_idle():
            bs = 0
        kv_lens, rows, max_q = self._layout(forward_batch, bs)
        block_table = torch.empty((bs, self.pages_per_row), dtype=torch.int32, device=self.device)
        md.fill_block_table(self._kv_ids(), forward_batch, bs, self.page_size, block_table)
        qsl = torch.empty((bs + 1,), dtype=torch.int32, device=self.device)
        md.fill_query_start_loc(rows, bs, qsl)
        meta = md.PagedMetadata(block_table, kv_lens.to(torch.int32), qsl, max_q, self.workspace)
        if self.swa_pool is not None:
            meta.swa_block_table = torch.empty_like(block_table)
            md.fill_swa_block_table(self.swa_pool.full_to_swa_index_mapping, block_table, bs,
                                    self.page_size, meta.swa_block_table)
            meta.swa_write_loc = md.swa_write_loc(self.swa_pool, forward_batch)
        self.forward_metadata = meta

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, **_unused):
        self._graph = md.GraphBuffers.allocate(max_bs, self.pages_per_row, self.device,
                                               swa_tokens=max_num_tokens if self.swa_pool is not None else 0)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        """Capture and replay: refill the address-stable buffers the graph reads."""
        g = self._graph
        if g is None:
            raise RuntimeError("rocm_dflash: init_cuda_graph_state must run before graph metadata")
        mode = forward_batch.forward_mode
        if not (mode.is_decode_or_idle() or mode.is_target_verify() or mode.is_draft_extend_v2()):
            raise ValueError(f"rocm_dflash: forward mode {mode.name} cannot run in a graph")
        bs = forward_batch.batch_size
        kv_lens, rows, max_q = self._layout(forward_batch, bs)
        md.fill_block_table(self._kv_ids(), forward_batch, bs, self.page_size, g.block_table)
        g.seq_lens[:bs].copy_(kv_lens)
        md.fill_query_start_loc(rows, bs, g.query_start_loc)
        meta = md.PagedMetadata(g.block_table, g.seq_lens[:bs], g.query_start_loc[: bs + 1], max_q,
                                self.workspace)
        if self.swa_pool is not None:
            md.fill_swa_block_table(self.swa_pool.full_to_swa_index_mapping, g.block_table, bs,
                                    self.page_size, g.swa_block_table)
            meta.swa_block_table = g.swa_block_table
            meta.swa_write_loc = md.swa_write_loc(self.swa_pool, forward_batch, into=g.swa_write_loc)
        self.forward_metadata = meta

    def init_forward_metadata_in_graph(self, forward_batch):
        pass  # everything is prepared out of graph

    # Before 0.5.13 (``compat.uses_legacy_graph_hooks``) the graph runner hands the batch
    # as loose tensors; both hooks are the out-of-graph refill above.  The tensors are
    # the runner's own address-stable buffers, and nothing here reads host values.

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices, seq_lens,
                                                 encoder_lens, forward_mode, spec_info):
        self.init_forward_metadata_out_graph(
            _legacy_batch(bs, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info),
            in_capture=True)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens, seq_lens_sum,
                                                encoder_lens, forward_mode, spec_info, seq_lens_cpu=None):
        self.init_forward_metadata_out_graph(
            _legacy_batch(bs, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info))

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    # ---- forward ----------------------------------------------------------------------

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self._forward(q, k, v, layer, forward_batch, save_kv_cache, layer_is_causal(layer), kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        # One query at the newest position: causal and non-causal coincide.
        return self._forward(q, k, v, layer, forward_batch, save_kv_cache, True, kwargs)

    def _forward(self, q, k, v, layer, fb, save_kv_cache, causal, kwargs):
        _reject_unsupported(layer, fb, kwargs)
        meta = self.forward_metadata
        pool = self.token_to_kv_pool
        k_cache = paged_view(pool.get_key_buffer(layer.layer_id), self.page_size)
        v_cache = paged_view(pool.get_value_buffer(layer.layer_id), self.page_size)
        # fp8 pools: the layer's checkpoint scales (0-d, or one per KV head); None means 1.0.
        scales = {"k_scale": layer.k_scale, "v_scale": layer.v_scale} if self.fp8_cache else {}
        if save_kv_cache and k is not None:
            # k is None on the fused AITER Qwen3 decode path, which wrote K/V itself.
            if self.fp8_cache:
                hkv = layer.tp_k_head_num
                loc = meta.swa_write_loc if layer.layer_id in self.swa_layers else fb.out_cache_loc
                ops.write_kv_cache(k.view(-1, hkv, layer.qk_head_dim), v.view(-1, hkv, layer.v_head_dim),
                                   k_cache, v_cache, loc, **scales)
            else:
                pool.set_kv_buffer(layer, write_loc(fb, meta.swa_write_loc), k, v)
        num_heads, head_dim = layer.tp_q_head_num, layer.qk_head_dim
        out = getattr(fb, "_attn_output", None)
        if out is None:
            out = q.new_empty((q.shape[0], num_heads * head_dim))
        # The rows just written: a prefill reads its own keys from them (ops decides which calls).
        new_kv = {}
        if save_kv_cache and k is not None and v is not None:
            hkv = layer.tp_k_head_num
            new_kv = dict(new_keys=k.reshape(-1, hkv, head_dim), new_values=v.reshape(-1, hkv, layer.v_head_dim))
        ops.paged_attention(
            q.reshape(-1, num_heads, head_dim), k_cache, v_cache,
            self._block_table(meta, layer), meta.seq_lens, meta.query_start_loc,
            causal=causal, scale=layer.scaling,
            sliding_window=sglang_window_to_ops(layer.sliding_window_size),
            softcap=layer.logit_cap if layer.logit_cap and layer.logit_cap > 0 else None,
            sinks=kwargs.get("sinks"), **scales,
            out=out.view(-1, num_heads, head_dim), max_query_len=meta.max_query_len,
            workspace=meta.workspace,
            **new_kv,
        )
        return out

    def _block_table(self, meta, layer):
        if layer.layer_id not in self.swa_layers:
            return meta.block_table
        if layer.sliding_window_size is None or layer.sliding_window_size < 0:
            # The window sub-pool has freed everything older than the window.
            raise ops.Unsupported(f"rocm_dflash: layer {layer.layer_id} lives in the sliding-window KV pool "
                                  "but has no sliding window")
        return meta.swa_block_table


def _sub_pool_heads(pool, probe_layers, default):
    """(kv heads, head_dim) of each sub-pool's buffers."""
    shapes = {tuple(pool.get_key_buffer(layer_id).shape[1:]) for layer_id in probe_layers}
    return sorted(shapes) or [default]


def _legacy_batch(bs, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info):
    """The ForwardBatch fields the out-of-graph metadata path reads."""
    if encoder_lens is not None:
        raise ops.Unsupported(f"rocm_dflash: {ops.features_problem(['cross_attention'])} (graphs with encoder_lens)")
    return SimpleNamespace(batch_size=bs, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                           forward_mode=forward_mode, spec_info=spec_info, extend_prefix_lens=None)


_KV_WRITE_LOC = compat.kv_write_loc_class()


def write_loc(fb, swa_loc=None):
    """The batch's KV write target; ``for_batch`` carries the physical mark (sglang >= 0.5.23).
    Before that the plain ``out_cache_loc`` is physical for the pools ``check_runner`` admits;
    before 0.5.14 ``set_kv_buffer`` takes it as is.  ``swa_loc``: the same slots in a hybrid
    sliding-window pool's window sub-pool (only such pools read it; they need 0.5.14+)."""
    if _KV_WRITE_LOC is None:
        return fb.out_cache_loc
    if hasattr(_KV_WRITE_LOC, "for_batch"):
        return _KV_WRITE_LOC.for_batch(fb, swa_loc=swa_loc)
    return _KV_WRITE_LOC(fb.out_cache_loc, swa_loc)


def _refuse(layer, features, context: str = "") -> None:
    """Raise ``ops.Unsupported`` with ops' reason for this layer and the features it asks for."""
    why = ops.supports(ops.AttentionSpec(head_dim=layer.qk_head_dim, v_head_dim=layer.v_head_dim, dtype=None,
                                         features=frozenset(features)))
    if why is not None:
        raise ops.Unsupported(f"rocm_dflash: {context}{why}")


def _reject_unsupported(layer, fb, kwargs) -> None:
    # Plain booleans first: this runs for every layer of every eager step.
    asked = ["score_mod"] if kwargs.get("score_mod") is not None else []
    if kwargs.get("aux_tensors") is not None:
        asked.append("score_mod")
    if getattr(fb, "mha_return_lse", False):
        asked.append("return_lse")
    if layer.logit_cap and layer.logit_cap > 0 and layer.logit_capping_method != "tanh":
        asked.append("non_tanh_softcap")
    if asked or layer.qk_head_dim != layer.v_head_dim:
        _refuse(layer, asked)
