"""Drive vLLM's ROCm code paths on a CPU box, in a fresh process; write what they chose as JSON.

    python -m tests.vllm.rocm_platform_probe --arch gfx942 --models DIR --out FILE

Only what cannot exist here is faked: ``amdsmi`` (vLLM's ROCm detection and ``_GCN_ARCH`` read the
GPU through it) answers one GPU of ``--arch``, and ``torch.version.hip`` is set.  Everything else is
vLLM's own: its platform resolution picks ``RocmPlatform`` (or an out-of-tree platform plugin found
on ``sys.path`` through its ``vllm.platform_plugins`` entry point), ``EngineArgs`` builds the engine
config with ``--attention-backend rocm_dflash`` and a DFlash draft under ``RocmPlatform``'s config
hooks, the DFlash proposer's config derivation (``DFlashProposer._create_draft_vllm_config`` to 0.33,
``load_dflash_model`` in 0.34) makes the draft's config, and
``vllm.v1.attention.selector.get_attn_backend`` -- what every ``Attention`` layer calls -- selects a
backend for each layer geometry, under the target's config and under the draft's.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import types

# name -> get_attn_backend arguments (the layer as the model describes it)
LAYERS = {
    "qwen3_dense_d128": dict(head_size=128, num_heads=32),             # Qwen3-8B/32B, Qwen3-Coder
    "d64": dict(head_size=64, num_heads=64),                           # gpt-oss-sized heads
    "qwen3_5_full_attention_d256": dict(head_size=256, num_heads=16),  # Qwen3.5/3.6, Qwen3-Next
    "sliding_window_d128": dict(head_size=128, num_heads=32, has_sliding_window=True),
    "sliding_window_d256": dict(head_size=256, num_heads=16, has_sliding_window=True),  # Gemma-4 local
    "gemma4_global_d512": dict(head_size=512, num_heads=16),           # Gemma-4 global layers
    "fp16_d128": dict(head_size=128, num_heads=32, dtype="float16"),
    "gqa8_one_kv_head_per_rank_d128": dict(head_size=128, num_heads=8),
    # layers the backend does not serve (or may, as its support grows: the probe records either)
    "mla": dict(head_size=576, num_heads=16, use_mla=True),
    "head_520": dict(head_size=520, num_heads=16),                     # above the kernels' 512
    "fp8_kv_cache": dict(head_size=128, num_heads=32, kv_cache_dtype="fp8"),
    "sinks_d64": dict(head_size=64, num_heads=64, has_sink=True, has_sliding_window=True),
}


def fake_amdsmi(arch: str) -> types.ModuleType:
    m = types.ModuleType("amdsmi")

    class AmdSmiException(Exception):
        pass

    m.AmdSmiException = AmdSmiException
    m.AmdSmiMemoryType = types.SimpleNamespace(VRAM=0)
    m.amdsmi_init = lambda *a, **k: None
    m.amdsmi_shut_down = lambda *a, **k: None
    m.amdsmi_get_processor_handles = lambda: ["gpu0"]
    m.amdsmi_get_gpu_asic_info = lambda handle: {"target_graphics_version": arch, "market_name": f"stand-in {arch}",
                                                 "device_id": "0x74a1"}
    m.amdsmi_get_gpu_device_uuid = lambda handle: "00000000-stand-in"
    m.amdsmi_get_gpu_memory_total = lambda handle, kind: 192 << 30
    m.amdsmi_topo_get_link_type = lambda a, b: {"hops": 1, "type": 2}
    m.amdsmi_topo_get_numa_node_number = lambda handle: 0
    return m


def draft_vllm_config(config):
    """The draft's config as vLLM derives it before building the DFlash model (no model, no device)."""
    try:
        from vllm.v1.spec_decode.dflash import DFlashProposer  # 0.32-0.33: model runner V1's proposer
    except ImportError:
        DFlashProposer = None
    if DFlashProposer is not None:
        proposer = object.__new__(DFlashProposer)
        proposer.vllm_config, proposer.speculative_config = config, config.speculative_config
        proposer.dflash_causal = False
        return DFlashProposer._create_draft_vllm_config(proposer)
    # 0.34: model runner V2's load_dflash_model derives the config and hands it to get_model; stop there.
    import contextlib
    from vllm.v1.worker.gpu.spec_decode.dflash import utils
    try:
        import vllm.compilation.backends  # noqa: F401
    except (ImportError, AttributeError):
        # It registers passes over vLLM's compiled ops, which this CPU box lacks; load_dflash_model
        # takes only set_model_tag from it (a name for the draft's compiled graph).
        stub = types.ModuleType("vllm.compilation.backends")
        stub.set_model_tag = lambda tag: contextlib.nullcontext()
        sys.modules["vllm.compilation.backends"] = stub

    class Derived(Exception):
        pass

    seen = {}

    def stop(*, vllm_config, model_config):
        seen["config"] = vllm_config
        raise Derived

    # The load config's pipeline-parallel adjustment asks torch.distributed, which no process here set up;
    # it changes nothing the attention selection reads.
    build, pp_safe = utils.get_model, utils.get_pp_safe_draft_load_config
    utils.get_model, utils.get_pp_safe_draft_load_config = stop, lambda load_config: load_config
    try:
        utils.load_dflash_model(None, config)
    except Derived:
        pass
    finally:
        utils.get_model, utils.get_pp_safe_draft_load_config = build, pp_safe
    return seen["config"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", required=True)
    p.add_argument("--models", required=True, help="directory with target/ and draft/ (tests/vllm/tiny_models.py)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)

    import torch
    torch.version.hip = "7.1.0-stand-in"
    sys.modules["amdsmi"] = fake_amdsmi(a.arch)

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            if record.name.startswith("dflash_rocm_plugin"):
                records.append(record.getMessage())

    logging.getLogger("dflash_rocm_plugin").addHandler(Keep())

    from vllm.platforms import current_platform
    rec: dict = {"platform": f"{type(current_platform).__module__}.{type(current_platform).__qualname__}",
                 "capability": list(current_platform.get_device_capability()),
                 "is_rocm": current_platform.is_rocm()}

    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.attention import selector

    config = EngineArgs(
        model=f"{a.models}/target", skip_tokenizer_init=True, dtype="bfloat16", max_model_len=256,
        max_num_seqs=8, max_num_batched_tokens=256, enforce_eager=True, block_size=16,
        attention_backend="rocm_dflash",
        speculative_config={"method": "dflash", "model": f"{a.models}/draft", "num_speculative_tokens": 15},
    ).create_engine_config()
    rec["target_backend"] = config.attention_config.backend.get_path()
    rec["draft_backend"] = config.speculative_config.attention_backend.get_path()

    draft_config = draft_vllm_config(config)
    rec["draft_use_non_causal"] = draft_config.attention_config.use_non_causal

    def choose(vllm_config, layer):
        kwargs = dict(layer)
        kwargs["dtype"] = getattr(torch, kwargs.pop("dtype", "bfloat16"))
        kwargs.setdefault("kv_cache_dtype", "auto")
        try:
            with set_current_vllm_config(vllm_config):
                cls = selector.get_attn_backend(**kwargs)
            return {"backend": f"{cls.__module__}.{cls.__qualname__}"}
        except Exception as exc:  # the host's own refusal
            return {"error": f"{type(exc).__name__}: {exc}"}

    rec["target"] = {name: choose(config, layer) for name, layer in LAYERS.items()}
    rec["draft"] = {name: choose(draft_config, layer) for name, layer in LAYERS.items()}
    rec["plugin_log"] = records
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
