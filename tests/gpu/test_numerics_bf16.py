"""bf16 numerics of ops.paged_attention at Qwen3-8B/4B shapes against the float64 reference.

32 query / 8 KV heads, head_dim 128, 16-token DFlash blocks, causal (verify) and non-causal
(draft), page 16 and page 1, contexts up to 8K, with and without split-KV, ragged batches whose
lengths are not page or tile multiples; the target's other calls and 256- / 512-wide heads.  Outputs
and every cache slot no sequence owns are NaN before each call.  bf16 operands
with fp32 accumulation land near 3e-3 relative error; the bound is 1e-2.
"""

import pytest
import torch

from dflash_rocm_plugin import ops, reference
from tests.gpu.caches import paged_caches

pytestmark = pytest.mark.gpu


def _rel(out, ref):
    return float((out.double().cpu() - ref).norm() / ref.norm())


def _build(seq_lens, page, q_len=16, hq=32, hkv=8, d=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    k, v, table = paged_caches(seq_lens, page, hkv, d, g)
    q_lens = [min(q_len, s) for s in seq_lens]
    qsl = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(int(qsl[-1]), hq, d, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v, table, torch.tensor(seq_lens, dtype=torch.int32, device="cuda"), qsl


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("page", [16, 1])
@pytest.mark.parametrize("seq_lens", [[8192], [1000, 4111, 16, 2049], [8192, 333]],
                         ids=["1x8K", "ragged4", "8K+short"])
@pytest.mark.parametrize("splits", [None, 1, 7])
def test_bf16_matches_float64(causal, page, seq_lens, splits):
    q, k, v, table, sl, qsl = _build(seq_lens, page)
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out, max_query_len=16,
                        num_kv_splits=splits)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=causal)
    assert _rel(out, ref) < 1e-2


def test_graph_split_and_no_split_agree_closely():
    """Split-KV changes the summation order only: the two answers agree to bf16 rounding."""
    q, k, v, table, sl, qsl = _build([8192, 8192], 16)
    a = ops.paged_attention(q, k, v, table, sl, qsl, causal=False, num_kv_splits=1)
    b = ops.paged_attention(q, k, v, table, sl, qsl, causal=False, num_kv_splits=16)
    assert float((a.float() - b.float()).norm() / a.float().norm()) < 1e-2


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("page", [16, 1])
@pytest.mark.parametrize("fields", [dict(page_ids_asm=False, offsets_32=False), dict(page_ids_asm=True),
                                    dict(page_ids_asm=True, offsets_32=False),
                                    dict(page_ids_asm=False, num_stages=3),
                                    dict(page_ids_asm=True, block_n=32, num_stages=4),
                                    dict(page_ids_asm=False, num_stages=5),
                                    dict(overlap_qk=True, page_ids_asm=False, num_stages=5),
                                    dict(overlap_qk=True, page_ids_asm=True, num_stages=3),
                                    dict(num_splits=7, merge_warps=1), dict(num_splits=7, merge_warps=2)],
                         ids=["tl-load-ids-64bit", "asm-ids", "asm-ids-64bit", "tl-load-ids-3-stages", "asm-ids-bn32",
                              "tl-load-ids-5-stages", "overlap-qk", "overlap-qk-asm-ids", "merge-1-warp",
                              "merge-2-warps"])
def test_page_id_and_offset_paths_match_float64(causal, page, fields):
    """Every page-id read path, offset width and merge width computes the same attention (ragged, page-straddling)."""
    _check_forced_launch(fields, causal, page, hq=32, seed=3)


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("page", [16, 1])
@pytest.mark.parametrize("fields", [{}, dict(overlap_qk=False), dict(overlap_qk=True)],
                         ids=["default", "no-overlap", "overlap"])
def test_gqa8_tiles_match_float64(causal, page, fields):
    """Qwen3-32B heads (64 q / 8 kv): 128-row tiles of 8 warps, with and without the overlapped score loop."""
    _check_forced_launch(fields, causal, page, hq=64, seed=4)


