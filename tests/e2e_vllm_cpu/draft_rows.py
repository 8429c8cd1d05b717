"""Comparing the draft tokens of two engine runs (the plugin's and vLLM's CPU_ATTN's).

In float32 the two runs propose the same rows, token for token.  In bf16 the two attention
kernels round differently (CPU_ATTN's bf16 dots, the interpreter's fp32 ones), so where two of
the draft's logits are (nearly) tied either run may take either token.  A DFlash draft predicts
every position of its block in one non-causal forward, so each token stands on its own: where
the runs disagree, the plugin's token leads the plugin's runner-up by ``m1`` and CPU_ATTN's token
leads CPU_ATTN's by ``m2``, and the two runs' logits for that position must then differ by at
least ``m1 + m2`` in the gap between those two tokens.  A disagreement is a tie when that sum is
small; anything else is a real difference in what the drafts computed.

Rows are compared only where both runs drafted from the same context: the request's greedy
outputs so far are equal.  With nothing accepted (random drafts), draft step ``s`` of a request
follows its first ``s + 1`` output tokens.
"""

from __future__ import annotations

# At most this much movement of one logit gap between the runs counts as a tie: 8 bf16 steps at
# the logits' magnitude (4..8), under half the drafts' median lead (0.42..0.47 in these runs).
BF16_TIE = 0.25


def _same_context_steps(ours: dict, theirs: dict) -> list[int]:
    """Per request, how many draft steps ran on the same context in both runs."""
    steps = []
    for a, b in zip(ours["outputs"], theirs["outputs"]):
        if a == b:
            steps.append(len(ours["drafts"]))
            continue
        assert ours["metrics"]["vllm:spec_decode_num_accepted_tokens"] == 0, \
            "outputs differ and drafts were accepted: cannot say which draft steps share a context"
        first = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        steps.append(first)  # step s drafts after output tokens [0, s]: equal while s + 1 <= first
    return steps


def compare(ours: dict, theirs: dict, tie: float) -> dict:
    """``compared`` tokens (same context), how many are ``equal``, the disagreements that are
    ties (``ties``) and the ones that are not (``far``: (step, row, position, ours, theirs, m1 + m2))."""
    assert len(ours["drafts"]) == len(theirs["drafts"]) > 0
    assert len(ours["draft_margins"]) == len(ours["drafts"]) == len(theirs["draft_margins"])
    steps = _same_context_steps(ours, theirs)
    out = {"compared": 0, "equal": 0, "ties": [], "far": []}
    for s, (rows_a, rows_b, marg_a, marg_b) in enumerate(zip(ours["drafts"], theirs["drafts"],
                                                            ours["draft_margins"], theirs["draft_margins"])):
        k = len(rows_a[0])
        for r, (row_a, row_b) in enumerate(zip(rows_a, rows_b)):
            if s >= steps[r]:
                continue
            for j, (x, y) in enumerate(zip(row_a, row_b)):
                out["compared"] += 1
                if x == y:
                    out["equal"] += 1
                    continue
                moved = marg_a[r * k + j] + marg_b[r * k + j]
                out["ties" if moved <= tie else "far"].append((s, r, j, x, y, round(moved, 4)))
    return out
