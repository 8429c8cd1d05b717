"""Cross-check against the independent reference implementation, the MIT `dflash` package
(z-lab's DFlashDraftModel and dflash_generate, on transformers): with the same weights saved in the
published formats, (i) the demo's draft logits for a block equal the reference draft's, given the
same target hidden states, and (ii) whole greedy generations (batch 1) are identical token for token
AND step for step (same acceptance lengths, which only a matching draft can produce)."""

import time

import pytest
import torch

dflash_model = pytest.importorskip("dflash.model", reason="the `dflash` reference package is not installed")

from dflash_rocm_plugin.demo import checkpoint, speculative  # noqa: E402
from dflash_rocm_plugin.demo.paged_cache import PagedKVCache  # noqa: E402


@pytest.fixture(scope="module")
def reference(checkpoints):
    import transformers
    target = transformers.Qwen3ForCausalLM.from_pretrained(checkpoints / "target", dtype=torch.float32).eval()
    draft = dflash_model.DFlashDraftModel.from_pretrained(checkpoints / "draft", dtype=torch.float32).eval()
    return target, draft


@pytest.fixture(scope="module")
def demo(checkpoints):
    target = checkpoint.load_target(checkpoints / "target", dtype=torch.float32, device="cpu")
    draft = checkpoint.load_draft(checkpoints / "draft", target.config, dtype=torch.float32, device="cpu")
    return target, draft


def test_reference_reads_the_published_draft_config(reference, demo):
    ref_draft = reference[1]
    draft = demo[1]
    assert ref_draft.target_layer_ids == draft.config.target_layer_ids
    assert ref_draft.mask_token_id == draft.config.mask_token_id
    assert ref_draft.block_size == draft.config.block_size


@pytest.mark.parametrize("ctx_len", [5, 13])
def test_draft_block_logits_match_reference(reference, demo, ctx_len):
    ref_target, ref_draft = reference
    target, draft = demo
    cfg = draft.config
    block = cfg.block_size
    g = torch.Generator().manual_seed(ctx_len)
    context_ids = torch.randint(0, 127, (ctx_len,), generator=g)
    with torch.no_grad():
        hs = ref_target(context_ids[None], output_hidden_states=True).hidden_states
    target_hidden = dflash_model.extract_context_feature(hs, cfg.target_layer_ids)      # [1, ctx, n*d]
    block_ids = torch.tensor([int(context_ids[-1])] + [cfg.mask_token_id] * (block - 1))
    with torch.no_grad():
        noise = ref_target.get_input_embeddings()(block_ids[None])
        ref_hidden = ref_draft(target_hidden=target_hidden, noise_embedding=noise,
                               position_ids=torch.arange(ctx_len + block)[None])
        ref_logits = ref_draft.compute_logits(ref_hidden, ref_target.lm_head)[0]

        cache = PagedKVCache(cfg.num_hidden_layers, 16, 4, cfg.num_key_value_heads, cfg.head_dim,
                             torch.float32, torch.device("cpu"), seed=5)
        ctx = cache.batch([0], [0], [ctx_len], causal=False)
        draft.context_kv(target_hidden[0], ctx.positions, ctx.store)
        blk = cache.batch([0], [ctx_len], [block], causal=False)
        logits = draft.logits(draft.block_hidden(block_ids, blk.positions, target, blk), target)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("prompt_seed,max_new", [(21, 20), (22, 13)])
def test_whole_generation_matches_reference(reference, demo, monkeypatch, prompt_seed, max_new):
    ref_target, ref_draft = reference
    target, draft = demo
    # the reference times with torch.cuda.synchronize(); there is no GPU here
    monkeypatch.setattr(dflash_model, "_cuda_time", time.perf_counter)
    prompt = torch.randint(0, 127, (9,), generator=torch.Generator().manual_seed(prompt_seed)).tolist()
    ref = dflash_model.dflash_generate(ref_draft, ref_target, torch.tensor([prompt]), max_new, None,
                                       temperature=0.0, return_stats=True)
    ours = speculative.dflash_greedy(target, draft, [prompt], max_new, page_size=4)
    assert ours.tokens[0] == ref.output_ids[0, len(prompt):].tolist()
    assert ours.acceptance[0] == ref.acceptance_lengths
    assert max(ref.acceptance_lengths) > 1, "the distilled draft should get some tokens accepted"
