"""Checkpoints in their published formats: a transformers-saved Qwen3 (single file and sharded index)
and a DFlash draft directory load into the demo and decode identically to the in-memory models;
the CLI runs them; bad draft configs (DFlash-2, layer ids out of range, missing mask token,
causal layers, a different hidden size) are rejected with the reason; a missing `safetensors` says so."""

import json
import shutil
import sys

import pytest
import torch

from dflash_rocm_plugin.demo import checkpoint, cli, speculative
from dflash_rocm_plugin.demo.config import ConfigError, DraftConfig

PROMPTS = [[3, 9, 27, 81, 115], [7, 14, 21]]


@pytest.mark.parametrize("target_dir", ["target", "target-sharded"])
def test_round_trip_weights(checkpoints, tiny_pair, target_dir):
    target, draft = tiny_pair
    if target_dir == "target-sharded":
        assert (checkpoints / target_dir / "model.safetensors.index.json").is_file()
    loaded = checkpoint.load_target(checkpoints / target_dir, dtype=torch.float32, device="cpu")
    for k, v in target.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[k], v, rtol=0, atol=0)
    d = checkpoint.load_draft(checkpoints / "draft", loaded.config, dtype=torch.float32, device="cpu")
    assert d.config.target_layer_ids == draft.config.target_layer_ids
    for k, v in draft.state_dict().items():
        torch.testing.assert_close(d.state_dict()[k], v, rtol=0, atol=0)
    names = set(d.state_dict())
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert {"fc.weight", "hidden_norm.weight", "norm.weight"} <= names


def test_loaded_models_decode_like_in_memory(checkpoints, tiny_pair):
    target, draft = tiny_pair
    lt = checkpoint.load_target(checkpoints / "target", dtype=torch.float32, device="cpu")
    ld = checkpoint.load_draft(checkpoints / "draft", lt.config, dtype=torch.float32, device="cpu")
    a = speculative.dflash_greedy(target, draft, PROMPTS, 8, page_size=4)
    b = speculative.dflash_greedy(lt, ld, PROMPTS, 8, page_size=4)
    assert a.tokens == b.tokens and a.acceptance == b.acceptance


def test_cli_on_checkpoints(checkpoints, capsys):
    rc = cli.main(["--target", str(checkpoints / "target-sharded"), "--draft", str(checkpoints / "draft"),
                   "--prompt-ids", "3,9,27,81", "--prompt-ids", "5,6", "--max-new-tokens", "8", "--batch", "2",
                   "--page-size", "4", "--json", "--no-progress"])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["lossless"] is True and r["batch"] == 2 and r["block_size"] == 8


def _draft_raw(checkpoints):
    return json.loads((checkpoints / "draft" / "config.json").read_text())


@pytest.mark.parametrize("mutate,message", [
    (lambda c: c.update(conv_kernel_size=4), "DFlash-2"),
    (lambda c: c["dflash_config"].update(selector_top_k=8), "DFlash-2"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[1, 4]), "out of range"),
    (lambda c: c["dflash_config"].update(target_layer_ids=[-1, 2]), "out of range"),
    (lambda c: c["dflash_config"].pop("mask_token_id"), "mask_token_id"),
    (lambda c: c.update(layer_types=["sliding_attention", "full_attention"]), "mixed draft layer types"),
    (lambda c: c.update(layer_types=["sliding_attention"] * 2, sliding_window=8), "causal draft layers"),
    (lambda c: c.update(layer_types=["sliding_attention"] * 2, sliding_window=4, is_causal=False), "shorter than its block"),
    (lambda c: c.update(hidden_size=96), "hidden_size"),
])
def test_bad_draft_configs_are_rejected(checkpoints, tiny_pair, tmp_path, mutate, message):
    raw = _draft_raw(checkpoints)
    mutate(raw)
    bad = tmp_path / "draft"
    shutil.copytree(checkpoints / "draft", bad)
    (bad / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=message):
        checkpoint.load_draft(bad, tiny_pair[0].config, dtype=torch.float32, device="cpu")


def test_default_layer_ids_follow_dflash(checkpoints):
    raw = _draft_raw(checkpoints)
    raw["dflash_config"].pop("target_layer_ids")
    raw["num_target_layers"] = 36
    raw["num_hidden_layers"] = 5
    assert DraftConfig.from_hf(raw).target_layer_ids == [1, 9, 17, 25, 33]  # Qwen3-8B's


def test_missing_safetensors_is_explained(checkpoints, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(ConfigError, match="pip install safetensors"):
        checkpoint.read_weights(checkpoints / "draft")
