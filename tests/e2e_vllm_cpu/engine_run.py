"""One offline vLLM engine run on the CPU platform, recorded as JSON (run in a fresh process).

    python -m tests.e2e_vllm_cpu.engine_run --target DIR [--draft DIR] --max-tokens N --out FILE
        [--requests FILE] [--engine JSON] [--speculative JSON] [--poison new|new_and_freed]

The attention backend is chosen by the environment the caller passes: with
``DFLASH_ROCM_TEST_CPU_ENGINE=1`` the test plugin (cpu_engine_plugin/) puts rocm_dflash into the CPU_ATTN
slot; without it vLLM's own CPU_ATTN runs.  Everything runs in this process (V1 model runner,
no engine-core subprocess) so the probes below see every call:

* ``drafts``: the token ids ``DFlashProposer.propose`` returned, call by call;
  ``draft_margins``: for each of those tokens, its logit's lead over the runner-up;
* ``impl_calls``: attention-impl ``forward`` calls per impl class, split causal / non-causal,
  with the layer names that made them; ``kv_updates``: ``do_kv_cache_update`` calls per layer;
* ``ops_calls``: ``dflash_rocm_plugin.ops.paged_attention`` calls by ``causal`` flag;
  ``ops_sinks``: those that passed ``sinks`` (and with a sliding window), and each distinct
  sinks vector they passed; ``ops_dense``: launches of the dense-K/V prefill kernel (whole prompts
  read from the step's own K/V), and those with sinks and with a sliding window; the chunks over a
  prefix it served (from a copy of the prefix), those under a window, and the chunks left paged;
* ``metrics``: the engine's spec-decode counters; ``outputs``: greedy token ids per prompt;
  ``counters``: every scalar engine metric (preemptions, prefix-cache queries and hits, ...);
  ``cached_tokens``: prompt tokens each request found in the prefix cache;
* ``schedule``: engine steps, steps where a prefill (chunk) and speculative-decode requests
  shared the batch, prefill chunks that left part of their prompt for a later step.

``--requests`` gives waves of requests (``[[{"prompt": [...], "max_tokens": n}, ...], ...]``), each
wave one ``generate`` call on the same engine, so a later wave can hit the prefix cache an earlier
one filled; outputs are listed wave after wave.  ``--engine`` adds ``LLM`` arguments (KV pool size,
prefix caching, chunked prefill, ...); ``--speculative`` adds speculative-config fields.
``--poison new`` fills every KV block the scheduler hands out with NaN before the step that uses it
runs, and the pool's null block once (a kernel that reads a slot its request has not written, or a
block a sliding window let go, turns the output into NaN);
``new_and_freed`` also poisons every block a request gives back (only meaningful with prefix
caching off, where a freed block is dead until handed out again): a read of a freed block, e.g.
by a preempted request, does the same.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import time

# Lengths 5, 11, 70, 7: with 32-token KV blocks the long prompt spans three blocks.
PROMPTS = [[11, 57, 103, 7, 250], [3, 99, 100, 101, 17, 44, 301, 88, 5, 12, 400],
           [42] * 3 + list(range(200, 267)), [9, 8, 7, 6, 5, 4, 3]]


def _wrap(owner, name, record):
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        record(args, kwargs, result)
        return result

    setattr(owner, name, wrapper)


def _causal_flag(meta) -> str:
    causal = getattr(meta, "causal", None)
    if causal is None:
        return "unknown"
    if not isinstance(causal, bool):  # a per-request tensor
        return "mixed"
    return "causal" if causal else "non_causal"


def _count_window_call(calls: dict, impl, meta, kv_cache) -> None:
    """A sliding-window layer's forward, and whether one of its sequences has a whole KV block
    before its window (what vLLM's sliding-window manager frees)."""
    calls["windowed"] = calls.get("windowed", 0) + 1
    seq_lens = getattr(meta, "seq_lens", None)
    if seq_lens is None:
        return
    block = kv_cache.shape[2]  # logical [blocks, heads, block_size, K|V]
    if any(n - impl.sliding_window >= block for n in seq_lens.tolist()):
        calls["windowed_past_a_block"] = calls.get("windowed_past_a_block", 0) + 1


def install_probes(rec: dict) -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    active = AttentionBackendEnum.CPU_ATTN.get_class()
    module, _, name = AttentionBackendEnum.CPU_ATTN.value.rpartition(".")
    default = getattr(importlib.import_module(module), name)  # vLLM's own, whatever the override
    rec["cpu_attn_slot"] = f"{active.__module__}.{active.__qualname__}"
    impl_calls = rec["impl_calls"] = {}
    kv_updates = rec["kv_updates"] = {}  # impl -> layer -> calls
    for backend in {active, default}:
        impl = backend.get_impl_cls()
        key = f"{impl.__module__}.{impl.__qualname__}"
        calls = impl_calls[key] = {"causal": 0, "non_causal": 0, "mixed": 0, "unknown": 0, "layers": {}}

        def on_forward(args, kwargs, result, calls=calls):
            # forward(self, layer, query, key, value, kv_cache, attn_metadata, output, ...)
            meta = kwargs.get("attn_metadata", args[6] if len(args) > 6 else None)
            if meta is None:  # profiling run
                return
            flag = _causal_flag(meta)
            calls[flag] += 1
            layer = getattr(args[1], "layer_name", "?")
            calls["layers"].setdefault(flag, set()).add(layer)
            if getattr(args[0], "sliding_window", None):
                _count_window_call(calls, args[0], meta, args[5])

        _wrap(impl, "forward", on_forward)
        if hasattr(impl, "do_kv_cache_update"):
            # do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping)
            def on_kv_update(args, kwargs, result, per_layer=kv_updates.setdefault(key, {})):
                layer = getattr(args[1], "layer_name", "?")
                per_layer[layer] = per_layer.get(layer, 0) + 1

            _wrap(impl, "do_kv_cache_update", on_kv_update)

    try:  # the plugin's numerics entry point (only meaningful when it is installed)
        from dflash_rocm_plugin import ops
    except ImportError:
        return
    ops_calls = rec["ops_calls"] = {"causal": 0, "non_causal": 0, "write_kv_cache": 0}
    sinks_seen = rec["ops_sinks"] = {"calls": 0, "windowed_calls": 0, "values": []}
    ops_seconds = rec["ops_seconds"] = {"paged_attention": 0.0, "write_kv_cache": 0.0}

    def count(name):
        ops_calls[name] += 1

    def on_attention(args, kwargs, result):
        count("causal" if kwargs["causal"] else "non_causal")
        sinks = kwargs.get("sinks")
        if sinks is None:
            return
        sinks_seen["calls"] += 1
        sinks_seen["windowed_calls"] += kwargs.get("sliding_window") is not None
        values = sinks.float().tolist()
        if values not in sinks_seen["values"]:
            sinks_seen["values"].append(values)

    def timed(owner, name, record):
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            result = original(*args, **kwargs)
            ops_seconds[name] += time.perf_counter() - start
            record(args, kwargs, result)
            return result

        setattr(owner, name, wrapper)

    timed(ops, "paged_attention", on_attention)
    timed(ops, "write_kv_cache", lambda a, k, r: count("write_kv_cache"))

    from dflash_rocm_plugin.ops.backends import triton_extend
    dense = rec["ops_dense"] = {"launches": 0, "with_sinks": 0, "windowed": 0, "chunks": 0, "chunks_paged": 0,
                                "chunks_windowed": 0}

    def on_dense(args, kwargs, result):
        # launch(prepared, q, out, seq_lens, query_start_loc, new_keys, new_values, sinks, ...)
        prepared, q, _, seq_lens, qsl, new_keys = args[:6]
        dense["launches"] += 1
        dense["with_sinks"] += prepared.constexprs["USE_SINKS"]
        dense["windowed"] += prepared.constexprs["USE_WINDOW"]
        # Sequences over a prefix with enough queries for the dense kernel: served there (their prefix
        # copied) when the keys of it they see (under a window its last window - 1) are at most GQA x
        # their queries, else by the paged kernel.
        q_lens = (qsl[1:] - qsl[:-1]).cpu()
        prefix = seq_lens.cpu() - q_lens
        window = prepared.ints[1]
        kept = prefix.clamp(max=window - 1) if window > 0 else prefix
        long_chunk = (q_lens >= prepared.cfg.block_m) & (prefix > 0)
        fits = kept <= (q.shape[1] // new_keys.shape[1]) * q_lens
        dense["chunks"] += int((long_chunk & fits).sum()) if prepared.cfg.chunks else 0
        dense["chunks_windowed"] += int((long_chunk & fits).sum()) if prepared.cfg.chunks and window > 0 else 0
        dense["chunks_paged"] += int((long_chunk & ~fits).sum()) if prepared.cfg.chunks else int(long_chunk.sum())

    _wrap(triton_extend, "launch", on_dense)


def install_draft_probe(rec: dict) -> None:
    from vllm.v1.spec_decode.dflash import DFlashProposer

    drafts = rec["drafts"] = []
    margins = rec["draft_margins"] = []

    def on_propose(args, kwargs, result):
        ids = result[0] if isinstance(result, tuple) else result
        drafts.append(ids.tolist())

    def on_greedy(args, kwargs, result):
        # how far each draft token's logit is ahead of the runner-up (row-major, like drafts)
        proposer, hidden = args[0], kwargs.get("hidden_states", args[1] if len(args) > 1 else None)
        top2 = proposer.model.compute_logits(hidden).float().topk(2, dim=-1).values
        margins.append((top2[:, 0] - top2[:, 1]).tolist())

    _wrap(DFlashProposer, "propose", on_propose)
    _wrap(DFlashProposer, "_greedy_sample", on_greedy)


def install_kv_poison(rec: dict, freed_too: bool) -> None:
    """NaN into KV blocks no request may read yet (see the module docstring)."""
    import torch
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    pending: set[int] = set()
    stats = rec["poison"] = {"new": 0, "freed": 0, "poisoned_steps": 0, "blocks_poisoned": 0,
                             "layers": 0, "freed_too": freed_too}

    def on_new(args, kwargs, result):
        ids = [b.block_id for b in result if not getattr(b, "is_null", False)]
        stats["new"] += len(ids)
        pending.update(ids)

    _wrap(BlockPool, "get_new_blocks", on_new)

    original_init = BlockPool.__init__

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        # The null block stands in a block table for the blocks a sliding window let go: nothing reads it.
        stats["null_block"] = self.null_block.block_id
        pending.add(self.null_block.block_id)

    BlockPool.__init__ = init

    if freed_too:
        original_free = BlockPool.free_blocks

        @functools.wraps(original_free)
        def free_blocks(self, ordered_blocks):
            blocks = list(ordered_blocks)
            ids = [b.block_id for b in blocks if not getattr(b, "is_null", False)]
            stats["freed"] += len(ids)
            pending.update(ids)
            return original_free(self, blocks)

        BlockPool.free_blocks = free_blocks

    original_execute = GPUModelRunner.execute_model

    @functools.wraps(original_execute)
    def execute_model(self, scheduler_output, *args, **kwargs):
        if pending:
            ids = sorted(pending)
            pending.clear()
            seen = set()
            for ctx in self.compilation_config.static_forward_context.values():
                kv = getattr(ctx, "kv_cache", None)
                if not isinstance(kv, torch.Tensor) or kv.data_ptr() in seen or kv.numel() == 0:
                    continue
                seen.add(kv.data_ptr())
                if not kv.dtype.is_floating_point:
                    continue
                assert max(ids) < kv.shape[0], (kv.shape, max(ids))  # dim 0 indexes blocks
                kv[ids] = float("nan")
            stats["poisoned_steps"] += 1
            stats["blocks_poisoned"] += len(ids)
            stats["layers"] = max(stats["layers"], len(seen))
        return original_execute(self, scheduler_output, *args, **kwargs)

    GPUModelRunner.execute_model = execute_model


def install_scheduler_probe(rec: dict) -> None:
    """Per step: did a prefill (or a chunk of one) share the batch with speculative-decode requests?"""
    from vllm.v1.core.sched.scheduler import Scheduler

    stats = rec["schedule"] = {"steps": 0, "mixed_steps": 0, "chunked_prefill_chunks": 0, "max_batch": 0}
    original = Scheduler.schedule

    @functools.wraps(original)
    def schedule(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        scheduled = out.num_scheduled_tokens
        if not scheduled:
            return out
        prefilling = spec = 0
        for rid, n in scheduled.items():
            req = self.requests.get(rid)
            if req is None:
                continue
            after = req.num_computed_tokens  # already advanced by this step
            if after - n < req.num_prompt_tokens:
                prefilling += 1
                if after < req.num_prompt_tokens:
                    stats["chunked_prefill_chunks"] += 1
            if out.scheduled_spec_decode_tokens.get(rid):
                spec += 1
        stats["steps"] += 1
        stats["mixed_steps"] += bool(prefilling and spec)
        stats["max_batch"] = max(stats["max_batch"], len(scheduled))
        return out

    Scheduler.schedule = schedule


def spec_metrics(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            out[m.name] = getattr(m, "value", None) if hasattr(m, "value") else list(m.values)
    return out


def scalar_metrics(llm) -> dict:
    out = {}
    for m in llm.get_metrics():
        value = getattr(m, "value", None)
        if isinstance(value, (int, float)):
            out[m.name] = out.get(m.name, 0) + value
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--draft")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--num-spec", type=int, help="num_speculative_tokens (default: the tiny draft's block - 1)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--block-size", type=int, default=32, help="KV block size (CPU_ATTN: multiples of 32)")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--kv-cache-dtype", default="auto", help="the target's cache (e.g. fp8)")
    p.add_argument("--draft-kv-cache-dtype", default=None, help="the draft's own cache dtype (vllm#48787)")
    p.add_argument("--out", required=True)
    p.add_argument("--requests", help="JSON file: waves of {prompt, max_tokens} (default: PROMPTS, one wave)")
    p.add_argument("--engine", default="{}", help="JSON: extra LLM(...) arguments")
    p.add_argument("--speculative", default="{}", help="JSON: extra speculative-config fields")
    p.add_argument("--poison", choices=("new", "new_and_freed"))
    a = p.parse_args(argv)

    # The V1 runner (where DFlashProposer lives) and no engine-core subprocess.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    cpu = {"start": time.process_time()}
    wall_start = time.monotonic()
    import vllm.plugins
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    rec: dict = {"pid": os.getpid()}
    vllm.plugins.load_general_plugins()  # what EngineArgs does first; probes need the final slot
    import dflash_rocm_test_cpu_engine as cpu_engine_testing
    rec["switch"] = cpu_engine_testing.requested()
    install_probes(rec)
    install_draft_probe(rec)
    install_scheduler_probe(rec)
    if a.poison:
        install_kv_poison(rec, freed_too=a.poison == "new_and_freed")

    if a.requests:
        with open(a.requests) as f:
            waves = json.load(f)
    else:
        waves = [[{"prompt": t, "max_tokens": a.max_tokens} for t in PROMPTS]]
    kwargs = dict(model=a.target, dtype=a.dtype, enforce_eager=True, max_model_len=256,
                  max_num_seqs=max(len(w) for w in waves), max_num_batched_tokens=256, seed=0,
                  disable_log_stats=False, block_size=a.block_size, kv_cache_dtype=a.kv_cache_dtype)
    if a.no_prefix_caching:
        # GDN hybrids on CPU: the align-mode prefix cache's Triton kernel does not run there.
        kwargs["enable_prefix_caching"] = False
    kwargs.update(json.loads(a.engine))
    if a.draft:
        from tests.e2e_vllm_cpu.tiny_checkpoints import draft_block_size
        kwargs["speculative_config"] = {"method": "dflash", "model": a.draft,
                                        "num_speculative_tokens": a.num_spec or draft_block_size(a.draft) - 1,
                                        **json.loads(a.speculative)}
        if a.draft_kv_cache_dtype:
            kwargs["speculative_config"]["kv_cache_dtype"] = a.draft_kv_cache_dtype
    cpu["imports"] = time.process_time()
    llm = LLM(**kwargs)
    cpu["engine_init"] = time.process_time()
    rec["outputs"], rec["cached_tokens"] = [], []
    for wave in waves:
        params = [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True) for r in wave]
        results = llm.generate([TokensPrompt(prompt_token_ids=r["prompt"]) for r in wave], params,
                               use_tqdm=False)
        rec["outputs"] += [list(r.outputs[0].token_ids) for r in results]
        rec["cached_tokens"] += [r.num_cached_tokens for r in results]
    cpu["generate"] = time.process_time()
    rec["metrics"] = spec_metrics(llm)
    rec["counters"] = scalar_metrics(llm)
    rec["wall_in_process_s"] = round(time.monotonic() - wall_start, 1)
    rec["cpu_s"] = {k: round(v, 1) for k, v in cpu.items()}
    rec["triton_interpret"] = os.environ.get("TRITON_INTERPRET")
    cache_config = llm.llm_engine.vllm_config.cache_config
    rec["kv_cache_layout"] = cache_config.kv_cache_layout
    rec["block_size"] = cache_config.block_size
    rec["cache_dtype"] = cache_config.cache_dtype
    for calls in rec["impl_calls"].values():
        calls["layers"] = {k: sorted(v) for k, v in calls["layers"].items()}
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip vLLM's slow interpreter-exit teardown: the record is written
