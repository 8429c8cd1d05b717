"""A minimal SGLang model-runner stand-in built from SGLang's real pool classes, and
ForwardBatches for EXTEND / DECODE / TARGET_VERIFY over non-contiguous paged slots.

Only what cannot exist on a CPU box is faked (the ModelRunner itself, which would load
a model); pools, the KV index translator, ForwardBatch, RadixAttention,
DFlashVerifyInput and the backends are SGLang's own.
"""

from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace

import torch
from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput

from dflash_rocm_plugin import reference

CONTEXT_LEN = 96


@dataclasses.dataclass(frozen=True)
class Shape:
    num_q_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    page_size: int = 1
    dtype: torch.dtype = torch.float32


def make_runner(shape: Shape, *, max_bs: int = 4, verify_tokens: int = 16, is_draft: bool = False,
                sliding_window: int | None = None, context_len: int = CONTEXT_LEN, pool_tokens: int | None = None):
    page = shape.page_size
    req_pool = ReqToTokenPool(size=max_bs, max_context_len=context_len, device="cpu", enable_memory_saver=False)
    num_pages = max_bs * (-(-min(context_len, 2 * CONTEXT_LEN) // page)) * 2
    if pool_tokens is not None:
        num_pages = -(-pool_tokens // page) + 1
    kv_pool = MHATokenToKVPool(
        size=num_pages * page, page_size=page, dtype=shape.dtype, head_num=shape.num_kv_heads,
        head_dim=shape.head_dim, layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)
    allocator = SimpleNamespace(page_size=page, get_kvcache=lambda: kv_pool)
    translator = KVIndexTranslator(
        req_to_token=req_pool.req_to_token, token_to_kv_pool_allocator=allocator, token_to_kv_pool=kv_pool,
        page_size=page, device="cpu", is_draft_worker=is_draft)
    hf_config = SimpleNamespace(architectures=["Qwen3ForCausalLM"], num_attention_heads=shape.num_q_heads,
                                num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim)
    hf_config.get_text_config = lambda: hf_config
    model_config = SimpleNamespace(
        attention_arch=AttentionArch.MHA, context_len=context_len, head_dim=shape.head_dim,
        v_head_dim=shape.head_dim, swa_v_head_dim=shape.head_dim, is_encoder_decoder=False,
        hf_config=hf_config, hf_text_config=hf_config, linear_attn_registry_result=None,
        get_max_num_attention_heads=lambda: shape.num_q_heads,
        get_num_kv_heads=lambda tp, dcp=1: shape.num_kv_heads)
    return SimpleNamespace(
        device="cpu", gpu_id=0, page_size=page, is_draft_worker=is_draft, sliding_window_size=sliding_window,
        model_config=model_config, dtype=shape.dtype, kv_cache_dtype=shape.dtype,
        req_to_token_pool=req_pool, token_to_kv_pool=kv_pool, token_to_kv_pool_allocator=allocator,
        kv_index_translator=translator, decode_num_tokens_per_req=lambda: verify_tokens,
        init_new_workspace=False, use_mla_backend=False)


def make_backend(name: str, runner):
    return ATTENTION_BACKENDS[name](runner)


def make_layer(shape: Shape, *, encoder_only: bool = False, sliding_window: int = -1,
               layer_id: int = 0) -> RadixAttention:
    return RadixAttention(
        num_heads=shape.num_q_heads, head_dim=shape.head_dim, scaling=shape.head_dim ** -0.5,
        num_kv_heads=shape.num_kv_heads, layer_id=layer_id, sliding_window_size=sliding_window,
        attn_type=AttentionType.ENCODER_ONLY if encoder_only else AttentionType.DECODER)


@dataclasses.dataclass
class Case:
    """One batch: request r has ``prefix[r]`` cached tokens and ``new[r]`` tokens this step."""

    mode: ForwardMode
    prefix: list[int]
    new: list[int]
    slots: list[torch.Tensor] = dataclasses.field(default_factory=list)
    rows: list[int] = dataclasses.field(default_factory=list)
    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    @property
    def total(self) -> list[int]:
        return [p + n for p, n in zip(self.prefix, self.new)]


def allocate_slots(runner, lengths: list[int], seed: int) -> tuple[list[int], list[torch.Tensor]]:
    """Give each request shuffled, interleaved pages (page 0 is SGLang's padding page)."""
    page = runner.page_size
    rng = random.Random(seed)
    free = list(range(1, runner.token_to_kv_pool.size // page))
    rng.shuffle(free)
    rows, slots = [], []
    for r, length in enumerate(lengths):
        pages = [free.pop() for _ in range(-(-length // page))]
        pos = torch.arange(length)
        s = torch.tensor(pages, dtype=torch.int64)[pos // page] * page + pos % page
        row = r + 1
        runner.req_to_token_pool.req_to_token[row].zero_()
        runner.req_to_token_pool.req_to_token[row, :length] = s.to(torch.int32)
        rows.append(row)
        slots.append(s)
    return rows, slots


def build_case(runner, shape: Shape, mode: ForwardMode, prefix: list[int], new: list[int], *, seed: int = 0,
               poison: bool = True, layer_id: int = 0) -> Case:
    """Fill the pool (prefix K/V; NaN everywhere no request owns) and draw q/k/v."""
    case = Case(mode, list(prefix), list(new))
    case.rows, case.slots = allocate_slots(runner, case.total, seed)
    gen = torch.Generator().manual_seed(seed)
    pool = runner.token_to_kv_pool
    kbuf, vbuf = pool.get_key_buffer(layer_id), pool.get_value_buffer(layer_id)
    fill = float("nan") if poison else 0.0
    kbuf.fill_(fill)
    vbuf.fill_(fill)
    hkv, d = shape.num_kv_heads, shape.head_dim

    def draw(n, h):
        return torch.randn((n, h, d), generator=gen).to(shape.dtype)

    for s, p, n in zip(case.slots, case.prefix, case.new):
        kbuf[s[:p]] = draw(p, hkv).to(kbuf.dtype)  # an fp8 pool stores the prefix in its format
        vbuf[s[:p]] = draw(p, hkv).to(vbuf.dtype)
        # The step's own slots start poisoned: only the backend's KV write may fill them.
    t = sum(case.new)
    case.q, case.k, case.v = draw(t, shape.num_q_heads), draw(t, hkv), draw(t, hkv)
    return case


def forward_batch(runner, case: Case, *, custom_mask: torch.Tensor | None = None,
                  pad_to: int | None = None) -> ForwardBatch:
    """SGLang's ForwardBatch for ``case``; ``pad_to`` appends graph-padding requests
    (row 0, seq_len 1, writing slot 0) the way a replay of a larger capture does."""
    bs = len(case.new)
    rows, seq_lens = list(case.rows), []
    out_loc, positions = [], []
    for s, p, n in zip(case.slots, case.prefix, case.new):
        out_loc.append(s[p:p + n])
        positions.append(torch.arange(p, p + n))
    n_verify = case.new[0]
    if case.mode == ForwardMode.TARGET_VERIFY:
        seq_lens = list(case.prefix)
    else:
        seq_lens = case.total
    pad = (pad_to or bs) - bs
    per_req = 1 if case.mode == ForwardMode.DECODE else n_verify
    for _ in range(pad):
        rows.append(0)
        seq_lens.append(1)
        out_loc.append(torch.zeros(per_req, dtype=torch.int64))
        positions.append(torch.arange(1, 1 + per_req))
    full_bs = bs + pad
    out_cache_loc = torch.cat(out_loc)
    fb = ForwardBatch(
        forward_mode=case.mode, batch_size=full_bs,
        input_ids=torch.zeros(out_cache_loc.numel(), dtype=torch.int64),
        req_pool_indices=torch.tensor(rows, dtype=torch.int64),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int64),
        seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int64),
        out_cache_loc=out_cache_loc, seq_lens_sum=sum(seq_lens), positions=torch.cat(positions))
    if case.mode == ForwardMode.TARGET_VERIFY:
        fb.spec_info = DFlashVerifyInput(
            draft_token=fb.input_ids, positions=fb.positions, draft_token_num=n_verify, topk=1,
            custom_mask=custom_mask, capture_hidden_mode=CaptureHiddenMode.FULL)
    runner.kv_index_translator.bind_own_plan(fb)
    if case.mode in (ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND_V2):
        fb.extend_prefix_lens = torch.tensor(case.prefix, dtype=torch.int32)
        fb.extend_prefix_lens_cpu = list(case.prefix)
        fb.extend_seq_lens = torch.tensor(case.new, dtype=torch.int32)
        fb.extend_seq_lens_cpu = list(case.new)
        fb.extend_num_tokens = sum(case.new)
        fb.extend_start_loc = torch.cumsum(fb.extend_seq_lens, 0) - fb.extend_seq_lens  # GDN metadata reads it
    return fb


def padded_qkv(case: Case, shape: Shape, pad_tokens: int):
    """The case's q/k/v with ``pad_tokens`` finite rows appended (graph padding)."""
    def pad(x, h):
        return torch.cat([x, torch.ones((pad_tokens, h, shape.head_dim), dtype=x.dtype)])

    return pad(case.q, shape.num_q_heads), pad(case.k, shape.num_kv_heads), pad(case.v, shape.num_kv_heads)


def run(backend, layer, fb, q, k, v, *, eager: bool = True, poison_out: bool = True):
    """Metadata + forward, writing into a NaN-poisoned output buffer."""
    if eager:
        backend.init_forward_metadata(fb)
    if poison_out:
        fb._attn_output = torch.full((q.shape[0], q.shape[1] * q.shape[2]), float("nan"), dtype=q.dtype)
    out = backend.forward(q.reshape(q.shape[0], -1), k, v, layer, fb)
    return out.view(q.shape)


def expected(runner, case: Case, shape: Shape, *, causal: bool, sglang_window: int = -1,
             layer_id: int = 0) -> torch.Tensor:
    """float64 oracle: the step's k/v placed at its slots, attention per SGLang semantics
    (window_left W: keys p-W..p visible) through the plugin's float64 reference."""
    page = runner.page_size
    kbuf = runner.token_to_kv_pool.get_key_buffer(layer_id).clone()
    vbuf = runner.token_to_kv_pool.get_value_buffer(layer_id).clone()
    loc = torch.cat([s[p:p + n] for s, p, n in zip(case.slots, case.prefix, case.new)])
    kbuf[loc], vbuf[loc] = case.k, case.v
    width = max(case.total)
    table = torch.zeros((len(case.new), -(-width // page)), dtype=torch.int32)
    for r, s in enumerate(case.slots):
        table[r, : -(-len(s) // page)] = (s[::page] // page).to(torch.int32)
    qsl = torch.tensor([0] + list(torch.tensor(case.new).cumsum(0)), dtype=torch.int32)
    return reference.paged_attention(
        case.q, kbuf.view(-1, page, *kbuf.shape[1:]), vbuf.view(-1, page, *vbuf.shape[1:]), table,
        torch.tensor(case.total, dtype=torch.int32), qsl, causal=causal,
        sliding_window=None if sglang_window < 0 else sglang_window + 1)


def snapshot(runner, layer_id: int = 0):
    pool = runner.token_to_kv_pool
    return pool.get_key_buffer(layer_id).clone(), pool.get_value_buffer(layer_id).clone()


def restore(runner, snap, layer_id: int = 0) -> None:
    pool = runner.token_to_kv_pool
    pool.get_key_buffer(layer_id).copy_(snap[0])
    pool.get_value_buffer(layer_id).copy_(snap[1])


def tolerance(dtype: torch.dtype) -> float:
    return 2e-5 if dtype == torch.float32 else 2e-3
