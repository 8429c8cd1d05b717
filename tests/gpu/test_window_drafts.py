"""DFlash2-style windowed attention on the GPU: window 2048, blocks of 8 and 16 queries, batch 1-64,
contexts 4K-32K, Qwen3-8B heads (32 q / 8 kv, head_dim 128), bf16, page 16 (and page 1).

Everything before each sequence's window is NaN, as the hosts' freed sliding-window blocks may
hold anything: the output must be finite and match the float64 reference, computed over the
window's pages only (dropping whole leading pages shifts every position alike, which attention
with a window and causality does not see).
"""

import pytest
import torch

from dflash_rocm_plugin import ops, reference

pytestmark = pytest.mark.gpu
WINDOW, HQ, HKV, D = 2048, 32, 8, 128


def _case(batch, context, q_len, page, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    seq_lens = [context - 37 * i for i in range(batch)]  # ragged, not page multiples
    pages = [-(-s // page) for s in seq_lens]
    nb = sum(pages) + 4
    k = torch.randn(nb, page, HKV, D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(nb, page, HKV, D, device="cuda", dtype=torch.bfloat16, generator=g)
    perm = torch.randperm(nb, device="cuda", generator=g).int()
    table = torch.zeros(batch, max(pages), dtype=torch.int32, device="cuda")
    first_kept, at = [], 0
    for i, (s, n) in enumerate(zip(seq_lens, pages)):
        table[i, :n] = perm[at:at + n]
        at += n
        keep = max(0, s - q_len - WINDOW + 1) // page  # pages wholly before every query's window
        k[table[i, :keep].long()] = float("nan")
        v[table[i, :keep].long()] = float("nan")
        first_kept.append(keep)
    qsl = torch.arange(0, (batch + 1) * q_len, q_len, dtype=torch.int32, device="cuda")
    q = torch.randn(batch * q_len, HQ, D, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v, table, torch.tensor(seq_lens, dtype=torch.int32, device="cuda"), qsl, first_kept


def _reference(q, k, v, table, seq_lens, qsl, first_kept, page, causal):
    outs = []
    for i, keep in enumerate(first_kept):
        s = int(seq_lens[i])
        rows = table[i:i + 1, keep:].cpu()
        lo, hi = int(qsl[i]), int(qsl[i + 1])
        # only this sequence's pages, gathered (a 32K x 64 cache does not fit a float64 copy)
        pages = rows[0, : -(-(s - keep * page) // page)].long()
        kk, vv = k[pages.cuda()].cpu(), v[pages.cuda()].cpu()
        local = torch.arange(len(pages), dtype=torch.int32)[None]
        outs.append(reference.paged_attention(
            q[lo:hi].cpu(), kk, vv, local, torch.tensor([s - keep * page], dtype=torch.int32),
            torch.tensor([0, hi - lo], dtype=torch.int32), causal=causal, sliding_window=WINDOW))
    return torch.cat(outs)


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("q_len", [8, 16])
@pytest.mark.parametrize("batch, context", [(1, 32768), (8, 16384), (64, 4096), (64, 32768)],
                         ids=["1x32K", "8x16K", "64x4K", "64x32K"])
def test_window_2048_blocks(batch, context, q_len, causal):
    page = 16
    q, k, v, table, sl, qsl, kept = _case(batch, context, q_len, page)
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, sliding_window=WINDOW, out=out,
                        max_query_len=q_len)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "a key before the window (NaN) was read"
    ref = _reference(q, k, v, table, sl, qsl, kept, page, causal)
    assert float((out.double().cpu() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
def test_window_2048_page_1(causal):
    q, k, v, table, sl, qsl, kept = _case(8, 8192, 16, 1, seed=2)
    out = ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, sliding_window=WINDOW, max_query_len=16)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    ref = _reference(q, k, v, table, sl, qsl, kept, 1, causal)
    assert float((out.double().cpu() - ref).norm() / ref.norm()) < 1e-2
