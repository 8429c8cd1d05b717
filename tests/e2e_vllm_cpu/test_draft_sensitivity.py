"""The suite can fail: a wrong draft attention changes the draft tokens, not the output.

The same DFlash draft with ``dflash_config.causal = true`` (its block attends causally instead
of bidirectionally) is a different draft.  On vLLM's CPU_ATTN it still gives exactly the plain
greedy output (the rejection step makes any draft lossless, and random weights accept almost
nothing), but many of its proposed rows differ from the non-causal draft's, and from the
plugin's.  So ``test_draft_tokens_equal_cpu_attn_draft_tokens`` would catch a plugin that
ignored the non-causal flag, where output equality could not.
"""


def _rows(run):
    return [tuple(row) for call in run["drafts"] for row in call]


def _fraction_differing(a, b):
    assert len(a) == len(b) > 0
    return sum(x != y for x, y in zip(a, b)) / len(a)


def test_causal_draft_keeps_output_but_changes_draft_tokens(engine_runs):
    causal = engine_runs.get("cpu_attn_dflash_causal_draft")
    assert causal["outputs"] == engine_runs.get("cpu_attn_plain")["outputs"]
    assert causal["impl_calls"]["vllm.v1.attention.backends.cpu_attn.CPUAttentionBackendImpl"]["non_causal"] == 0
    assert _fraction_differing(_rows(causal), _rows(engine_runs.get("cpu_attn_dflash"))) >= 0.25


def test_plugin_draft_tokens_differ_from_causal_draft(engine_runs):
    ours = _rows(engine_runs.get("plugin_dflash"))
    assert _fraction_differing(ours, _rows(engine_runs.get("cpu_attn_dflash_causal_draft"))) >= 0.25