def _check_forced_launch(fields, causal, page, *, hq, seed):
    """A ragged, page-straddling batch under forced launch fields, against the float64 reference."""
    from dflash_rocm_plugin.ops import launch_config
    if fields.get("page_ids_asm") and torch.version.hip:
        pytest.skip("the inline-PTX page-id read exists on NVIDIA only (never chosen on ROCm)")
    q, k, v, table, sl, qsl = _build([1000, 4111, 16, 2049], page, hq=hq, seed=seed)
    out = torch.full_like(q, float("nan"))
    with launch_config.forced(**fields):
        ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out, max_query_len=16)
    torch.cuda.synchronize()
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=causal)
    assert _rel(out, ref) < 1e-2


def test_cache_beyond_int32_offsets_uses_64bit_addresses():
    """A cache of more than 2^31 elements, read at pages past that offset, still gives the right answer."""
    page, hkv, d = 16, 8, 128
    nb = (2**31) // (page * hkv * d) + 64          # 4 GiB + 64 pages per cache
    k = torch.empty(nb, page, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.empty_like(k)
    g = torch.Generator(device="cuda").manual_seed(5)
    pages = torch.arange(nb - 40, nb, device="cuda", dtype=torch.int32)  # all past 2^31 elements
    k[pages.long()] = torch.randn(40, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v[pages.long()] = torch.randn(40, page, hkv, d, device="cuda", dtype=torch.bfloat16, generator=g)
    table = pages.flip(0).reshape(1, 40).contiguous()
    sl = torch.tensor([40 * page - 5], dtype=torch.int32, device="cuda")
    qsl = torch.tensor([0, 16], dtype=torch.int32, device="cuda")
    q = torch.randn(16, 32, d, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, num_kv_splits=1)
    torch.cuda.synchronize()
    kk, vv = k[pages.long()].cpu(), v[pages.long()].cpu()
    local = torch.arange(40, dtype=torch.int32).flip(0).reshape(1, 40)
    ref = reference.paged_attention(q.cpu(), kk, vv, local, sl.cpu(), qsl.cpu(), causal=True)
    assert _rel(out, ref) < 1e-2


# The target's other calls on the plugin and the launch rules that serve them on Hopper
# (ops/launch_config.py): prefill in 256- and 128-row tiles of 8 warps, chunked prefill over a
# cached prefix, decode in 128-key tiles two deep.  (name: seq_lens, q_len, q heads, kv heads, rows, keys)
OTHER_CALLS = {
    "prefill 1x4K gqa8 (256 rows)": ([4096], 4096, 16, 2, 256, 64),
    "prefill 2x2K (128 rows)": ([2048, 2048], 2048, 8, 2, 128, 64),
    "chunked 2K over 6K (128 rows)": ([8192, 7000], 2048, 8, 2, 128, 64),
    "decode q1 64x2K (128-key tiles)": ([2048 - 7 * i for i in range(64)], 1, 32, 8, 16, 128),
}


@pytest.mark.parametrize("name", sorted(OTHER_CALLS))
def test_the_target_s_other_calls_match_float64(name):
    seq_lens, q_len, hq, hkv, rows, keys = OTHER_CALLS[name]
    q, k, v, table, sl, qsl = _build(seq_lens, 16, q_len=q_len, hq=hq, hkv=hkv)
    launch = ops.describe_launch(num_tokens=q.shape[0], num_seqs=len(seq_lens), num_q_heads=hq, num_kv_heads=hkv,
                                 head_dim=128, page_size=16, kv_capacity=table.shape[1] * 16, causal=True,
                                 max_query_len=q_len, device=q.device).launch
    if torch.version.cuda and torch.cuda.get_device_capability() == (9, 0):
        assert (launch.block_m, launch.block_n) == (rows, keys), launch
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, max_query_len=q_len)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=True)
    assert _rel(out, ref) < 1e-2


@pytest.mark.parametrize("hq,hkv", [(8, 2), (16, 2)], ids=["gqa4", "gqa8"])
def test_prefill_in_reverse_tile_order_matches_float64(hq, hkv):
    """The opt-in ``heavy_first`` launch (query tiles in reverse grid order): prefill and chunked
    prefill rows equal to the grid order's, bit for bit, and to float64."""
    seq_lens, q_lens = [4096, 3000, 1000], [4096, 1000, 1000]
    q, k, v, table, sl, qsl = _build(seq_lens, 16, q_len=max(q_lens), hq=hq, hkv=hkv)
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    q = torch.cat([q[int(qsl[i + 1]) - n:int(qsl[i + 1])] for i, n in enumerate(q_lens)])  # each's last n
    qsl = torch.tensor(starts, dtype=torch.int32, device=q.device)
    outs = []
    for order in (False, True):
        out = torch.full_like(q, float("nan"))
        with ops.forced_launch(heavy_first=order):
            ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, max_query_len=max(q_lens))
        outs.append(out)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1])
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=True)
    assert _rel(outs[1], ref) < 1e-2


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("seq_lens", [[4096] * 8, [32768], [3000, 77, 1500], [2048] * 40],
                         ids=["8x4K", "1x32K", "ragged3", "40x2K"])
