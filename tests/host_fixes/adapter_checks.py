"""Run inside ONE sglang release (its unpacked wheel first on PYTHONPATH); print a JSON report.

Used by test_sglang_adapter_old_releases.py.  Calls the adapter's real ``register()``, then
builds a model-runner stand-in from the release's own pool classes and runs the plugin
backend and the release's TritonAttnBackend on identical ForwardBatches; both outputs and
the float64 reference are compared here and the largest errors reported.  Only the model
runner (which would load a model and a GPU) is a stand-in, plus ``sgl_kernel`` stubs where
the release cannot import without the CUDA/ROCm kernel package.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from types import SimpleNamespace

import torch

from tests.host_fixes.release_checks import _STUBBED, _import

torch.set_grad_enabled(False)
HQ, HKV, D, CONTEXT = 4, 2, 32, 96
CASES = {  # name: (mode, prefix lens, new lens, ENCODER_ONLY layer)
    "extend_prefix": ("EXTEND", [5, 16, 0], [7, 3, 17], False),
    "decode": ("DECODE", [8, 31, 16], [1, 1, 1], False),
    "verify_causal": ("TARGET_VERIFY", [1, 17, 30], [16, 16, 16], False),
    "verify_encoder_only": ("TARGET_VERIFY", [1, 17, 30], [16, 16, 16], True),
}


_HELD: list = []


def install_runtime_context() -> None:
    """Parallel sizes and published server args, as a scheduler process has them."""
    try:
        from sglang.srt import runtime_context as rc
    except ImportError:  # before 0.5.14: dp_attention globals and the global server args
        install_legacy_globals()
        return

    parallel = rc.get_parallel()
    if hasattr(parallel, "override_permanently"):  # 0.5.23: as tests/sglang/conftest.py does
        parallel.override_permanently(attn_tp_size=1, attn_dcp_rank=0)
    else:
        wanted = {"attn_tp_size": 1, "attn_dcp_size": 1, "attn_dcp_rank": 0}
        fields = {k: v for k, v in wanted.items() if k in rc._PARALLEL_FIELDS}
        held = parallel.override(**fields)
        held.__enter__()
        _HELD.append(held)  # a collected generator would run its restore
    if hasattr(rc.get_context(), "override_server_args"):
        rc.get_context().override_server_args().install()


def install_legacy_globals() -> None:
    from sglang.srt import server_args as sa
    from sglang.srt.distributed import parallel_state

    # A single-GPU scheduler's attention TP group (only its size and rank are read here).
    parallel_state._ATTN_TP = SimpleNamespace(world_size=1, rank_in_group=0)
    if hasattr(sa, "set_global_server_args_for_scheduler"):
        sa.set_global_server_args_for_scheduler(server_args())


def server_args():
    """What 0.5.14's TritonAttnBackend reads from ``model_runner.server_args``."""
    return SimpleNamespace(
        speculative_num_draft_tokens=16, speculative_num_steps=1, speculative_eagle_topk=1,
        triton_attention_num_kv_splits=8, chunked_prefill_size=8192, enable_deterministic_inference=False,
        triton_attention_split_tile_size=None, page_size=1, dllm_algorithm=None,
        disable_cuda_graph=False)


