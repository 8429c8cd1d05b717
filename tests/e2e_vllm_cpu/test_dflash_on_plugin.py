"""DFlash speculative decoding in vLLM's real engine is right when attention runs on the plugin.

Three facts, each against an independent run of the same engine:

* speculation really ran: the engine's spec-decode counters show drafts and draft tokens
  (num_speculative_tokens per draft), and ``DFlashProposer.propose`` was called;
* lossless: greedy speculative output on the plugin equals greedy plain decoding on vLLM's
  CPU_ATTN, token for token (and plain decoding on the plugin, over a BHLNC KV cache, equals
  it too);
* the draft itself is right: the token ids ``DFlashProposer.propose`` returned, call by call and
  row by row, equal those proposed when vLLM's own CPU_ATTN runs the same draft.  Random weights
  accept almost nothing, so output equality alone says nothing about the draft's non-causal
  attention; this comparison does (test_draft_sensitivity.py shows it catches a causal draft).
"""

from tests.e2e_vllm_cpu.tiny_checkpoints import DRAFT_BLOCK

K = DRAFT_BLOCK - 1  # num_speculative_tokens


def test_speculation_ran(engine_runs):
    run = engine_runs.get("plugin_dflash")
    m = run["metrics"]
    assert m["vllm:spec_decode_num_drafts"] > 0
    assert m["vllm:spec_decode_num_draft_tokens"] == K * m["vllm:spec_decode_num_drafts"]
    assert len(run["drafts"]) > 0
    assert all(len(row) == K for call in run["drafts"] for row in call)


def test_speculative_output_equals_plain_output(engine_runs):
    reference = engine_runs.get("cpu_attn_plain")["outputs"]
    assert all(len(o) > 0 for o in reference)
    assert engine_runs.get("plugin_dflash")["outputs"] == reference
    assert engine_runs.get("plugin_plain")["outputs"] == reference
    assert engine_runs.get("cpu_attn_dflash")["outputs"] == reference


def test_draft_tokens_equal_cpu_attn_draft_tokens(engine_runs):
    ours, theirs = engine_runs.get("plugin_dflash")["drafts"], engine_runs.get("cpu_attn_dflash")["drafts"]
    assert len(ours) == len(theirs) > 0
    differing = [(step, row, a, b)
                 for step, (call_a, call_b) in enumerate(zip(ours, theirs))
                 for row, (a, b) in enumerate(zip(call_a, call_b)) if a != b]
    assert not differing, f"draft rows (step, row, plugin, CPU_ATTN) that differ: {differing}"
    assert ours == theirs  # same shapes too
    assert (engine_runs.get("plugin_dflash")["metrics"]
            == engine_runs.get("cpu_attn_dflash")["metrics"])
