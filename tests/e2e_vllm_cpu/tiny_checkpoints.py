"""Tiny random-weight checkpoints written in their published formats (nothing is downloaded).

* target: a Hugging Face Qwen3 directory (``save_pretrained``, float32) with a WordLevel tokenizer.
* draft: a DFlash draft directory: ``config.json`` (``architectures: [DFlashDraftModel]``,
  ``block_size``, ``dflash_config.{mask_token_id,target_layer_ids}``) and ``model.safetensors``
  with ``fc``, ``hidden_norm``, ``layers.N...`` and ``norm`` (no embedding / lm_head: vLLM
  shares the target's).
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
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:  # matrices and embeddings; norms stay at 1
                p.normal_(0.0, STD)
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


def draft_weights(seed: int = 1) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)

    def mat(rows, cols):
        return torch.randn(rows, cols, generator=g) * STD

    ones = torch.ones
    q, kv, ffn = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, 2 * HIDDEN
    w = {"fc.weight": mat(HIDDEN, HIDDEN * len(TARGET_LAYER_IDS)),
         "hidden_norm.weight": ones(HIDDEN), "norm.weight": ones(HIDDEN)}
    p = "layers.0."
    w.update({
        p + "self_attn.q_proj.weight": mat(q, HIDDEN), p + "self_attn.k_proj.weight": mat(kv, HIDDEN),
        p + "self_attn.v_proj.weight": mat(kv, HIDDEN), p + "self_attn.o_proj.weight": mat(HIDDEN, q),
        p + "self_attn.q_norm.weight": ones(HEAD_DIM), p + "self_attn.k_norm.weight": ones(HEAD_DIM),
        p + "mlp.gate_proj.weight": mat(ffn, HIDDEN), p + "mlp.up_proj.weight": mat(ffn, HIDDEN),
        p + "mlp.down_proj.weight": mat(HIDDEN, ffn),
        p + "input_layernorm.weight": ones(HIDDEN), p + "post_attention_layernorm.weight": ones(HIDDEN),
    })
    return {k: v.to(torch.float32).contiguous() for k, v in w.items()}


def write_draft(path: Path, causal: bool = False) -> str:
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(draft_config(causal), indent=1))
    save_file(draft_weights(), str(path / "model.safetensors"))
    return str(path)


def write_all(root: Path) -> dict:
    """``{"target", "draft", "draft_causal"}`` directories under ``root`` (same draft weights)."""
    return {"target": write_target(root / "target"), "draft": write_draft(root / "draft"),
            "draft_causal": write_draft(root / "draft_causal", causal=True)}


if __name__ == "__main__":
    import sys
    print(json.dumps(write_all(Path(sys.argv[1]))))
