"""The demo's DFlash2-style draft (``--draft-window N``): every draft layer attends over a sliding
window of the last N keys, still non-causal within its block (block 8), distilled with that window;
its cache evicts and NaN-poisons the pages no later window reaches.

Lossless against the target-only run, tau > 1, the --json report names the style and window; the
windowed draft's paged forward equals a dense windowed attention and differs from the unwindowed
one; no draft attention output is ever NaN although evicted (NaN) pages stay in the block tables;
flags that cannot run are refused with exit status 2; the window survives a checkpoint round trip.
"""

import json

import pytest
import torch

from dflash_rocm_plugin.demo import checkpoint, cli, paged_cache, speculative, tiny

WINDOW = 8
FAST = ["--batch", "2", "--max-new-tokens", "24", "--no-progress"]


@pytest.fixture(scope="module")
def window_pair():
    target = tiny.tiny_target(0)
    return target, tiny.tiny_draft(target, seed=0, sliding_window=WINDOW)


def test_cli_window_draft_is_lossless_and_says_so(capsys):
    assert cli.main(["--json", *FAST, "--draft-window", str(WINDOW)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["lossless"] is True and r["tau"] > 1.0
    assert r["draft"] == {"style": "sliding-window", "window": WINDOW, "causal": False}
    assert r["block_size"] == 8
    assert "sliding window 8" in r["models"]["draft"]


def test_default_report_names_the_full_attention_draft(capsys):
    assert cli.main(["--json", "--batch", "1", "--max-new-tokens", "4", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["draft"] == {"style": "dflash", "window": None, "causal": False}


def test_windowed_paged_forward_equals_dense_windowed_attention(window_pair):
    target, draft = window_pair
    cfg = draft.config
    ctx_len, block = 30, cfg.block_size
    cache = paged_cache.PagedKVCache(cfg.num_hidden_layers, 32, 4, cfg.num_key_value_heads, cfg.head_dim,
                                     torch.float32, torch.device("cpu"), seed=1)
    gen = torch.Generator().manual_seed(2)
    captured = torch.randn(ctx_len, len(cfg.target_layer_ids) * cfg.hidden_size, generator=gen)
    ctx = cache.batch([0], [0], [ctx_len], causal=False)
    draft.context_kv(captured, ctx.positions, ctx.store)
    ids = torch.tensor([5] + [cfg.mask_token_id] * (block - 1))
    positions = torch.arange(ctx_len, ctx_len + block)

    def paged(window):
        return draft.block_hidden(ids, positions, target,
                                  cache.batch([0], [ctx_len], [block], causal=False, sliding_window=window))

    sees = torch.ones(block, ctx_len + block, dtype=torch.bool)
    keys = torch.arange(ctx_len + block)
    windowed = sees & (positions[:, None] - keys[None, :] < WINDOW)
    dense_attend = tiny.DenseAttention(windowed)
    draft.context_kv(captured, torch.arange(ctx_len), dense_attend.store)
    dense = draft.block_hidden(ids, positions, target, dense_attend)
    torch.testing.assert_close(paged(WINDOW), dense, atol=2e-5, rtol=2e-5)
    assert (paged(None) - dense).abs().max() > 1e-3, "the window must matter in this case"


def test_evicted_pages_are_never_read(window_pair, monkeypatch):
    """Every windowed draft attention is finite, while block tables still list evicted NaN pages."""
    target, draft = window_pair
    calls = {"windowed": 0, "with_evicted_pages": 0}
    real = paged_cache.PagedBatch.__call__

    def checked(self, layer, q, k, v):
        out = real(self, layer, q, k, v)
        if self.sliding_window is not None:
            calls["windowed"] += 1
            assert torch.isfinite(out).all(), "an evicted (NaN) page was read"
            evicted = [p for s, n in self.cache.evicted.items() for p in self.cache.pages[s][:n]]
            if evicted and any(int(p) in evicted for p in self.block_table.flatten()):
                calls["with_evicted_pages"] += 1
        return out

    monkeypatch.setattr(paged_cache.PagedBatch, "__call__", checked)
    prompts = tiny.random_prompts(2, target.config.vocab_size, seed=3, exclude=draft.config.mask_token_id)
    spec = speculative.dflash_greedy(target, draft, prompts, 28, page_size=2, seed=1)
    base = speculative.target_greedy(target, prompts, 28, page_size=2, seed=1)
    assert spec.tokens == base.tokens
    assert spec.tau > 1.0
    assert calls["windowed"] and calls["with_evicted_pages"], calls


@pytest.mark.parametrize("argv, message", [
    (["--draft-window", "4"], "--draft-window must be >= 8"),
    (["--draft-window", "8", "--block-size", "9"], "--draft-window must be >= 9"),
    (["--draft-window", "8", "--target", "t", "--draft", "d"], "--draft-window only applies to the tiny models"),
])
def test_window_flags_that_cannot_run_exit_2(capsys, argv, message):
    assert cli.main(["--json", *argv]) == 2
    assert message in capsys.readouterr().err


def test_window_survives_a_checkpoint_round_trip(window_pair, tmp_path):
    pytest.importorskip("safetensors")
    target, draft = window_pair
    checkpoint.save_draft(draft, tmp_path / "draft", target.config.vocab_size)
    raw = json.loads((tmp_path / "draft" / "config.json").read_text())
    assert raw["layer_types"] == ["sliding_attention"] * draft.config.num_hidden_layers
    assert raw["sliding_window"] == WINDOW and raw["is_causal"] is False
    loaded = checkpoint.load_draft(tmp_path / "draft", target.config, dtype=torch.float32, device="cpu")
    assert loaded.config.sliding_window == WINDOW and loaded.config.style == "sliding-window"
