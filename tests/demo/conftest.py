"""Shared fixtures for the demo suite: the tiny target, its distilled draft, and published-format copies."""

import pytest
import torch

# Tiny shapes: threads only add contention on a shared 2-core runner.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_pair():
    from dflash_rocm_plugin.demo import tiny
    target = tiny.tiny_target(0)
    return target, tiny.tiny_draft(target, mode="distilled", seed=0)


@pytest.fixture(scope="session")
def checkpoints(tiny_pair, tmp_path_factory):
    """The tiny pair saved as published checkpoints: HF Qwen3 via transformers, DFlash via the demo."""
    transformers = pytest.importorskip("transformers")
    from dflash_rocm_plugin.demo import checkpoint
    target, draft = tiny_pair
    root = tmp_path_factory.mktemp("ckpt")
    hf = hf_target(target, transformers)
    hf.save_pretrained(root / "target")
    hf.save_pretrained(root / "target-sharded", max_shard_size="100KB")
    checkpoint.save_draft(draft, root / "draft", target.config.vocab_size)
    return root


@pytest.fixture(scope="session")
def hf_target_of():
    return hf_target


def hf_target(target, transformers=None):
    """transformers' own Qwen3ForCausalLM carrying the demo target's weights."""
    transformers = transformers or pytest.importorskip("transformers")
    config = transformers.Qwen3Config(**target.config.to_hf())
    model = transformers.Qwen3ForCausalLM(config).eval()
    model.load_state_dict(target.state_dict(), strict=True)
    return model
