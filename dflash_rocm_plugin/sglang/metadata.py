"""Translate an SGLang ``ForwardBatch`` into ``ops.paged_attention``'s arguments.

ops wants, per request, the KV length *including* this step's tokens (their K/V are
written before attention), the query rows, and a block table of pages.  SGLang's
token pool is viewed as ``[pages, page_size, heads, head_dim]``; slot ``s`` lives in
page ``s // page_size`` at offset ``s % page_size`` and SGLang allocates pages so that
a request's position ``p`` sits at offset ``p % page_size``.  The block table row of a
request is therefore its ``req_to_token`` row (page size 1) or every ``page_size``-th
entry divided by ``page_size``.

Per mode (``seq_lens`` is SGLang's ``forward_batch.seq_lens``):
  DECODE          kv = seq_lens (includes the new token)            1 query row
  TARGET_VERIFY   kv = seq_lens + n (seq_lens excludes the block)   n rows (draft block)
  EXTEND & co.    kv = extend_prefix_lens + extend_seq_lens         extend_seq_lens rows
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class PagedMetadata:
    block_table: torch.Tensor      # int32 [>= num_seqs, pages_per_row]
    seq_lens: torch.Tensor         # int32 [num_seqs]
    query_start_loc: torch.Tensor  # int32 [num_seqs + 1]
    max_query_len: int | None      # host-known bound on rows per request, or None
    workspace: torch.Tensor | None = None  # the backend's split-KV scratch (one for all batches)
    # Hybrid sliding-window pools: the window sub-pool's pages and this step's write slots there.
    swa_block_table: torch.Tensor | None = None
    swa_write_loc: torch.Tensor | None = None


@dataclasses.dataclass
class GraphBuffers:
    """Address-stable metadata tensors that captured graphs read at replay."""

    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    swa_block_table: torch.Tensor | None = None
    swa_write_loc: torch.Tensor | None = None

    @classmethod
    def allocate(cls, max_bs: int, pages_per_row: int, device, *, swa_tokens: int = 0) -> "GraphBuffers":
        """``swa_tokens`` > 0: also the window sub-pool's table and write slots (hybrid SWA pools)."""
        table = lambda: torch.zeros((max_bs, pages_per_row), dtype=torch.int32, device=device)  # noqa: E731
        return cls(
            block_table=table(),
            seq_lens=torch.ones((max_bs,), dtype=torch.int32, device=device),
            query_start_loc=torch.zeros((max_bs + 1,), dtype=torch.int32, device=device),
            swa_block_table=table() if swa_tokens else None,
            swa_write_loc=torch.zeros((swa_tokens,), dtype=torch.int64, device=device) if swa_tokens else None,
        )


def tokens_per_request(spec_info, default: int) -> int:
    """Query rows per request in TARGET_VERIFY (the draft block size)."""
    n = getattr(spec_info, "num_tokens_per_req", -1) if spec_info is not None else -1
    if n is None or n <= 0:
        n = getattr(spec_info, "draft_token_num", None) or default
    return int(n)


def query_layout(fb, bs: int, *, verify_tokens: int, draft_extend_tokens: int):
    """(kv_lens [bs] tensor, rows per request int or extend_seq_lens tensor, max_query_len)."""
    mode = fb.forward_mode
    if mode.is_decode_or_idle():
        return fb.seq_lens[:bs], 1, 1
    if mode.is_target_verify():
        n = tokens_per_request(fb.spec_info, verify_tokens)
        return fb.seq_lens[:bs] + n, n, n
    if mode.is_dllm_extend():
        raise NotImplementedError("rocm_dflash: DLLM_EXTEND batches are not supported")
    if mode.is_draft_extend_v2() and getattr(fb, "extend_prefix_lens", None) is None:
        # Graph-shaped draft extend: a fixed number of rows per request, seq_lens
        # counting them; the prefix is what precedes them.
        n = draft_extend_tokens
        ext = getattr(fb.spec_info, "extend_seq_lens_tensor", None)
        prefix = fb.seq_lens[:bs] if ext is None else (fb.seq_lens[:bs] - ext[:bs]).clamp_min(0)
        return prefix + n, n, n
    ext = fb.extend_seq_lens[:bs]
    ext_cpu = getattr(fb, "extend_seq_lens_cpu", None)
    max_q = int(max(ext_cpu)) if ext_cpu is not None and len(ext_cpu) else None
    return fb.extend_prefix_lens[:bs] + ext, ext, max_q


