"""DFlash draft ``apply_k_rope``: the dummy query must be shaped like K.

The draft rotates only K (context K/V projected from the target's hidden states), so it
hands the rotary op a throw-away query.  Before sgl-project/sglang#22342 that query had
one head; ROCm's ``rotary_embedding`` kernel requires ``num_heads % num_kv_heads == 0`` and
rejected it.  Every release with DFLASH (0.5.11+) has the fix; source builds from between
#22077 and #22342 do not.

Probe: call the release's ``apply_k_rope`` on a stand-in attention whose rotary op only
records the shapes it was given (CPU, a few bytes); needed when the query is not shaped
like K.  Patch: the method is replaced by one that passes ``k.new_empty(k.shape)``.
"""

from __future__ import annotations

import types

from dflash_rocm_plugin.hostfix import Probe
from dflash_rocm_plugin.hostfix import code as _code

FIX_ID = "sglang-dflash-k-rope-dummy-q"
MODULE = "sglang.srt.models.dflash"


def observed_query_shape(apply_k_rope, num_kv_heads: int = 2, head_dim: int = 8):
    """Run ``apply_k_rope`` with a recording rotary op; return (q shape, k shape)."""
    import torch

    seen = {}

    def rotary(positions, q, k):
        seen["q"], seen["k"] = tuple(q.shape), tuple(k.shape)
        return q, k

    tokens = 3
    stand_in = types.SimpleNamespace(
        rotary_emb=rotary, head_dim=head_dim, num_kv_heads=num_kv_heads, num_heads=num_kv_heads * 2,
        kv_size=num_kv_heads * head_dim, q_size=num_kv_heads * 2 * head_dim)
    k = torch.zeros(tokens, num_kv_heads * head_dim)
    apply_k_rope(stand_in, torch.arange(tokens), k)
    return seen.get("q"), seen.get("k")


def probe_class(cls) -> Probe:
    fn = cls.apply_k_rope
    if _code.is_marked(fn):
        return Probe.not_needed("already patched")
    try:
        q_shape, k_shape = observed_query_shape(fn)
    except Exception as exc:  # noqa: BLE001 - the release needs more than the stand-in has
        src = _code.source_of(fn) or ""
        if "k.shape" in src or "empty_like(k" in src:
            return Probe.not_needed(f"{cls.__name__}.apply_k_rope builds its dummy query from k.shape")
        return Probe.refuse(f"cannot tell how {cls.__name__}.apply_k_rope shapes its query: {exc!r}")
    if q_shape == k_shape:
        return Probe.not_needed(f"{cls.__name__}.apply_k_rope passes a query shaped like K {k_shape}")
    return Probe.need(f"{cls.__name__}.apply_k_rope passes a {q_shape} query for K {k_shape}", cls)


def probe() -> Probe:
    module = _code.optional_module(MODULE)
    if module is None:
        return Probe.not_needed("this sglang has no DFlash draft model")
    owners = [c for c in vars(module).values()
              if isinstance(c, type) and "apply_k_rope" in vars(c) and c.__module__ == module.__name__]
    if not owners:
        return Probe.not_needed("the DFlash draft model has no apply_k_rope")
    found = [probe_class(c) for c in owners]
    refused = [p for p in found if p.refused]
    if refused:
        return refused[0]
    needed = [p for p in found if p.needed]
    if not needed:
        return found[0]
    return Probe.need("; ".join(p.reason for p in needed), [p.state for p in needed])


def apply_k_rope(self, positions, k):
    # The rotary op checks num_heads % num_kv_heads; a query shaped like K always passes.
    dummy_q = k.new_empty(k.shape)
    _, k = self.rotary_emb(positions, dummy_q, k)
    return k


_code.mark(apply_k_rope, FIX_ID)


def patch(classes) -> str:
    for cls in classes:
        cls.apply_k_rope = apply_k_rope
    return "apply_k_rope passes k.new_empty(k.shape) as the dummy query"