def make_runner(page: int):
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    req_pool = ReqToTokenPool(size=4, max_context_len=CONTEXT, device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(size=8 * CONTEXT // page * page * 2, page_size=page, dtype=torch.float32,
                               head_num=HKV, head_dim=D, layer_num=1, device="cpu",
                               enable_memory_saver=False, enable_alt_stream=False)
    allocator = SimpleNamespace(page_size=page, get_kvcache=lambda: kv_pool)
    hf = SimpleNamespace(architectures=["Qwen3ForCausalLM"], num_attention_heads=HQ,
                         num_key_value_heads=HKV, head_dim=D)
    hf.get_text_config = lambda: hf
    mc = SimpleNamespace(
        attention_arch=AttentionArch.MHA, context_len=CONTEXT, head_dim=D, v_head_dim=D, swa_v_head_dim=D,
        is_encoder_decoder=False, hf_config=hf, hf_text_config=hf, num_attention_heads=HQ,
        linear_attn_registry_result=None, get_num_kv_heads=lambda tp, dcp=1: HKV)
    if hasattr(_model_config_class(), "get_max_num_attention_heads"):
        mc.get_max_num_attention_heads = lambda: HQ
    runner = SimpleNamespace(
        device="cpu", gpu_id=0, page_size=page, is_draft_worker=False, sliding_window_size=None,
        model_config=mc, dtype=torch.float32, kv_cache_dtype=torch.float32, server_args=server_args(),
        req_to_token_pool=req_pool, token_to_kv_pool=kv_pool, token_to_kv_pool_allocator=allocator,
        init_new_workspace=False, use_mla_backend=False, hybrid_gdn_config=None, kimi_linear_config=None,
        linear_attn_model_spec=None, mambaish_config=None)
    runner.server_args.page_size = page
    if _has_translator():
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
        runner.kv_index_translator = KVIndexTranslator(
            req_to_token=req_pool.req_to_token, token_to_kv_pool_allocator=allocator, token_to_kv_pool=kv_pool,
            page_size=page, device="cpu", is_draft_worker=False)
        runner.decode_num_tokens_per_req = lambda: 16
    return runner


def _model_config_class():
    from sglang.srt.configs.model_config import ModelConfig
    return ModelConfig


def _has_runtime_context() -> bool:
    try:
        import sglang.srt.runtime_context  # noqa: F401
    except ImportError:
        return False
    return True


def _has_translator() -> bool:
    try:
        import sglang.srt.mem_cache.kv_index_translator  # noqa: F401
    except ImportError:
        return False
    return True


def build_case(runner, mode, prefix, new, seed):
    """Shuffled pages per request, prefix K/V in the pool, NaN in every slot no one owns."""
    page = runner.page_size
    rng = random.Random(seed)
    free = list(range(1, runner.token_to_kv_pool.size // page))
    rng.shuffle(free)
    kbuf, vbuf = runner.token_to_kv_pool.get_key_buffer(0), runner.token_to_kv_pool.get_value_buffer(0)
    kbuf.fill_(float("nan"))
    vbuf.fill_(float("nan"))
    gen = torch.Generator().manual_seed(seed)
    case = SimpleNamespace(mode=mode, prefix=prefix, new=new, rows=[], slots=[])
    for r, (p, n) in enumerate(zip(prefix, new)):
        pages = [free.pop() for _ in range(-(-(p + n) // page))]
        pos = torch.arange(p + n)
        s = torch.tensor(pages)[pos // page] * page + pos % page
        runner.req_to_token_pool.req_to_token[r + 1].zero_()
        runner.req_to_token_pool.req_to_token[r + 1, : p + n] = s.to(torch.int32)
        kbuf[s[:p]] = torch.randn((p, HKV, D), generator=gen)
        vbuf[s[:p]] = torch.randn((p, HKV, D), generator=gen)
        case.rows.append(r + 1)
        case.slots.append(s)
    t = sum(new)
    case.q, case.k, case.v = (torch.randn((t, h, D), generator=gen) for h in (HQ, HKV, HKV))
    return case


def forward_batch(runner, case):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput

    mode = getattr(ForwardMode, case.mode)
    verify = mode == ForwardMode.TARGET_VERIFY
    seq_lens = list(case.prefix) if verify else [p + n for p, n in zip(case.prefix, case.new)]
    out_loc = torch.cat([s[p:p + n] for s, p, n in zip(case.slots, case.prefix, case.new)])
    positions = torch.cat([torch.arange(p, p + n) for p, n in zip(case.prefix, case.new)])
    fb = ForwardBatch(
        forward_mode=mode, batch_size=len(case.new), input_ids=torch.zeros(out_loc.numel(), dtype=torch.int64),
        req_pool_indices=torch.tensor(case.rows), seq_lens=torch.tensor(seq_lens),
        seq_lens_cpu=torch.tensor(seq_lens), out_cache_loc=out_loc, seq_lens_sum=sum(seq_lens),
        positions=positions)
    # 0.5.11's TritonAttnBackend reaches the pools through the batch.
    fb.token_to_kv_pool, fb.req_to_token_pool = runner.token_to_kv_pool, runner.req_to_token_pool
    if verify:
        fb.spec_info = DFlashVerifyInput(draft_token=fb.input_ids, positions=positions,
                                         draft_token_num=case.new[0], topk=1, custom_mask=None,
                                         capture_hidden_mode=CaptureHiddenMode.FULL)
    if hasattr(runner, "kv_index_translator"):
        runner.kv_index_translator.bind_own_plan(fb)
    if mode == ForwardMode.EXTEND:
        fb.extend_prefix_lens = torch.tensor(case.prefix, dtype=torch.int32)
        fb.extend_prefix_lens_cpu = list(case.prefix)
        fb.extend_seq_lens = torch.tensor(case.new, dtype=torch.int32)
        fb.extend_seq_lens_cpu = list(case.new)
        fb.extend_num_tokens = sum(case.new)
        fb.extend_start_loc = torch.cumsum(fb.extend_seq_lens, 0) - fb.extend_seq_lens
    return fb


def run_backend(name, runner, case, layer, poison):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    backend = ATTENTION_BACKENDS[name](runner)
    fb = forward_batch(runner, case)
    backend.init_forward_metadata(fb)
    if poison:
        fb._attn_output = torch.full((case.q.shape[0], HQ * D), float("nan"))
    out = backend.forward(case.q.reshape(case.q.shape[0], -1), case.k, case.v, layer, fb)
    return out.view(case.q.shape), type(backend).__name__


def expected(runner, case, causal):
    from dflash_rocm_plugin import reference

    page = runner.page_size
    kbuf = runner.token_to_kv_pool.get_key_buffer(0).clone()
    vbuf = runner.token_to_kv_pool.get_value_buffer(0).clone()
    loc = torch.cat([s[p:p + n] for s, p, n in zip(case.slots, case.prefix, case.new)])
    kbuf[loc], vbuf[loc] = case.k, case.v
    total = [p + n for p, n in zip(case.prefix, case.new)]
    table = torch.zeros((len(total), -(-max(total) // page)), dtype=torch.int32)
    for r, s in enumerate(case.slots):
        table[r, : -(-len(s) // page)] = (s[::page] // page).to(torch.int32)
    qsl = torch.tensor([0] + torch.tensor(case.new).cumsum(0).tolist(), dtype=torch.int32)
    return reference.paged_attention(case.q, kbuf.view(-1, page, HKV, D), vbuf.view(-1, page, HKV, D), table,
                                     torch.tensor(total, dtype=torch.int32), qsl, causal=causal)


def make_layer(encoder_only: bool):
    from sglang.srt.layers.radix_attention import AttentionType, RadixAttention

    return RadixAttention(num_heads=HQ, head_dim=D, scaling=D ** -0.5, num_kv_heads=HKV, layer_id=0,
                          attn_type=AttentionType.ENCODER_ONLY if encoder_only else AttentionType.DECODER)


def numerics(page: int) -> dict:
    results = {}
    for name, (mode, prefix, new, encoder_only) in CASES.items():
        runner = make_runner(page)
        case = build_case(runner, mode, prefix, new, seed=len(name) + page)
        layer = make_layer(encoder_only)
        pool = runner.token_to_kv_pool
        start = (pool.get_key_buffer(0).clone(), pool.get_value_buffer(0).clone())
        plugin, cls = run_backend("rocm_dflash", runner, case, layer, poison=True)
        plugin_pool = (pool.get_key_buffer(0).clone(), pool.get_value_buffer(0).clone())
        pool.get_key_buffer(0).copy_(start[0])
        pool.get_value_buffer(0).copy_(start[1])
        triton, _ = run_backend("triton", runner, case, layer, poison=False)
        ref = expected(runner, case, causal=not encoder_only)
        other = expected(runner, case, causal=encoder_only)
        results[f"{name}/page{page}"] = {
            "backend_class": cls,
            "plugin_nan": bool(plugin.isnan().any()),
            "vs_reference": float((plugin.double() - ref).abs().max()),
            "vs_triton": float((plugin - triton).abs().max()),
            "triton_vs_reference": float((triton.double() - ref).abs().max()),
            "other_causality_gap": float((other - ref).abs().max()),
            "pools_equal": all(torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
                               for a, b in zip(plugin_pool, (pool.get_key_buffer(0), pool.get_value_buffer(0)))),
        }
    return results


def eager_reference(name: str, page: int, *, seed: int):
    """A fresh case, its eager rocm_dflash output, and the pool put back as it was before
    that forward, so a graph-path run writes the same K/V into the same slots again."""
    mode, prefix, new, encoder_only = CASES[name]
    runner = make_runner(page)
    case = build_case(runner, mode, prefix, new, seed=seed)
    layer = make_layer(encoder_only)
    pool = runner.token_to_kv_pool
    start = (pool.get_key_buffer(0).clone(), pool.get_value_buffer(0).clone())
    eager, _ = run_backend("rocm_dflash", runner, case, layer, poison=True)
    pool.get_key_buffer(0).copy_(start[0])
    pool.get_value_buffer(0).copy_(start[1])
    return runner, case, layer, eager


def graph_metadata(page: int) -> dict:
    """Eager vs capture-shaped metadata (graph buffers sized for a larger batch)."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    results = {}
    for name in ("decode", "verify_causal"):
        runner, case, layer, eager = eager_reference(name, page, seed=3 + page)
        backend = ATTENTION_BACKENDS["rocm_dflash"](runner)
        backend.init_cuda_graph_state(4, 4 * 16)
        fb = forward_batch(runner, case)
        backend.init_forward_metadata_out_graph(fb, in_capture=False)
        backend.init_forward_metadata_in_graph(fb)
        fb._attn_output = torch.full((case.q.shape[0], HQ * D), float("nan"))
        graph = backend.forward(case.q.reshape(case.q.shape[0], -1), case.k, case.v, layer, fb)
        results[f"{name}/page{page}"] = float((graph.view(case.q.shape) - eager).abs().max())
    return results


def legacy_graph_hooks(page: int) -> dict:
    """The pre-0.5.13 hooks as that graph runner drives them: capture once at a padded batch
    size from its own buffers, replay a smaller batch padded with request row 0 and the fill
    value.  The real rows must equal the eager result, and replay must leave the metadata
    tensors where capture put them (a graph reads those addresses)."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    results = {}
    graph_bs = 4
    for name in ("decode", "verify_causal"):
        runner, case, layer, eager = eager_reference(name, page, seed=5 + page)
        mode, _, new, _ = CASES[name]

        backend = ATTENTION_BACKENDS["rocm_dflash"](runner)
        backend.init_cuda_graph_state(graph_bs, graph_bs * 16)
        fill = backend.get_cuda_graph_seq_len_fill_value()
        fb = forward_batch(runner, case)
        n, bs = new[0], len(new)
        rows = torch.zeros(graph_bs, dtype=torch.int64)
        lens = torch.full((graph_bs,), fill, dtype=torch.int64)
        backend.init_forward_metadata_capture_cuda_graph(graph_bs, graph_bs * n, rows, lens, None,
                                                         getattr(ForwardMode, mode), fb.spec_info)
        captured = backend.forward_metadata
        rows[:bs], lens[:bs] = fb.req_pool_indices, fb.seq_lens
        backend.init_forward_metadata_replay_cuda_graph(graph_bs, rows, lens, int(lens.sum()), None,
                                                        getattr(ForwardMode, mode), fb.spec_info, None)
        replayed = backend.forward_metadata
        same_tensors = all(a.data_ptr() == b.data_ptr() for a, b in (
            (captured.block_table, replayed.block_table), (captured.seq_lens, replayed.seq_lens),
            (captured.query_start_loc, replayed.query_start_loc)))
        pad = (graph_bs - bs) * n
        fb.out_cache_loc = torch.cat([fb.out_cache_loc, torch.zeros(pad, dtype=fb.out_cache_loc.dtype)])
        q, k, v = (torch.cat([t, torch.zeros((pad, *t.shape[1:]))]) for t in (case.q, case.k, case.v))
        fb._attn_output = torch.full((q.shape[0], HQ * D), float("nan"))
        graph = backend.forward(q.reshape(q.shape[0], -1), k, v, layer, fb)[: case.q.shape[0]]
        results[f"{name}/page{page}"] = {"err": float((graph.view(case.q.shape) - eager).abs().max()),
                                         "same_tensors": same_tensors}
    return results


def unified_pool_rejection() -> str | None:
    """The reason the backend refuses a runner whose ``req_to_token`` holds virtual ids."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    runner = make_runner(1)
    if hasattr(runner, "kv_index_translator"):
        runner.kv_index_translator = SimpleNamespace(is_translating=True)
    else:  # 0.5.18's unified pool: the allocator translates virtual ids
        runner.token_to_kv_pool_allocator.translate_kv_loc = lambda ids, out=None: ids
    try:
        ATTENTION_BACKENDS["rocm_dflash"](runner)
    except ValueError as exc:
        return str(exc)
    return None


def draft_accepts_rocm_dflash(choices) -> bool:
    """The DFLASH draft may use rocm_dflash: the public list (0.5.20+), else every private
    allow-list the host fix found has been widened."""
    if hasattr(choices, "add_draft_attention_backend_choices"):
        return "rocm_dflash" in choices.DRAFT_ATTENTION_BACKEND_CHOICES
    from dflash_rocm_plugin.hostfix import code as _code
    from dflash_rocm_plugin.sglang.fixes import draft_backend

    lists = []
    for module_name, path, _ in draft_backend.FUNCTION_TARGETS:
        module = _code.optional_module(module_name)
        try:
            fn = draft_backend._resolve(module, path)[2] if module is not None else None
        except AttributeError:
            fn = None
        if fn is not None:
            lists += draft_backend.allow_lists(getattr(fn, "__wrapped__", fn).__code__)
    return bool(lists) and all("rocm_dflash" in lst for lst in lists) and not draft_backend.probe().needed


def main(version: str) -> dict:
    import sglang

    report = {"version": version, "imported_from": sglang.__file__}
    _import("sglang.srt.layers.attention.triton_backend")
    _import("sglang.srt.speculative.dflash_info")
    if not _has_runtime_context():
        # 0.5.11's v1 DFLASH worker imports sgl_kernel.kvcacheio unguarded: load it (stubbing
        # only that) before the host fix looks for its draft allow-list.
        _import("sglang.srt.speculative.dflash_worker")
    install_runtime_context()
    from dflash_rocm_plugin.sglang import register, registration
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    register()
    register()  # idempotent
    choices = registration._choices_module()
    report["registered"] = "rocm_dflash" in ATTENTION_BACKENDS
    report["choices_count"] = choices.ATTENTION_BACKEND_CHOICES.count("rocm_dflash")
    report["draft_accepts_rocm_dflash"] = draft_accepts_rocm_dflash(choices)
    report["unified_pool_rejection"] = unified_pool_rejection()
    from dflash_rocm_plugin.sglang import compat

    report["legacy_graph_hooks_used"] = compat.uses_legacy_graph_hooks()
    report["numerics"], report["graph"], report["legacy_graph"] = {}, {}, {}
    for page in (1, 16):
        report["numerics"].update(numerics(page))
        report["graph"].update(graph_metadata(page))
        if report["legacy_graph_hooks_used"]:
            report["legacy_graph"].update(legacy_graph_hooks(page))
    report["stubbed_sgl_kernel_for"] = _STUBBED
    return report


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    print("RESULT " + json.dumps(main(sys.argv[1]), default=str))