def fill_query_start_loc(rows, bs: int, out: torch.Tensor) -> None:
    """out[: bs + 1] = [0, cumsum(rows)] for a per-request count or an int."""
    if isinstance(rows, int):
        torch.arange(0, (bs + 1) * rows, rows, dtype=torch.int32, device=out.device, out=out[: bs + 1])
    else:
        out[0] = 0
        out[1 : bs + 1].copy_(torch.cumsum(rows, dim=0))


def pages_per_row(req_to_token: torch.Tensor, page_size: int) -> int:
    return -(-req_to_token.shape[1] // page_size)


def index_source(translator, fb, bs: int):
    """The runner translator's view of the batch's KV ids (``ids[row_ids[b], pos]``)."""
    if hasattr(translator, "read_source"):  # sglang >= 0.5.22
        return translator.read_source(fb.kv_loc_plan, req_pool_indices=fb.req_pool_indices, bs=bs)
    return translator.build_index_table(req_pool_indices=fb.req_pool_indices, seq_lens=fb.seq_lens)


def fill_block_table(kv_ids, fb, bs: int, page_size: int, out: torch.Tensor) -> None:
    """out[:bs] = page ids of each request's KV.  ``kv_ids`` is the runner's translator
    (sglang >= 0.5.20) or, before it existed, the ``req_to_token`` table of physical slots."""
    if isinstance(kv_ids, torch.Tensor):
        ids, row_ids = kv_ids, fb.req_pool_indices
    else:
        src = index_source(kv_ids, fb, bs)
        if getattr(src, "v2p", None) is not None or src.is_translated or src.entry_page_size != 1:
            raise NotImplementedError("rocm_dflash: translated (unified) KV index tables are not supported")
        ids, row_ids = src.ids, src.row_ids
    slots = ids if page_size == 1 else ids[:, ::page_size]
    rows = row_ids[:bs].to(torch.long)
    torch.index_select(slots, 0, rows, out=out[:bs])
    if page_size > 1:
        out[:bs].floor_divide_(page_size)


def fill_swa_block_table(full_to_swa: torch.Tensor, full_table: torch.Tensor, bs: int, page_size: int,
                         out: torch.Tensor) -> None:
    """out[:bs] = the window sub-pool's page of every full page in ``full_table[:bs]``.

    The two sub-pools of a hybrid sliding-window pool are paged in step, so a full page's
    first slot maps to its window page's first slot.  Pages the window has freed map to
    page 0 (SGLang's padding page); the kernel reads no key outside the window, so they
    are never dereferenced, and neither are the columns past a request's length."""
    first_slots = full_table[:bs].to(torch.long)
    if page_size > 1:
        first_slots = first_slots * page_size
    pages = full_to_swa[first_slots]
    if page_size > 1:
        pages = pages.floor_divide_(page_size)
    out[:bs].copy_(pages)


def swa_write_loc(swa_pool, fb, into: torch.Tensor | None = None):
    """This step's write slots in the window sub-pool (``KVWriteLoc.swa_loc``), translated
    once per forward as SGLang's backends do; into ``into`` (graphs) when given."""
    loc = getattr(fb, "out_cache_loc", None)
    if loc is None:
        return None
    swa = swa_pool.translate_loc_from_full_to_swa(loc)
    if into is None:
        return swa
    n = loc.shape[0]
    if n > into.shape[0]:
        raise ValueError(f"rocm_dflash: {n} write slots exceed the graph buffer of {into.shape[0]}")
    into[:n].copy_(swa)
    into[n:].zero_()
    return into[:n]
