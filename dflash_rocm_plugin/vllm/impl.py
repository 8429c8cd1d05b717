"""``RocmDFlashImpl``: translates one vLLM attention layer call into ``dflash_rocm_plugin.ops``."""

from __future__ import annotations

import torch
from vllm.v1.attention.backend import AttentionImpl, AttentionType

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.vllm import support
from dflash_rocm_plugin.vllm.metadata import RocmDFlashMetadata


def split_kv_cache(kv_cache: torch.Tensor, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's logical ``[blocks, heads, block_size, K|V]`` view -> two strided
    ``[blocks, block_size, heads, head_size]`` views (no copy, any worker-wide layout)."""
    if kv_cache.shape[-1] != 2 * head_size:
        raise ValueError(
            f"rocm_dflash: the KV cache holds {kv_cache.shape[-1]} values per head and slot; "
            f"expected K|V = 2 x head_size ({2 * head_size}): "
            f"{ops.v_head_dim_problem(head_size, kv_cache.shape[-1] - head_size)}")
    key_cache, value_cache = kv_cache.transpose(1, 2).split(head_size, dim=-1)
    return key_cache, value_cache


class RocmDFlashImpl(AttentionImpl[RocmDFlashMetadata]):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int | None = None,
                 alibi_slopes: list[float] | None = None, sliding_window: int | None = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None, **extra) -> None:
        # The backend's supports_* hooks refuse these at selection; an impl built directly
        # (or by a model that bypasses selection) still fails here, before any kernel.
        asked = {"alibi": alibi_slopes is not None or extra.get("use_alibi_sqrt"),
                 "chunked_local": extra.get("chunk_lookback", -1) > -1}
        asked.update(dict.fromkeys(support.attn_type_features(attn_type) or (), True))
        # The model dtype is not known here (None); selection and every call check it.
        support.require(head_size=head_size, dtype=None, kv_cache_dtype=kv_cache_dtype,
                        num_q_heads=num_heads, num_kv_heads=num_kv_heads or num_heads,
                        features=[name for name, on in asked.items() if on])
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = sliding_window  # key j visible from position p iff p - j < window
        self.logits_soft_cap = logits_soft_cap or None  # vLLM uses 0 for "none"
        self.kv_cache_dtype = kv_cache_dtype
        # The cache tensor vLLM allocates for fp8 is uint8; it holds the platform's e4m3 format.
        self.fp8_dtype = support.platform_fp8_dtype() if kv_cache_dtype in support.FP8_NAMES else None
        # Kept by reference: vLLM loads the sink weights into this parameter after the impl exists.
        self.sinks = sinks
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def do_kv_cache_update(self, layer, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                           slot_mapping: torch.Tensor) -> None:
        """Store this step's K/V; padded slots (< 0) are skipped.  Called by vLLM before
        ``forward`` and directly by the DFlash draft for its projected context K/V."""
        if key is None or value is None or kv_cache.numel() == 0:
            return
        key_cache, value_cache = self._caches(kv_cache)
        ops.write_kv_cache(key, value, key_cache, value_cache, slot_mapping, **self._kv_scales(layer))

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                kv_cache: torch.Tensor, attn_metadata: RocmDFlashMetadata, output: torch.Tensor,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError(f"rocm_dflash: {ops.features_problem({'output_quant'})}")
        if attn_metadata is None:  # memory-profiling run: no KV cache yet
            return output.fill_(0)
        num_tokens = attn_metadata.num_actual_tokens
        out = output.view(-1, self.num_heads, self.head_size)
        key_cache, value_cache = self._caches(kv_cache)
        # This step's K/V rows, as do_kv_cache_update wrote them: a prefill reads its own keys from
        # them (ops decides which calls).  A layer sharing another's cache wrote none.
        new_kv = {}
        if key is not None and value is not None and self.kv_sharing_target_layer_name is None:
            new_kv = dict(new_keys=key.view(-1, self.num_kv_heads, self.head_size)[:num_tokens],
                          new_values=value.view(-1, self.num_kv_heads, self.head_size)[:num_tokens])
        ops.paged_attention(
            query.view(-1, self.num_heads, self.head_size)[:num_tokens],
            key_cache, value_cache,
            attn_metadata.block_table, attn_metadata.seq_lens, attn_metadata.query_start_loc,
            causal=attn_metadata.causal,
            scale=self.scale,
            sliding_window=self.sliding_window,
            softcap=self.logits_soft_cap,
            sinks=self.sinks,
            **self._kv_scales(layer),
            out=out[:num_tokens],
            max_query_len=attn_metadata.max_query_len or None,  # 0: an empty batch
            workspace=attn_metadata.workspace,
            **new_kv,
        )
        return output

    def _caches(self, kv_cache: torch.Tensor):
        key_cache, value_cache = split_kv_cache(kv_cache, self.head_size)
        if self.fp8_dtype is not None:
            key_cache, value_cache = key_cache.view(self.fp8_dtype), value_cache.view(self.fp8_dtype)
        return key_cache, value_cache

    def _kv_scales(self, layer) -> dict:
        """The layer's K/V scales (0-d or [num_kv_heads] float32, on the device) for an fp8 cache."""
        if self.fp8_dtype is None:
            return {}
        return {"k_scale": layer._k_scale, "v_scale": layer._v_scale}
