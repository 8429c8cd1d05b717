"""Tiny config-only model directories (no weights): a Qwen3 target and a DFlash draft.

Enough for vLLM to build an engine config; nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

TARGET = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 1024,
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
    "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}

DRAFT = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "vocab_size": 1024,
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
    "block_size": 16, "num_target_layers": 4,
    "dflash_config": {"mask_token_id": 1023, "target_layer_ids": [1, 2]},
    "torch_dtype": "float32",
}


def write(root: Path) -> tuple[str, str]:
    """Write ``target/`` and ``draft/`` config directories under ``root``; return their paths."""
    paths = []
    for name, config in (("target", TARGET), ("draft", DRAFT)):
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(config))
        paths.append(str(d))
    return paths[0], paths[1]
