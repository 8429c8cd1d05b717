"""The demo's Qwen3 target, run through the plugin's paged ops, is transformers' Qwen3ForCausalLM:
same logits on the same weights (prefill of a ragged batch over shuffled pages, then a cached
decode step), and DFlash layer capture follows the convention id i = output of decoder layer i
= HF hidden_states[i + 1] (for every id, the last layer included)."""

import pytest
import torch

from dflash_rocm_plugin.demo.paged_cache import PagedKVCache

PROMPTS = [[5, 17, 99, 3, 41, 8, 60], [77, 2, 19, 120, 33]]


def _paged_prefill(target, capture):
    cfg = target.config
    cache = PagedKVCache(cfg.num_hidden_layers, 16, 4, cfg.num_key_value_heads, cfg.head_dim,
                         torch.float32, torch.device("cpu"), seed=3)
    batch = cache.batch([0, 1], [0, 0], [len(p) for p in PROMPTS], causal=True)
    ids = torch.tensor(sum(PROMPTS, []))
    logits, captured = target(ids, batch.positions, batch, capture)
    return cache, logits, captured


def test_prefill_and_decode_logits_match_transformers(tiny_pair, hf_target_of):
    target, _ = tiny_pair
    hf = hf_target_of(target)
    cache, logits, _ = _paged_prefill(target, [])
    n0 = len(PROMPTS[0])
    with torch.no_grad():
        for i, (p, rows) in enumerate(zip(PROMPTS, (slice(0, n0), slice(n0, None)))):
            ref = hf(torch.tensor([p])).logits[0]
            torch.testing.assert_close(logits[rows], ref, rtol=1e-4, atol=1e-4)
        # one more token per sequence, attending to the cached prefix
        nxt = [11, 12]
        step = cache.batch([0, 1], [len(p) for p in PROMPTS], [1, 1], causal=True)
        logits, _ = target(torch.tensor(nxt), step.positions, step)
        for i, p in enumerate(PROMPTS):
            ref = hf(torch.tensor([p + [nxt[i]]])).logits[0, -1]
            torch.testing.assert_close(logits[i], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ids", [[1, 2], [0], [3], [2, 0, 3]])
def test_layer_capture_is_output_of_decoder_layer(tiny_pair, hf_target_of, ids):
    target, _ = tiny_pair
    hf = hf_target_of(target)
    _, _, captured = _paged_prefill(target, ids)
    n0 = len(PROMPTS[0])
    with torch.no_grad():
        hs = hf(torch.tensor([PROMPTS[0]]), output_hidden_states=True).hidden_states
    expected = torch.cat([hs[i + 1][0] for i in ids], dim=-1)
    torch.testing.assert_close(captured[:n0], expected, rtol=1e-4, atol=1e-4)
    # and NOT the layer's input (the off-by-one several engines shipped)
    wrong = torch.cat([hs[i][0] for i in ids], dim=-1)
    assert (captured[:n0] - wrong).abs().max() > 1e-2
