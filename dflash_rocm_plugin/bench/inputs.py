"""Benchmark inputs on the device: a shuffled paged cache, and rotating copies when it would fit in L2.

A call that reads fewer bytes than a few L2 capacities would be timed against the cache, not HBM,
when repeated over one buffer.  Such shapes get several block tables over disjoint pages, and
timing loops rotate through them; every copy reads as many unique bytes as one call.
"""

from __future__ import annotations

import dataclasses

import torch

from dflash_rocm_plugin.bench.shapes import Shape
from dflash_rocm_plugin.ops import FP8_ROUNDING_DOTS

# Rotate until the bytes touched by one pass over all copies exceed this.
ROTATE_BYTES = 512 << 20


@dataclasses.dataclass
class Case:
    shape: Shape
    q: torch.Tensor              # [B * q_len, Hq, D]
    k_cache: torch.Tensor        # [num_blocks, page, Hkv, D]
    v_cache: torch.Tensor
    block_tables: list           # one int32 [B, pages_per_seq] per copy, disjoint pages
    seq_lens: torch.Tensor       # int32 [B]
    query_start_loc: torch.Tensor  # int32 [B + 1]
    scale: float
    sinks: torch.Tensor | None = None     # float32 [Hq]
    k_scale: torch.Tensor | None = None   # float32 [1] for fp8 caches
    v_scale: torch.Tensor | None = None
    # Per copy, the query tokens' own K/V rows ([B * q_len, Hkv, D] each), as a host passes them with a
    # prefill (ops.paged_attention(new_keys=, new_values=)); None: every row reads the pages.
    new_kv: list | None = None

    def features(self) -> dict:
        """The keyword arguments of ``ops.paged_attention`` beyond the tensors, for this case."""
        return dict(sliding_window=self.shape.window, sinks=self.sinks, k_scale=self.k_scale, v_scale=self.v_scale)

    @property
    def copies(self) -> int:
        return len(self.block_tables)

    def plugin_calls(self, outs: list, **kwargs) -> list:
        """One ``ops.paged_attention`` call per copy, copy ``i`` writing ``outs[i]``; ``kwargs``
        (workspace, backend) join the case's own arguments."""
        from dflash_rocm_plugin import ops
        s = self.shape

        def call(i):
            own = dict(new_keys=self.new_kv[i][0], new_values=self.new_kv[i][1]) if self.new_kv else {}
            return lambda: ops.paged_attention(
                self.q, self.k_cache, self.v_cache, self.block_tables[i], self.seq_lens, self.query_start_loc,
                causal=s.causal, out=outs[i], max_query_len=s.q_len, **kwargs, **self.features(), **own)
        return [call(i) for i in range(self.copies)]


# Query blocks from which a case carries its tokens' own K/V (prefill and chunked prefill, not q16 blocks).
NEW_KV_MIN_QUERY = 128


