"""Shuffled bf16 paged caches on the GPU with NaN in every slot no sequence owns."""

import torch


def paged_caches(seq_lens, page, hkv, d, gen):
    """``k, v, table``: sequence ``i`` owns ``ceil(seq_lens[i] / page)`` shuffled pages.  Free pages and
    each last page's slots past its sequence's end hold NaN: a kernel that reads one, even to multiply it
    by zero, fails."""
    pages = [-(-s // page) for s in seq_lens]
    nb = sum(pages) + 8
    k = torch.randn(nb, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(nb, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    perm = torch.randperm(nb, device="cuda", generator=gen).int()
    table = torch.zeros(len(seq_lens), max(pages) + 2, dtype=torch.int32, device="cuda")
    owned = torch.zeros(k.shape[:2], dtype=torch.bool, device="cuda")
    at = 0
    for i, (s, n) in enumerate(zip(seq_lens, pages)):
        table[i, :n] = perm[at:at + n]
        at += n
        owned[table[i, :n].long()] = True
        owned[table[i, n - 1].long(), s - page * (n - 1):] = False
    k[~owned] = float("nan")
    v[~owned] = float("nan")
    return k, v, table
