"""vLLM's own ``Attention`` layer accepts the plugin backend: it builds the impl with the
arguments a model passes (DFlash's draft attention passes ``sinks=None``), and the layer's
``AttentionBackendEnum[backend.get_name()]`` lookup resolves through the registered alias."""


def test_attention_layer_builds_on_plugin_backend(engine_config):
    import copy
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from dflash_rocm_plugin.vllm.backend import RocmDFlashBackend
    from dflash_rocm_plugin.vllm.impl import RocmDFlashImpl

    engine_config = copy.deepcopy(engine_config)  # the layer registers itself in the config
    with set_current_vllm_config(engine_config):
        layer = Attention(4, 32, 32 ** -0.5, num_kv_heads=2, cache_config=engine_config.cache_config,
                          prefix="model.layers.0.self_attn.attn", attn_backend=RocmDFlashBackend,
                          sinks=None)
    assert isinstance(layer.impl, RocmDFlashImpl)
    assert layer.backend is AttentionBackendEnum.CUSTOM
    assert layer.impl.scale == 32 ** -0.5 and layer.impl.num_kv_heads == 2
