"""Target and draft configuration: the published ``config.json`` fields the demo needs, validated."""

from __future__ import annotations

import dataclasses
from typing import Any

# DFlash-2 drafts add causal convolutions and a candidate selector: a different architecture.
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")


class ConfigError(ValueError):
    """A checkpoint configuration the demo cannot run, with the reason."""


@dataclasses.dataclass
class TargetConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = False
    attention_bias: bool = False

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> "TargetConfig":
        model_type = raw.get("model_type")
        if model_type != "qwen3":
            raise ConfigError(f"target config.json: model_type {model_type!r} is not supported (supported: 'qwen3')")
        return cls(**_qwen3_fields(raw, "target config.json"),
                   tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)))

    def to_hf(self) -> dict[str, Any]:
        return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **_qwen3_json(self),
                "vocab_size": self.vocab_size,
                "tie_word_embeddings": self.tie_word_embeddings}


@dataclasses.dataclass
class DraftConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    target_layer_ids: list[int]
    mask_token_id: int
    block_size: int = 16
    num_target_layers: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    attention_bias: bool = False
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    # A DFlash2-style draft: every layer attends over a sliding window of this many keys
    # (key j visible from position p iff p - j < window), still non-causal within the block.
    sliding_window: int | None = None

    @property
    def style(self) -> str:
        return "dflash" if self.sliding_window is None else "sliding-window"

    @classmethod
    def from_hf(cls, raw: dict[str, Any]) -> "DraftConfig":
        where = "draft config.json"
        dflash = raw.get("dflash_config") or {}
        for key in DFLASH2_KEYS:
            if key in raw or key in dflash:
                raise ConfigError(
                    f"{where}: has '{key}', a DFlash-2 draft (causal convolutions + candidate selector); "
                    "only DFlash (v1) drafts are supported")
        if raw.get("model_type", "qwen3") != "qwen3":
            raise ConfigError(f"{where}: model_type {raw.get('model_type')!r} is not supported (supported: 'qwen3')")
        layer_types = raw.get("layer_types") or []
        window = None
        if layer_types and all(t == "sliding_attention" for t in layer_types):
            window = dflash.get("swa_window_size", raw.get("sliding_window"))
            if window is None:
                raise ConfigError(f"{where}: sliding_attention layers need sliding_window")
            window = int(window)
        elif any(t != "full_attention" for t in layer_types):
            raise ConfigError(f"{where}: mixed draft layer types {sorted(set(layer_types))} are not supported by "
                              "the demo (supported: all full_attention, or all sliding_attention)")
        # HF-format sliding layers default to causal (vLLM's _dflash_layer_causal); the demo's
        # drafts are non-causal blocks, so a sliding draft must say so.
        causal = raw.get("is_causal", dflash.get("causal", window is not None))
        if causal:
            raise ConfigError(f"{where}: causal draft layers are not supported by the demo (supported: "
                              "non-causal blocks; a sliding-window draft needs is_causal: false)")
        fields = _qwen3_fields(raw, where)
        fields.pop("vocab_size")
        mask = dflash.get("mask_token_id", raw.get("mask_token_id"))
        if mask is None:
            raise ConfigError(f"{where}: dflash_config.mask_token_id is missing")
        num_target = raw.get("num_target_layers")
        ids = dflash.get("target_layer_ids", raw.get("target_layer_ids"))
        if ids is None:
            if num_target is None:
                raise ConfigError(f"{where}: needs dflash_config.target_layer_ids or num_target_layers")
            ids = build_target_layer_ids(int(num_target), fields["num_hidden_layers"])
        softcap = dflash.get("final_logit_softcapping", raw.get("final_logit_softcapping"))
        return cls(**fields, target_layer_ids=[int(i) for i in ids], mask_token_id=int(mask),
                   block_size=int(dflash.get("block_size", raw.get("block_size", 16))),
                   num_target_layers=None if num_target is None else int(num_target),
                   input_embedding_scale=float(dflash.get("input_embedding_scale",
                                                          raw.get("input_embedding_scale", 1.0))),
                   output_multiplier=float(dflash.get("output_multiplier", raw.get("output_multiplier", 1.0))),
                   final_logit_softcapping=None if softcap is None else float(softcap),
                   sliding_window=window)

    def to_hf(self, vocab_size: int) -> dict[str, Any]:
        # The published layout: a Qwen3 config plus the DFlash fields (the reference loader reads
        # block_size and num_target_layers at top level, the rest from dflash_config).
        out = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", **_qwen3_json(self),
               "vocab_size": vocab_size, "tie_word_embeddings": False, "block_size": self.block_size,
               "num_target_layers": self.num_target_layers,
               "dflash_config": {"mask_token_id": self.mask_token_id,
                                 "target_layer_ids": list(self.target_layer_ids)}}
        if self.sliding_window is not None:
            out.update(layer_types=["sliding_attention"] * self.num_hidden_layers,
                       sliding_window=self.sliding_window, use_sliding_window=True, is_causal=False)
        return out

    def check_against(self, target: TargetConfig) -> None:
        """Reject a draft that cannot sit on this target, naming the mismatch."""
        n = target.num_hidden_layers
        bad = [i for i in self.target_layer_ids if not 0 <= i < n]
        if bad:
            raise ConfigError(f"draft dflash_config.target_layer_ids {self.target_layer_ids}: {bad} out of range "
                              f"for a {n}-layer target (valid: 0..{n - 1}; id i = output of decoder layer i)")
        if self.hidden_size != target.hidden_size:
            raise ConfigError(f"draft hidden_size {self.hidden_size} != target hidden_size {target.hidden_size}")
        if not 0 <= self.mask_token_id < target.vocab_size:
            raise ConfigError(f"draft mask_token_id {self.mask_token_id} is outside the target vocabulary "
                              f"(0..{target.vocab_size - 1})")
        if self.block_size < 2:
            raise ConfigError(f"draft block_size must be >= 2, got {self.block_size}")
        if self.sliding_window is not None and self.sliding_window < self.block_size:
            raise ConfigError(f"draft sliding_window {self.sliding_window} is shorter than its block "
                              f"({self.block_size}); the block must see itself whole")


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """DFlash's default capture layers: evenly spaced from layer 1 to layer N-3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    span = num_target_layers - 4
    return [round(1 + i * span / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def _qwen3_fields(raw: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ConfigError(f"{where}: rope type {rope_type!r} is not supported (supported: 'default')")
        return dict(
            vocab_size=int(raw.get("vocab_size", 0)),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads", heads)),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
            attention_bias=bool(raw.get("attention_bias", False)),
        )
    except KeyError as missing:
        raise ConfigError(f"{where}: required field {missing} is missing") from None


def _qwen3_json(cfg) -> dict[str, Any]:
    return {
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps, "attention_bias": cfg.attention_bias,
        "hidden_act": "silu", "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "rope_theta": cfg.rope_theta, "torch_dtype": "float32",
    }