def build(shape: Shape, device, dtype=torch.bfloat16, seed: int = 0, shuffle: bool = True,
          pool_context: int | None = None, new_kv: bool = True) -> Case:
    """``pool_context``: allocate (and shuffle) pages for that many keys per sequence while each
    table uses only its first ``context``, so a short context reads its keys from as large a pool
    as a long one (a sliding window's keys lie scattered over the whole context's pages).
    ``new_kv``: blocks of at least NEW_KV_MIN_QUERY queries carry their own K/V rows, as a host's
    prefill passes them."""
    hq, hkv, d = shape.heads
    b, ctx, page, ql = shape.batch, shape.context, shape.page, shape.q_len
    assert ctx % page == 0 and ctx >= ql
    gen = torch.Generator(device=device).manual_seed(seed)
    copies = max(1, -(-ROTATE_BYTES // shape.kv_bytes()))
    pages_per_seq = ctx // page
    pool_pages = max(pages_per_seq, -(-(pool_context or 0) // page))
    num_blocks = copies * b * pool_pages
    # Random data, never zeros (zeros can run faster and hide unwritten outputs).
    k_cache = torch.randn(num_blocks, page, hkv, d, device=device, dtype=dtype, generator=gen)
    v_cache = torch.randn(num_blocks, page, hkv, d, device=device, dtype=dtype, generator=gen)
    # Shuffled pages are what a long-running server's cache looks like; ``shuffle=False``
    # (sequential pages) isolates the cost of the scattered layout itself.
    order = (torch.randperm(num_blocks, device=device, generator=gen) if shuffle
             else torch.arange(num_blocks, device=device)).to(torch.int32)
    tables = [t.reshape(b, pool_pages)[:, :pages_per_seq].contiguous() for t in order.split(b * pool_pages)]
    q = torch.randn(b * ql, hq, d, device=device, dtype=dtype, generator=gen)
    seq_lens = torch.full((b,), ctx, dtype=torch.int32, device=device)
    qsl = torch.arange(0, (b + 1) * ql, ql, dtype=torch.int32, device=device)
    case = Case(shape, q, k_cache, v_cache, tables, seq_lens, qsl, d ** -0.5)
    if shape.kv == "fp8":
        # The GPU's own format (e4m3fnuz on MI300X), as its hosts keep fp8 caches.
        from dflash_rocm_plugin import ops
        fmt = ops.native_fp8_dtype(ops.gpu_arch(device.index)) if device.type == "cuda" else torch.float8_e4m3fn
        case.k_cache, case.v_cache = k_cache.to(fmt), v_cache.to(fmt)
        case.k_scale = torch.tensor([0.75], device=device)
        case.v_scale = torch.tensor([1.25], device=device)
    if shape.sinks:
        case.sinks = torch.randn(hq, device=device, generator=gen) + 1.0
    if new_kv and ql >= NEW_KV_MIN_QUERY:
        case.new_kv = [_own_rows(case, table) for table in tables]
    return case


def _cache_rows(case: Case, table: torch.Tensor, keys: torch.Tensor):
    """K and V of ``keys`` (positions) of every sequence as the pages of ``table`` hold them, [B, len, Hkv, D]."""
    page = case.shape.page
    pages = table.long()[:, keys // page]                 # [B, len]
    return case.k_cache[pages, keys % page], case.v_cache[pages, keys % page]


def _own_rows(case: Case, table: torch.Tensor):
    """The cache's K and V rows of each sequence's last q_len positions, [B * q_len, Hkv, D] each, in q's
    dtype: over an fp8 cache the values it stands for (code x scale, exact in bf16 at the bench's scales,
    and stored as the same codes again)."""
    s = case.shape
    k, v = _cache_rows(case, table, torch.arange(s.context - s.q_len, s.context, device=table.device))
    if case.k_scale is not None:
        k, v = (k.float() * case.k_scale).to(case.q.dtype), (v.float() * case.v_scale).to(case.q.dtype)
    return k.flatten(0, 1), v.flatten(0, 1)


def as_page1(case: Case) -> Case:
    """The same caches and key order read as page size 1 (page-granular runs of slots)."""
    s = case.shape
    hq, hkv, d = s.heads
    page = s.page
    keys = torch.arange(s.context, device=case.q.device)
    tables = [(t.long()[:, keys // page] * page + keys % page).to(torch.int32).contiguous()
              for t in case.block_tables]
    shape = dataclasses.replace(s, page=1)
    return Case(shape, case.q, case.k_cache.view(-1, 1, hkv, d), case.v_cache.view(-1, 1, hkv, d), tables,
                case.seq_lens, case.query_start_loc, case.scale, case.sinks, case.k_scale, case.v_scale,
                case.new_kv)


def dense_kv(case: Case, copy: int = 0):
    """K and V of every sequence as dense [B, Hkv, ctx, D] tensors (for SDPA and the reference)."""
    table = case.block_tables[copy]
    k, v = _cache_rows(case, table, torch.arange(case.shape.context, device=table.device))  # [B, ctx, Hkv, D]
    return k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()


def reference(case: Case, copy: int = 0, max_logits: int = 1 << 28) -> torch.Tensor:
    """float32 attention on the device from dense K/V: the check every timed kernel must pass.

    Query rows go in chunks of at most ``max_logits`` scores, so a 32K prefill's reference fits."""
    s = case.shape
    hq, hkv, d = s.heads
    g = hq // hkv
    k, v = dense_kv(case, copy)
    k_scale = 1.0 if case.k_scale is None else case.k_scale.float()
    v_scale = 1.0 if case.v_scale is None else case.v_scale.float()
    out = torch.empty(s.batch * s.q_len, hq, d, device=case.q.device, dtype=torch.float32)
    keys = torch.arange(s.context, device=k.device)
    rows = max(1, max_logits // (hq * s.context))
    for i in range(s.batch):
        ki, vi = k[i].float() * k_scale, v[i].float() * v_scale
        for r0 in range(0, s.q_len, rows):
            r1 = min(s.q_len, r0 + rows)
            pos = s.context - s.q_len + torch.arange(r0, r1, device=k.device)
            hidden = torch.zeros(r1 - r0, s.context, dtype=torch.bool, device=k.device)
            if s.causal:
                hidden |= keys[None, :] > pos[:, None]
            if s.window:
                hidden |= (pos[:, None] - keys[None, :]) >= s.window
            t0 = i * s.q_len
            qi = case.q[t0 + r0:t0 + r1].float().reshape(r1 - r0, hkv, g, d)
            logits = torch.einsum("nkgd,kld->kgnl", qi, ki) * case.scale
            logits = logits.masked_fill(hidden, float("-inf"))
            if case.sinks is not None:
                sink = case.sinks.float().reshape(hkv, g, 1, 1).expand(hkv, g, r1 - r0, 1)
                probs = torch.softmax(torch.cat([logits, sink], -1), -1)[..., :-1]
            else:
                probs = torch.softmax(logits, -1)
            o = torch.einsum("kgnl,kld->nkgd", probs, vi)
            out[t0 + r0:t0 + r1] = o.reshape(r1 - r0, hq, d)
    return out


# The largest relative error a timed launch may show against the reference: bf16 inputs with fp32
# accumulation stay near 3e-3; a launch that rounds q (or P) into an fp8 cache's format for a dot
# near 2-3e-2 (benchmarks/NOTES.md, "v12 -> v13"), which DFLASH_ROCM_FP8_QK and --force may choose.
TOLERANCE = 2e-2
FP8_DOTS_TOLERANCE = 6e-2


def tolerance(launch) -> float:
    """The error allowed for a call that runs ``launch`` (an ``ops.AttentionLaunch``, or None for
    another backend)."""
    return FP8_DOTS_TOLERANCE if getattr(launch, "fp8_dots", "none") in FP8_ROUNDING_DOTS else TOLERANCE


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref||; NaN anywhere counts as a failure (inf)."""
    out = out.float()
    if not torch.isfinite(out).all():
        return float("inf")
    return float((out - ref).norm() / ref.norm())
