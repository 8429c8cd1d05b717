"""Builders for paged-attention test inputs: shuffled pages, strided cache views, poisoned outputs."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class PagedCase:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    num_padding_rows: int

    def args(self):
        return (self.q, self.k_cache, self.v_cache, self.block_table, self.seq_lens, self.query_start_loc)


def build(seq_lens, q_lens, *, num_q_heads=4, num_kv_heads=2, head_dim=32, block_size=16,
          dtype=torch.float32, layout="contiguous", padding_rows=0, extra_table_cols=2,
          seed=0, cache_dtype=None) -> PagedCase:
    """A batch whose sequence i has ``seq_lens[i]`` keys and its last ``q_lens[i]`` positions as queries.

    Every cache slot no sequence owns -- spare blocks, and each last page's slots past its
    sequence's end -- holds NaN, so a kernel that reads one fails.  ``cache_dtype`` (an fp8 format)
    stores the caches in it (NaN codes in the unowned slots).

    layout:
      "contiguous"  caches are plain [blocks, block_size, H, D] tensors;
      "kv_interleaved"  K and V are views into one [blocks, H, block_size, 2*D] buffer (vLLM's
                         logical per-layer layout), so every stride is non-trivial;
      "heads_major"  caches are transposed views of [blocks, H, block_size, D] storage.
    """
    assert len(seq_lens) == len(q_lens)
    assert all(0 <= q <= s for q, s in zip(q_lens, seq_lens))
    gen = torch.Generator().manual_seed(seed)
    pages_per_seq = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(pages_per_seq) + 3  # spare blocks hold garbage that must never be read
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    if layout == "contiguous":
        k_cache = torch.randn(shape, generator=gen).to(dtype)
        v_cache = torch.randn(shape, generator=gen).to(dtype)
    elif layout == "kv_interleaved":
        buf = torch.randn(num_blocks, num_kv_heads, block_size, 2 * head_dim, generator=gen).to(dtype)
        k_cache, v_cache = buf.transpose(1, 2).split(head_dim, dim=-1)
    elif layout == "heads_major":
        k_cache = torch.randn(num_blocks, num_kv_heads, block_size, head_dim, generator=gen).to(dtype).transpose(1, 2)
        v_cache = torch.randn(num_blocks, num_kv_heads, block_size, head_dim, generator=gen).to(dtype).transpose(1, 2)
    else:
        raise ValueError(layout)

    perm = torch.randperm(num_blocks, generator=gen)
    owned = torch.zeros(num_blocks, block_size, dtype=torch.bool)
    used = 0
    for n, s in zip(pages_per_seq, seq_lens):
        owned[perm[used:used + n]] = (torch.arange(n * block_size) < s).reshape(n, block_size)
        used += n
    for cache in (k_cache, v_cache):
        cache[~owned] = float("nan")
    if cache_dtype is not None:
        k_cache, v_cache = k_cache.to(cache_dtype), v_cache.to(cache_dtype)
    width = max(pages_per_seq + [1]) + extra_table_cols
    # Extra rows and a wider parent make the table a non-contiguous view, as hosts pass it.
    parent = torch.full((len(seq_lens) + 1, width + 3), 10**6, dtype=torch.int32)
    table = parent[:, 1:width + 1]
    used = 0
    for row, n in enumerate(pages_per_seq):
        table[row, :n] = perm[used:used + n].to(torch.int32)
        used += n
    qsl = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(q_lens, dtype=torch.int32).cumsum(0)
    num_tokens = int(qsl[-1]) + padding_rows
    q = torch.randn(num_tokens, num_q_heads, head_dim, generator=gen).to(dtype)
    return PagedCase(q, k_cache, v_cache, table, torch.tensor(seq_lens, dtype=torch.int32), qsl, padding_rows)


def pin_gpu(monkeypatch, arch: str, smem: int, sms: int) -> None:
    """Make the launch choice see this GPU (architecture, shared memory a block may use,
    multiprocessors), compiling rather than interpreting, for the rest of ``monkeypatch``'s scope."""
    from dflash_rocm_plugin.ops import _runtime
    monkeypatch.setattr(_runtime, "gpu_arch", lambda index=None: arch)
    monkeypatch.setattr(_runtime, "shared_memory_per_block", lambda index: smem)
    monkeypatch.setattr(_runtime, "multiprocessor_count", lambda index: sms)
    monkeypatch.setattr(_runtime, "interpreting", lambda: False)


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"))


def tolerance(dtype: torch.dtype) -> float:
    return {torch.float32: 2e-5, torch.float16: 3e-3, torch.bfloat16: 3e-2}[dtype]


def check_against_reference(case: PagedCase, *, causal: bool, **kw) -> torch.Tensor:
    """Run ops.paged_attention into a NaN-poisoned output and compare it with the float64
    reference; padding rows past query_start_loc[-1] must stay poisoned (untouched)."""
    from dflash_rocm_plugin import ops, reference

    out = poisoned_like(case.q)
    got = ops.paged_attention(*case.args(), causal=causal, out=out, **kw)
    assert got is out
    ref_kw = {k: v for k, v in kw.items() if k in ("scale", "sliding_window", "softcap", "sinks", "k_scale",
                                                    "v_scale")}
    want = reference.paged_attention(*case.args(), causal=causal, **ref_kw)
    valid = int(case.query_start_loc[-1])
    err = (out[:valid].double() - want[:valid]).abs().max().item() if valid else 0.0
    assert err <= tolerance(case.q.dtype), f"max abs error {err:.3e}"
    if case.num_padding_rows:
        assert torch.isnan(out[valid:]).all(), "padding rows past query_start_loc[-1] were written"
    return out
