"""Checkpoints in their published formats.

Target: a Hugging Face Qwen3 directory (``config.json`` + ``model.safetensors`` or a sharded
``model.safetensors.index.json``).  Draft: a DFlash directory (``config.json`` with ``block_size`` and
``dflash_config.{mask_token_id,target_layer_ids}``; weights ``fc``, ``hidden_norm``, ``layers.N...``,
``norm`` -- no embedding or lm_head of its own).  ``safetensors`` is imported only here.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from dflash_rocm_plugin.demo.config import ConfigError, DraftConfig, TargetConfig
from dflash_rocm_plugin.demo.draft import DFlashDraft
from dflash_rocm_plugin.demo.model import Qwen3Target

# Buffers some writers add that carry no weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def _safetensors():
    try:
        import safetensors.torch
    except ImportError:
        raise ConfigError("loading checkpoints needs the 'safetensors' package: pip install safetensors") from None
    return safetensors.torch


def read_config(path: Path) -> dict:
    file = Path(path) / "config.json"
    if not file.is_file():
        raise ConfigError(f"{path}: no config.json (expected a Hugging Face model directory)")
    return json.loads(file.read_text())


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    st = _safetensors()
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    else:
        raise ConfigError(f"{path}: no model.safetensors or model.safetensors.index.json")
    weights: dict[str, torch.Tensor] = {}
    for shard in shards:
        weights.update(st.load_file(str(path / shard)))
    return {k: v for k, v in weights.items() if not k.endswith(_IGNORED_SUFFIXES)}


def _load_into(module: torch.nn.Module, weights: dict[str, torch.Tensor], what: str) -> None:
    expected = set(module.state_dict())
    missing, unexpected = expected - set(weights), set(weights) - expected
    if missing or unexpected:
        raise ConfigError(f"{what} weights do not match the config: missing {sorted(missing)[:6]}, "
                          f"unexpected {sorted(unexpected)[:6]}")
    module.load_state_dict(weights)


def load_target(path, *, dtype: torch.dtype, device) -> Qwen3Target:
    cfg = TargetConfig.from_hf(read_config(path))
    weights = read_weights(path)
    if cfg.tie_word_embeddings:
        weights.pop("lm_head.weight", None)
    # built on the meta device in the final dtype, then filled: no float32 copy of a large model
    with torch.device("meta"):
        target = Qwen3Target(cfg).to(dtype)
    target = target.to_empty(device=device)
    _load_into(target, weights, f"target {path}")
    return target.eval()


def load_draft(path, target_config: TargetConfig, *, dtype: torch.dtype, device) -> DFlashDraft:
    cfg = DraftConfig.from_hf(read_config(path))
    cfg.check_against(target_config)
    # Some writers keep the wrapper prefix; the published DFlash layout has none.
    weights = {k.removeprefix("model."): v for k, v in read_weights(path).items()}
    with torch.device("meta"):
        draft = DFlashDraft(cfg).to(dtype)
    draft = draft.to_empty(device=device)
    _load_into(draft, weights, f"draft {path}")
    return draft.eval()


def save_draft(draft: DFlashDraft, path, vocab_size: int) -> None:
    """Write ``draft`` as a published-format DFlash directory."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(draft.config.to_hf(vocab_size), indent=2))
    _safetensors().save_file({k: v.contiguous() for k, v in draft.state_dict().items()},
                             str(path / "model.safetensors"))


def save_target(target: Qwen3Target, path) -> None:
    """Write ``target`` as a Hugging Face Qwen3 directory (single file)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(target.config.to_hf(), indent=2))
    _safetensors().save_file({k: v.contiguous() for k, v in target.state_dict().items()},
                             str(path / "model.safetensors"))
