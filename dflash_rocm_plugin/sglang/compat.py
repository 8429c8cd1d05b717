"""What differs between the SGLang releases the adapter serves, found by probing features.

0.5.11 is the oldest release served: it has the ``sglang.srt.plugins`` loader and DFLASH.
Before 0.5.14 there is no ``KVWriteLoc`` (``set_kv_buffer`` takes the raw slot tensor), no
``runtime_context`` (the attention TP size comes from ``dp_attention``) and no
``BaseSWAKVPool``; 0.5.11/0.5.12 drive CUDA graphs through the legacy
``init_forward_metadata_capture_cuda_graph`` / ``..._replay_cuda_graph`` hooks instead of
the out-of-graph / in-graph ones.  Before 0.5.20 there is no ``kv_index_translator`` (the
block table comes straight from ``req_to_token``, which holds physical slots unless the
0.5.18 unified pool is on); before 0.5.15 there are no ``get_spec`` / ``get_exec``
config groups (the runner's ``server_args`` carries those fields) and no decode context
parallelism.  Probing attributes rather than version strings keeps point releases and
backports working.
"""

from __future__ import annotations


def _runtime_getter(name: str):
    try:
        from sglang.srt import runtime_context
    except ImportError:  # before 0.5.14
        return None
    return getattr(runtime_context, name, None)


def kv_write_loc_class():
    """``KVWriteLoc`` (0.5.14+), or None: then ``set_kv_buffer`` takes the slot tensor."""
    from sglang.srt.mem_cache import memory_pool

    return getattr(memory_pool, "KVWriteLoc", None)


def swa_pool_classes() -> tuple:
    """Hybrid sliding-window pool base classes of this release."""
    try:
        from sglang.srt.mem_cache.base_swa_memory_pool import BaseSWAKVPool
        return (BaseSWAKVPool,)
    except ImportError:  # before 0.5.14
        pass
    try:
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
        return (SWAKVPool,)
    except ImportError:
        return ()


def swa_kv_pool_class():
    """``SWAKVPool``, the hybrid sliding-window pool the backend can read, or None."""
    try:
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    except ImportError:
        return None
    return SWAKVPool


def hybrid_linear_pool_class():
    """``HybridLinearKVPool`` (full-attention K/V of GDN/Mamba hybrids), or None."""
    from sglang.srt.mem_cache import memory_pool

    return getattr(memory_pool, "HybridLinearKVPool", None)


def uses_legacy_graph_hooks() -> bool:
    """True where the graph runner calls ``init_forward_metadata_capture_cuda_graph`` /
    ``..._replay_cuda_graph`` (before the out-of-graph / in-graph hooks existed)."""
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    return not hasattr(AttentionBackend, "init_forward_metadata_out_graph")


def spec_config(runner):
    """Speculative-decoding settings: ``get_spec()`` (0.5.15+) or the runner's server args."""
    get_spec = _runtime_getter("get_spec")
    return get_spec() if get_spec is not None else runner.server_args


def dllm_algorithm(runner):
    get_exec = _runtime_getter("get_exec")
    try:  # the dllm config group is absent in some releases
        if get_exec is not None:
            return get_exec().dllm.dllm_algorithm
        return getattr(runner.server_args, "dllm_algorithm", None)
    except Exception:  # noqa: BLE001
        return None


def attn_tp_size() -> int:
    get_parallel = _runtime_getter("get_parallel")
    if get_parallel is None:  # before 0.5.14
        from sglang.srt.layers.dp_attention import get_attention_tp_size
        return int(get_attention_tp_size())
    return int(get_parallel().attn_tp_size)


def attn_dcp_size() -> int:
    """Decode context parallelism arrived in 0.5.15; before it the size is 1."""
    get_parallel = _runtime_getter("get_parallel")
    return int(getattr(get_parallel(), "attn_dcp_size", 1)) if get_parallel is not None else 1


def num_q_heads(model_config, tp: int) -> int:
    getter = getattr(model_config, "get_max_num_attention_heads", None)
    heads = getter() if getter is not None else model_config.num_attention_heads
    return heads // tp


def num_kv_heads(model_config, tp: int, dcp: int) -> int:
    # 0.5.14's get_num_kv_heads takes the TP size only.
    return model_config.get_num_kv_heads(tp) if dcp == 1 else model_config.get_num_kv_heads(tp, dcp)


def verify_tokens(runner) -> int:
    """Query rows per request of a decode-graph step (1, or the verify block size)."""
    if hasattr(runner, "decode_num_tokens_per_req"):
        return int(runner.decode_num_tokens_per_req())
    return int(spec_config(runner).speculative_num_draft_tokens or 1)


def is_dflash(algo) -> bool:
    probe = getattr(algo, "is_dflash_family", None) or getattr(algo, "is_dflash", None)
    return bool(probe and probe())


def kv_index_translator(runner):
    """The runner's translator (0.5.20+), or None: then ``req_to_token`` holds the slots."""
    return getattr(runner, "kv_index_translator", None)


def translates_kv_ids(runner) -> bool:
    """True when ``req_to_token`` holds virtual ids (the unified memory pool)."""
    translator = kv_index_translator(runner)
    if translator is not None:
        return bool(getattr(translator, "is_translating", False))
    # 0.5.18: the unified pool's allocator carries the virtual-to-physical translation.
    allocator = getattr(runner, "token_to_kv_pool_allocator", None)
    return getattr(allocator, "translate_kv_loc", None) is not None