def test_512_wide_heads_match_float64(causal, seq_lens):
    """Gemma-4 global layers (16 q / 2 kv heads of 512): the 16-token block spans two query tiles
    of 8 warps (H200: 64 rows, one program per SM) and, at small batch, splits its keys; 40
    sequences run unsplit."""
    q, k, v, table, sl, qsl = _build(seq_lens, 16, hq=16, hkv=2, d=512)
    launch = ops.describe_launch(num_tokens=q.shape[0], num_seqs=len(seq_lens), num_q_heads=16, num_kv_heads=2,
                                 head_dim=512, page_size=16, kv_capacity=table.shape[1] * 16, causal=causal,
                                 max_query_len=16, device=q.device).launch
    assert launch.block_q < 16 and (launch.num_splits > 1) == (len(seq_lens) < 40), launch
    if torch.version.cuda and torch.cuda.get_device_capability() == (9, 0):
        assert (launch.block_m, launch.num_warps) == (64, 8), launch
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out, max_query_len=16, scale=1.0 / 64)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=causal,
                                    scale=1.0 / 64)
    assert _rel(out, ref) < 1e-2


# 256-wide heads (ops/launch_config.py: 64-key tiles on Hopper, q16 blocks of GQA-8 groups in 128
# rows of 8 warps where they fill the GPU): Qwen3-Next / Qwen3.5
# full-attention layers (16 q / 2 kv) and Gemma-4 sliding layers (16 / 8, window 1024, softcap 50).
# (name: seq_lens, q_len, kv heads, window, softcap, causal)
WIDE_256 = {
    "qwen3-next q16 verify 8x4K": ([4096] * 8, 16, 2, None, None, True),
    "qwen3-next q16 draft ragged": ([3000, 77, 1500, 9000], 16, 2, None, None, False),
    "qwen3-next decode 64x2K": ([2048 - 7 * i for i in range(64)], 1, 2, None, None, True),
    "qwen3-next decode 1x16K": ([16000], 1, 2, None, None, True),
    "qwen3-next prefill 1x2K": ([2048], 2048, 2, None, None, True),
    "dflash2 q8 window 2048 over 6K": ([6000, 2500], 8, 2, 2048, None, False),
    "gemma-4 sliding q16 window 1024 softcap": ([5000, 1200, 4096], 16, 8, 1024, 50.0, True),
}


@pytest.mark.parametrize("name", sorted(WIDE_256))
def test_256_wide_heads_match_float64(name):
    seq_lens, q_len, hkv, window, softcap, causal = WIDE_256[name]
    q, k, v, table, sl, qsl = _build(seq_lens, 16, q_len=q_len, hq=16, hkv=hkv, d=256)
    launch = ops.describe_launch(num_tokens=q.shape[0], num_seqs=len(seq_lens), num_q_heads=16, num_kv_heads=hkv,
                                 head_dim=256, page_size=16, kv_capacity=table.shape[1] * 16, causal=causal,
                                 max_query_len=q_len, sliding_window=window, softcap=softcap,
                                 device=q.device).launch
    if torch.version.cuda and torch.cuda.get_device_capability() == (9, 0):
        assert (launch.block_n, launch.num_warps) == (64, 8 if launch.block_m >= 128 else 4), launch
        assert (launch.block_m == 128) == name.startswith("qwen3-next q16"), launch
        if name.endswith("decode 1x16K"):  # 2 programs: more splits than the 32 of one wave elsewhere
            assert launch.num_splits == ops.MAX_KV_SPLITS == 64 and launch.merge_warps == 4, launch
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out, max_query_len=q_len, scale=1.0 / 16,
                        sliding_window=window, softcap=softcap)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all()
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=causal,
                                    scale=1.0 / 16, sliding_window=window, softcap=softcap)
    assert _rel(out, ref) < 1e-2
