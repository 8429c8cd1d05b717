"""Which SGLang KV pools the backend reads, and where each layer's K/V lives in them.

Every pool admitted here keeps ordinary token-major ``[slots, heads, head_dim]`` K/V
buffers for each attention layer the backend serves, addressed by the model's global
layer ids:

``MHATokenToKVPool``
    every layer, one slot space (``req_to_token`` holds the slots).
``HybridLinearKVPool`` (Qwen3.5/3.6, Qwen3-Next: gated-delta-net + full attention)
    an ``MHATokenToKVPool`` for the full-attention layers only; the pool maps global ids
    to its dense ones.  The GDN layers' state lives in the request pool's ``MambaPool``
    and belongs to SGLang's own linear-attention backend inside ``HybridLinearAttnBackend``,
    which hands only the full-attention layers to this backend.
``SWAKVPool`` (hybrid sliding-window memory: Gemma-4, gpt-oss, ...)
    a full and a sliding-window ``MHATokenToKVPool``.  A window layer's slot is its full
    slot translated through the pool's ``full_to_swa_index_mapping``, for reads (a second
    block table) and writes (``KVWriteLoc.swa_loc``).  The two sub-pools are paged in step,
    so the translation keeps the in-page offset and maps pages to pages.  Window slots
    SGLang has freed map to slot 0; they lie outside the window and are never read.

Anything else is refused with the reason (see ``describe``).
"""

from __future__ import annotations

import dataclasses

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.sglang import compat

DISABLE_SWA_POOL = "--disable-hybrid-swa-memory"
# Why a pool of DeepSeek-style latent (MLA) or sparse (DSA) layers is refused, in ops' words.
_LATENT_CACHES = ops.features_problem({"mla", "sparse"})


@dataclasses.dataclass(frozen=True)
class PoolLayout:
    pool: object
    kind: str                    # "plain", "hybrid_linear" or "swa"
    probe_layers: tuple          # one global layer id per sub-pool, to inspect its buffers
    swa_layers: frozenset = frozenset()  # global ids whose K/V live in the sliding-window sub-pool

    @property
    def swa_pool(self):
        return self.pool if self.kind == "swa" else None


def describe(pool) -> PoolLayout | str:
    """How to read ``pool``, or why it cannot be read."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    name = type(pool).__name__
    if isinstance(pool, compat.swa_pool_classes()):
        return _describe_swa(pool, MHATokenToKVPool)
    if isinstance(pool, MHATokenToKVPool):
        return PoolLayout(pool, "plain", (pool.start_layer,))
    hybrid = compat.hybrid_linear_pool_class()
    if hybrid is not None and isinstance(pool, hybrid):
        full = getattr(pool, "full_kv_pool", None)
        if getattr(pool, "use_mla", False) or not isinstance(full, MHATokenToKVPool):
            return (f"KV pool {name} holds its full-attention layers in {type(full).__name__} "
                    f"({_LATENT_CACHES})")
        ids = tuple(pool.full_attention_layer_id_mapping)
        if not ids:
            return f"KV pool {name} has no full-attention layers for this backend to serve"
        return PoolLayout(pool, "hybrid_linear", (ids[0],))
    return (f"KV pool {name} is not supported; served: MHATokenToKVPool, HybridLinearKVPool "
            "(full-attention layers of GDN hybrids) and SWAKVPool (hybrid sliding-window memory)")


def _describe_swa(pool, mha_class) -> PoolLayout | str:
    name = type(pool).__name__
    fallback = f"; start SGLang with {DISABLE_SWA_POOL} to keep every layer in one plain pool"
    swa_class = compat.swa_kv_pool_class()
    if compat.kv_write_loc_class() is None:
        # Before 0.5.14 the pool translates window writes itself, from state set per batch.
        return f"KV pool {name}: hybrid sliding-window pools need sglang >= 0.5.14" + fallback
    if swa_class is None or type(pool) is not swa_class:
        return f"KV pool {name} is not supported (of the hybrid sliding-window pools, SWAKVPool only)" + fallback
    subs = (getattr(pool, "full_kv_pool", None), getattr(pool, "swa_kv_pool", None))
    if not all(isinstance(p, mha_class) for p in subs):
        return (f"KV pool {name} holds {', '.join(type(p).__name__ for p in subs)} sub-pools "
                f"({_LATENT_CACHES})" + fallback)
    if getattr(pool, "swa_req_ring_size", None) is not None or getattr(pool, "request_window", None) is not None \
            or getattr(pool, "swa_uses_full_indices", False):
        return (f"KV pool {name} keeps its window in per-request rings/rows, not in translated slots"
                + fallback)
    full = tuple(g for g, (_, is_swa) in pool.layers_mapping.items() if not is_swa)
    swa = tuple(g for g, (_, is_swa) in pool.layers_mapping.items() if is_swa)
    return PoolLayout(pool, "swa", tuple(ids[0] for ids in (full, swa) if ids), frozenset(swa))
