"""fp8 KV caches, e4m3fn and e4m3fnuz, under the interpreter.

* Decode: all 256 codes of each format through ``paged_attention`` (one key per sequence, so the
  output is the cached value times v_scale, exactly) equal torch's own conversion, NaN codes too.
* Encode: ``write_kv_cache`` stores byte for byte what ``(x / scale).clamp(-max, max).to(fmt)``
  stores: representable values, every halfway point, out-of-range, NaN, signed zeros.
* Attention over fp8 caches equals the float64 reference of the dequantized values, for both
  formats, per-tensor and per-KV-head scales, causal and not, window, softcap, sinks, split-KV,
  page 1 and 16, fp32/fp16/bf16 queries.
* The format is the dtype: fnuz bytes read as fnuz are right, the same bytes read as fn are not.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops import launch_config
from tests.core.cases import build, check_against_reference

FORMATS = [torch.float8_e4m3fn, torch.float8_e4m3fnuz]
FMT_IDS = ["e4m3fn", "e4m3fnuz"]


def scales(kind, heads, seed=0):
    if kind is None:
        return None
    g = torch.Generator().manual_seed(seed)
    n = 1 if kind == "tensor" else heads
    return (torch.rand(n, generator=g) * 1.5 + 0.25).float()


@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_all_256_codes_decode_exactly(fmt):
    """Sequence s has one key whose V row holds codes [32 s, 32 s + 32): each output row is that
    row times v_scale (softmax over one key is exactly 1)."""
    codes = torch.arange(256, dtype=torch.uint8).reshape(8, 1, 1, 32)
    v_cache = codes.view(fmt)
    k_cache = torch.zeros(8, 1, 1, 32).to(fmt)
    q = torch.randn(8, 2, 32)
    table = torch.arange(8, dtype=torch.int32).reshape(8, 1)
    ones = torch.ones(8, dtype=torch.int32)
    qsl = torch.arange(9, dtype=torch.int32)
    for v_scale in (None, torch.tensor([0.5])):
        out = ops.paged_attention(q, k_cache, v_cache, table, ones, qsl, causal=False, v_scale=v_scale)
        want = v_cache.reshape(8, 32).float() * (1.0 if v_scale is None else 0.5)
        for head in range(2):
            got = out[:, head]
            same = (got == want) | (torch.isnan(got) & torch.isnan(want))
            # (-0.0 comes out as +0.0: the output is a sum that starts at +0.)
            assert same.all(), f"codes {torch.nonzero(~same.flatten()).flatten().tolist()} decode wrongly"


def _edge_values(fmt):
    vals = torch.arange(256, dtype=torch.uint8).view(fmt).float()
    vals = vals[~torch.isnan(vals)].unique().sort().values
    mids = (vals[1:] + vals[:-1]) / 2
    inf = torch.tensor(float("inf"))
    special = torch.tensor([float("nan"), 1e6, -1e6, 0.0, -0.0, float("inf"), float("-inf"), 1e-30, -1e-30])
    return torch.cat([vals, mids, mids.nextafter(inf), mids.nextafter(-inf), special])


@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("scale", [None, "tensor", "head"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_write_kv_cache_matches_torch_byte_for_byte(fmt, scale, dtype):
    heads, dim = 2, 32
    edge = _edge_values(fmt)
    g = torch.Generator().manual_seed(3)
    wild = torch.randn(64 * heads * dim, generator=g) * 300
    values = torch.cat([edge, wild])
    tokens = -(-values.numel() // (heads * dim))
    x = torch.zeros(tokens * heads * dim)
    x[:values.numel()] = values
    key = x.reshape(tokens, heads, dim).to(dtype)
    value = key.flip(0).contiguous()
    k_scale, v_scale = scales(scale, heads, 1), scales(scale, heads, 2)
    page = 4
    blocks = -(-tokens // page) + 2
    slots = torch.randperm(blocks * page, generator=g)[:tokens]
    slots[::9] = -1  # padding tokens: skipped
    got_k = torch.full((blocks, page, heads, dim), 0x55, dtype=torch.uint8).view(fmt)
    got_v = got_k.clone()
    want_k, want_v = got_k.clone(), got_v.clone()
    ops.write_kv_cache(key, value, got_k, got_v, slots, k_scale=k_scale, v_scale=v_scale)
    reference.write_kv_cache(key, value, want_k, want_v, slots, k_scale=k_scale, v_scale=v_scale)
    for got, want in ((got_k, want_k), (got_v, want_v)):
        bad = got.view(torch.uint8) != want.view(torch.uint8)
        assert not bad.any(), f"{int(bad.sum())} bytes differ"


@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
@pytest.mark.parametrize("scale", [None, "tensor", "head"])
@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("block_size", [1, 16])
def test_attention_over_fp8_caches(fmt, scale, causal, block_size):
    case = build([40, 23, 70], [16, 5, 16], num_q_heads=8, num_kv_heads=2, block_size=block_size,
                 cache_dtype=fmt)
    check_against_reference(case, causal=causal, k_scale=scales(scale, 2, 1), v_scale=scales(scale, 2, 2))


@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_fp8_with_window_softcap_sinks_and_splits(fmt):
    case = build([300, 77, 16], [16, 1, 16], num_q_heads=8, num_kv_heads=2, cache_dtype=fmt)
    sinks = torch.randn(8) + 1.0
    for splits in (None, 1, 4):
        check_against_reference(case, causal=True, k_scale=scales("head", 2), v_scale=scales("tensor", 2),
                                sliding_window=50, softcap=8.0, sinks=sinks, num_kv_splits=splits)


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
def test_a_zero_k_scale_weighs_every_visible_key_alike(causal):
    """k_scale 0 makes every score 0: each row averages the V rows it may see, with no NaN from the
    masked keys (0 x -inf) in the window's edge, the diagonal or a split's last tile."""
    case = build([300, 77, 16], [16, 1, 16], num_q_heads=8, num_kv_heads=2, cache_dtype=torch.float8_e4m3fn)
    for k_scale in (torch.tensor([0.0]), torch.tensor([0.0, 0.7])):
        for splits in (1, 4):
            out = check_against_reference(case, causal=causal, k_scale=k_scale, v_scale=scales("tensor", 2),
                                          sliding_window=50, num_kv_splits=splits)
            assert not torch.isnan(out[:int(case.query_start_loc[-1])]).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_fp8_caches_with_half_precision_queries(dtype, fmt):
    case = build([40, 9], [16, 3], dtype=dtype, cache_dtype=fmt)
    check_against_reference(case, causal=False, k_scale=scales("tensor", 2), v_scale=scales("head", 2))


def test_fnuz_bytes_are_not_read_as_fn():
    """The same bytes as e4m3fnuz and as e4m3fn are different values (a factor of 2, other NaN
    codes): the output follows the dtype the bytes are labelled with."""
    case = build([40, 9], [16, 3], cache_dtype=torch.float8_e4m3fnuz)
    as_fnuz = check_against_reference(case, causal=False)
    case.k_cache, case.v_cache = case.k_cache.view(torch.float8_e4m3fn), case.v_cache.view(torch.float8_e4m3fn)
    as_fn = ops.paged_attention(*case.args(), causal=False)
    valid = int(case.query_start_loc[-1])
    assert (as_fn[:valid] - as_fnuz[:valid]).abs().max() > 0.1


def test_write_then_attend_round_trip():
    """What write_kv_cache stores is what paged_attention reads: the DFlash draft's projected
    context K/V written into an fp8 cache and attended non-causally."""
    heads, dim, page, n = 2, 32, 16, 40
    g = torch.Generator().manual_seed(7)
    key, value = torch.randn(n, heads, dim, generator=g), torch.randn(n, heads, dim, generator=g)
    k_scale, v_scale = torch.tensor([0.02]), torch.tensor([0.03, 0.05])
    k_cache = torch.zeros(4, page, heads, dim).to(torch.float8_e4m3fn)
    v_cache = k_cache.clone()
    slots = torch.arange(n, dtype=torch.int64) + page  # pages 1..3
    ops.write_kv_cache(key, value, k_cache, v_cache, slots, k_scale=k_scale, v_scale=v_scale)
    q = torch.randn(16, 4, dim, generator=g)
    table = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    sl, qsl = torch.tensor([n], dtype=torch.int32), torch.tensor([0, 16], dtype=torch.int32)
    out = ops.paged_attention(q, k_cache, v_cache, table, sl, qsl, causal=False, k_scale=k_scale, v_scale=v_scale)
    want = reference.paged_attention(q, k_cache, v_cache, table, sl, qsl, causal=False, k_scale=k_scale,
                                     v_scale=v_scale)
    assert (out.double() - want).abs().max() <= 2e-5
    exact = reference.paged_attention(q, key[None], value[None], torch.tensor([[0]], dtype=torch.int32), sl, qsl,
                                      causal=False)
    assert (out.double() - exact).abs().max() < 0.1  # fp8 rounding: close to the unquantized answer


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_fp8_batches(data):
    num_seqs = data.draw(st.integers(1, 3))
    seq_lens = [data.draw(st.integers(1, 80)) for _ in range(num_seqs)]
    q_lens = [data.draw(st.integers(1, min(s, 16))) for s in seq_lens]
    kv_heads, group = data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 4]))
    fmt = data.draw(st.sampled_from(FORMATS))
    case = build(seq_lens, q_lens, num_q_heads=kv_heads * group, num_kv_heads=kv_heads, cache_dtype=fmt,
                 block_size=data.draw(st.sampled_from([1, 5, 16])), seed=data.draw(st.integers(0, 999)))
    check_against_reference(case, causal=data.draw(st.booleans()),
                            k_scale=scales(data.draw(st.sampled_from([None, "tensor", "head"])), kv_heads, 1),
                            v_scale=scales(data.draw(st.sampled_from([None, "tensor", "head"])), kv_heads, 2),
                            num_kv_splits=data.draw(st.sampled_from([None, 1, 3])))


@pytest.mark.parametrize("fmt", FORMATS, ids=FMT_IDS)
def test_fp8_dots_are_never_used_where_the_cache_is_decoded_from_bytes(fmt):
    """``fp8_dots`` needs the GPU's own conversion of the cache's format; under the interpreter (as
    on a GPU without it) the cache is decoded from bytes and the forced field changes nothing."""
    from dflash_rocm_plugin.ops import launch_config
    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    case = build([40, 9], [16, 3], dtype=torch.float16, cache_dtype=fmt)
    plain = ops.paged_attention(*case.args(), causal=True)
    with launch_config.forced(fp8_dots="qk_pv"):
        forced = ops.paged_attention(*case.args(), causal=True)
        q, k, v, table, sl, qsl = case.args()
        call = AttentionCall(q, k, v, table, sl, qsl, torch.empty_like(q), causal=True, scale=0.1, window=0,
                             softcap=0.0, max_query_len=None, num_kv_splits=None, workspace=None)
        prepared = triton_backend.Launch(call)
    assert prepared.cfg.fp8_dots == "qk_pv" and prepared.constexprs["FP8_DOTS"] == 0 and prepared.soft
    assert not prepared.constexprs["FP8_QK"]
    assert torch.equal(plain, forced)


@pytest.mark.parametrize("mode,qk,split,pv,fp16", [("none", 0, False, 0, True), ("qk", 1, False, 0, True),
                                                   ("qk_split", 1, True, 0, True), ("pv", 0, False, 1, True),
                                                   ("qk_pv", 1, False, 1, False),
                                                   ("qk_pv_split", 1, True, 2, False)])
@pytest.mark.parametrize("arch,fmt,smem,units", [("sm_90", torch.float8_e4m3fn, 227 * 1024, 132),
                                                 ("gfx942", torch.float8_e4m3fnuz, 64 * 1024, 304)])
def test_each_fp8_dots_mode_switches_its_own_dots(monkeypatch, mode, qk, split, pv, fp16, arch, fmt, smem, units):
    """On a GPU that converts the cache's format itself, ``fp8_dots`` names the dots that take fp8
    operands: "qk" quantizes q (FP8_QK) and keeps P V in fp16, "qk_split" splits q into two fp8 parts
    (FP8_QK and QK_SPLIT), "pv" scales P into V's format (FP8_DOTS 1), "qk_pv" both, "qk_pv_split" q and P
    each as two parts (FP8_DOTS 2, whatever the format: e4m3fnuz's own code is 2 too); with bf16 queries
    whatever stays unquantized dots in fp16."""
    from dflash_rocm_plugin.ops import launch_config
    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    from tests.core.cases import pin_gpu
    pin_gpu(monkeypatch, arch, smem, units)
    case = build([40, 9], [16, 3], dtype=torch.bfloat16, cache_dtype=fmt)
    q, k, v, table, sl, qsl = case.args()
    call = AttentionCall(q, k, v, table, sl, qsl, torch.empty_like(q), causal=True, scale=0.1, window=0,
                         softcap=0.0, max_query_len=None, num_kv_splits=None, workspace=None)
    with launch_config.forced(fp8_dots=mode):
        if mode == "qk_pv_split" and arch.startswith("sm_"):  # non-finite rows on Hopper: refused there
            with pytest.raises(ValueError, match="fp8_dots='qk_pv_split'.*NVIDIA.*choose one of"):
                triton_backend.Launch(call)
            return
        c = triton_backend.Launch(call).constexprs
    code = qk * triton_backend.FP8_CODES[fmt]  # Q K^T's operands take the cache's format by its code
    assert (c["FP8_QK"], c["QK_SPLIT"], c["FP8_DOTS"], c["FP16_DOTS"], c["SOFT_FP8"]) == (code, split, pv, fp16, 0)
    if mode != "none":
        assert c["EDGE_N"] >= 32  # a window's edge tiles are fp8 dot operands too


@pytest.mark.parametrize("policy,draft,verify", [(None, "qk_split", "qk_split"), ("draft", "qk", "qk_split"),
                                                 ("all", "qk", "qk"), ("off", "qk_split", "qk_split"),
                                                 (" ALL ", "qk", "qk")])
@pytest.mark.parametrize("arch,fmt", [("sm_90", torch.float8_e4m3fn), ("gfx942", torch.float8_e4m3fnuz),
                                      ("gfx950", torch.float8_e4m3fn)])
def test_fp8_qk_policy_chooses_which_calls_dot_q_k_in_fp8(monkeypatch, policy, draft, verify, arch, fmt):
    """Over a cache in the GPU's own fp8 format Q K^T dots in fp8: by default with q as two fp8 parts
    ("qk_split"; "qk_pv_split", P too, only where tuned), and with q rounded into fp8 ("qk") for
    the calls ``DFLASH_ROCM_FP8_QK`` names: unset ("off") none; "draft", the non-causal calls (a DFlash
    draft's block), not the causal (target) calls; "all", both.  The chosen mode reaches the kernel (FP8_QK,
    QK_SPLIT, FP8_DOTS) and the launch description; tiles under 64 rows keep 16-bit dots."""
    from dflash_rocm_plugin.ops import kv_cache, launch_config
    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    from tests.core.cases import pin_gpu
    pin_gpu(monkeypatch, arch, 227 * 1024 if arch.startswith("sm") else 64 * 1024, 132)
    if policy is None:
        monkeypatch.delenv(ops.FP8_QK_ENV, raising=False)
    else:
        monkeypatch.setenv(ops.FP8_QK_ENV, policy)
    ops.fp8_qk_policy.cache_clear()
    try:
        case = build([40, 9], [16, 3], num_q_heads=8, num_kv_heads=2, dtype=torch.bfloat16, cache_dtype=fmt)
        q, k, v, table, sl, qsl = case.args()
        for causal, expected in ((False, draft), (True, verify)):
            call = AttentionCall(q, k, v, table, sl, qsl, torch.empty_like(q), causal=causal, scale=0.1, window=0,
                                 softcap=0.0, max_query_len=16, num_kv_splits=None, workspace=None)
            prepared = triton_backend.Launch(call)
            assert prepared.cfg.fp8_dots == expected
            assert prepared.constexprs["FP8_QK"] == kv_cache.FP8_CODES[fmt]
            assert prepared.constexprs["QK_SPLIT"] == (expected != "qk")
            # P V keeps its fp16 dot, or takes P as two fp8 parts
            assert prepared.constexprs["FP8_DOTS"] == (2 if expected == "qk_pv_split" else 0)
            if arch.startswith("gfx94"):  # 32x32 MFMAs: the converted V tile's registers
                assert prepared.cfg.mfma_nonkdim == 0
            described = ops.describe_launch(num_tokens=19, num_seqs=2, num_q_heads=8, num_kv_heads=2, head_dim=32,
                                            page_size=16, kv_capacity=64, causal=causal, dtype=torch.bfloat16,
                                            kv_cache_dtype=fmt, max_query_len=16)
            assert described.launch.block_m == 64 and described.launch.fp8_dots == expected
            # Tiles under 64 rows keep fp16 dots: a q8 block of four-query groups (32 rows), a q1 decode.
            for tokens, rows in ((16, 8), (2, 1)):
                short = ops.describe_launch(num_tokens=tokens, num_seqs=2, num_q_heads=8, num_kv_heads=2, head_dim=32,
                                            page_size=16, kv_capacity=64, causal=causal, dtype=torch.bfloat16,
                                            kv_cache_dtype=fmt, max_query_len=rows)
                assert short.launch.block_m < 64 and short.launch.fp8_dots == "none"
            # The other format is decoded from its bytes, and float32 queries keep exact dots: never fp8 dots.
            other = torch.float8_e4m3fnuz if fmt == torch.float8_e4m3fn else torch.float8_e4m3fn
            for dtype, cache in ((torch.bfloat16, other), (torch.float32, fmt), (torch.bfloat16, torch.bfloat16)):
                assert launch_config.choose(
                    num_tokens=19, num_seqs=2, num_kv_heads=2, group=4, head_dim=32, kv_capacity=64,
                    max_query_len=16, num_splits=None, device_index=0, page_size=16, dtype=dtype,
                    kv_cache_dtype=cache, causal=causal).fp8_dots == "none"
    finally:
        ops.fp8_qk_policy.cache_clear()


def test_the_fp8_dots_an_architecture_takes_are_answered_away_from_it(monkeypatch):
    """Given ``arch``, ``fp8_dots_choices`` answers for a GPU of that architecture (what ``dflash-rocm tune``'s
    plan counts on another machine), in its own fp8 format only; without it, for the device, and the
    interpreter here takes none."""
    monkeypatch.setenv(ops.FP8_QK_ENV, "draft")
    ops.fp8_qk_policy.cache_clear()
    try:
        def choices(arch, fmt=None, dtype=torch.bfloat16, causal=False):
            fmt = fmt or ops.native_fp8_dtype(arch)
            return ops.fp8_dots_choices(kv_cache_dtype=fmt, dtype=dtype, causal=causal, arch=arch)
        assert choices("sm_90") == choices("gfx950") == ("none", "qk_split", "qk")
        assert choices("gfx942") == ("none", "qk_split", "qk_pv_split", "qk")
        assert choices("sm_90", causal=True) == ("none", "qk_split")
        assert choices("gfx942", torch.float8_e4m3fn) == choices("gfx950", torch.float8_e4m3fnuz) == ("none",)
        assert choices("sm_80") == choices("sm_90", dtype=torch.float32) == ("none",)
        assert ops.fp8_dots_choices(kv_cache_dtype=torch.float8_e4m3fn, dtype=torch.bfloat16, causal=False) == ("none",)
    finally:
        ops.fp8_qk_policy.cache_clear()


def test_each_fp8_dots_mode_an_architecture_refuses_is_said_in_one_place():
    """``fp8_dots_problem`` is the one answer to which forced modes a GPU refuses: P as two fp8 parts on
    NVIDIA only (every ``sm_``), never another mode, and never a mode the choices then offer there."""
    for arch in ("sm_89", "sm_90", "sm_100", "gfx942", "gfx950", "gfx1100"):
        for mode in launch_config.FP8_DOTS_MODES:
            problem = ops.fp8_dots_problem(mode, arch)
            refused = mode == "qk_pv_split" and arch.startswith("sm_")
            assert (problem is not None) == refused, (mode, arch, problem)
            if refused:
                assert "fp8_dots='qk_pv_split'" in problem and arch in problem
                offered = ops.fp8_dots_choices(kv_cache_dtype=ops.native_fp8_dtype(arch), dtype=torch.bfloat16,
                                               causal=False, arch=arch)
                assert mode not in offered


@pytest.mark.parametrize("policy", ["off", "all"])
def test_gpus_without_fp8_dots_convert_the_tiles(monkeypatch, policy):
    """A GPU whose matrix units take no fp8 operands (Ampere, sm_80) dots the converted tiles in 16 bits,
    whatever the switch says."""
    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    from tests.core.cases import pin_gpu
    pin_gpu(monkeypatch, "sm_80", 163 * 1024, 108)
    monkeypatch.setenv(ops.FP8_QK_ENV, policy)
    ops.fp8_qk_policy.cache_clear()
    try:
        assert not ops.has_fp8_dots("sm_80") and ops.has_fp8_dots("sm_89") and ops.has_fp8_dots("sm_120")
        assert ops.fp8_dots_choices(kv_cache_dtype=torch.float8_e4m3fn, dtype=torch.bfloat16, causal=False) == ("none",)
        case = build([40, 9], [16, 3], num_q_heads=8, num_kv_heads=2, dtype=torch.bfloat16,
                     cache_dtype=torch.float8_e4m3fn)
        q, k, v, table, sl, qsl = case.args()
        for causal in (False, True):
            call = AttentionCall(q, k, v, table, sl, qsl, torch.empty_like(q), causal=causal, scale=0.1, window=0,
                                 softcap=0.0, max_query_len=16, num_kv_splits=None, workspace=None)
            prepared = triton_backend.Launch(call)
            assert prepared.cfg.block_m == 64 and prepared.cfg.fp8_dots == "none"
            assert (prepared.constexprs["FP8_QK"], prepared.constexprs["FP16_DOTS"]) == (0, True)
    finally:
        ops.fp8_qk_policy.cache_clear()


def test_fp8_qk_policy_is_never_used_under_the_interpreter(monkeypatch):
    """The interpreter decodes every fp8 format from its bytes, so no call there is described as dotting
    in fp8, whatever the switch says."""
    from dflash_rocm_plugin.ops import launch_config
    monkeypatch.setenv(ops.FP8_QK_ENV, "all")
    ops.fp8_qk_policy.cache_clear()
    try:
        for causal in (False, True):
            described = ops.describe_launch(num_tokens=19, num_seqs=2, num_q_heads=8, num_kv_heads=2, head_dim=32,
                                            page_size=16, kv_capacity=64, causal=causal, dtype=torch.bfloat16,
                                            kv_cache_dtype=torch.float8_e4m3fn, max_query_len=16)
            assert described.launch.fp8_dots == "none"
    finally:
        ops.fp8_qk_policy.cache_clear()


def test_a_bad_fp8_qk_switch_is_refused_at_validation_naming_its_values(monkeypatch):
    """A value the switch does not know refuses every layer over an fp8 cache at the host's validation
    (``supports``), naming the variable and its values, and a call over such a cache before any launch;
    layers over a 16-bit cache do not read it."""
    from dflash_rocm_plugin.ops import call_cache, launch_config
    monkeypatch.setenv(ops.FP8_QK_ENV, "target")
    ops.fp8_qk_policy.cache_clear()
    call_cache.clear()  # a call seen before would skip its checks
    try:
        why = ops.supports(ops.AttentionSpec(head_dim=128, dtype=torch.bfloat16, kv_cache_dtype=torch.float8_e4m3fn))
        assert why is not None and "DFLASH_ROCM_FP8_QK='target'" in why and "off, draft, all" in why
        assert ops.supports(ops.AttentionSpec(head_dim=128, dtype=torch.bfloat16)) is None
        case = build([40, 9], [16, 3], dtype=torch.float16, cache_dtype=torch.float8_e4m3fn)
        out = torch.full_like(case.q, float("nan"))
        with pytest.raises(ValueError, match="DFLASH_ROCM_FP8_QK"):
            ops.paged_attention(*case.args(), causal=False, out=out)
        assert torch.isnan(out).all()  # nothing launched
    finally:
        ops.fp8_qk_policy.cache_clear()


@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e4m3fnuz], ids=["e4m3fn", "e4m3fnuz"])
def test_a_bf16_query_is_two_fp8_parts_exactly(fmt):
    """Why ``fp8_dots="qk_split"`` keeps the fp16 dots' error: scaled by a power of two into the format's range,
    every bf16 value is the sum of its nearest e4m3 value and the e4m3 value of the remainder, exactly from a
    quarter (e4m3fn; e4m3fnuz: an eighth) up, within half the smallest subnormal below -- in the kernel's
    scaling (largest element over half the format's maximum) within 2^-17 of the program's largest element."""
    from dflash_rocm_plugin.ops import support
    largest = support.FP8_MAX[fmt]
    x = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    x = x[torch.isfinite(x) & (x.abs() <= largest)]
    hi = x.to(fmt).float()
    lo = (x - hi).to(fmt).float()
    err = (hi + lo - x).abs()
    exact_from = 0.25 if fmt == torch.float8_e4m3fn else 0.125
    assert err[x.abs() >= exact_from].max() == 0
    subnormal = 2.0 ** (-9 if fmt == torch.float8_e4m3fn else -10)
    assert err.max() <= subnormal / 2
    assert subnormal / 2 / (largest / 2) < 2.0 ** -17


@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_p_as_two_fp8_parts_keeps_a_bf16_p(fmt):
    """Why ``fp8_dots="qk_pv_split"`` does not round P to e4m3's 3 mantissa bits as "pv" does: P (at most 1)
    times the kernel's P8_SCALE is the sum of two e4m3 values within 2^-9 relative (half a bf16 P's
    rounding) wherever p is at least 2^-8, and within 2^-17 absolute below, in both formats.  (fp16 P,
    the default's, rounds within 2^-12.)"""
    from dflash_rocm_plugin.kernels import paged_attention
    from dflash_rocm_plugin.ops import support
    scale = float(paged_attention.P8_SCALE.value)
    assert math.frexp(scale)[0] == 0.5 and scale <= support.FP8_MAX[fmt]  # a power of two the format holds
    p = torch.exp2(-torch.linspace(0, 30, 200_001, dtype=torch.float64)).float()  # exponents a softmax makes
    p8 = p * scale
    hi = p8.to(fmt).float()
    lo = (p8 - hi).to(fmt).float()
    err = ((hi + lo) / scale - p).double().abs()
    bf16_err = (p.to(torch.bfloat16).float() - p).double().abs()
    big = p >= 2.0 ** -8
    assert (err[big] <= p[big].double() * 2.0 ** -9).all() and err[big].max() <= bf16_err[big].max()
    assert err[~big].max() <= 2.0 ** -17
    rounded = (p8.to(fmt).float() / scale - p).double().abs()
    assert rounded[big].max() > 16 * err[big].max()  # what "pv"'s one rounded part costs


@pytest.mark.parametrize("fmt", [torch.float8_e4m3fn, torch.float8_e4m3fnuz])
def test_fp8_dot_modes_run_the_kernel_close_to_the_reference(monkeypatch, fmt):
    """The kernel's fp8 dot paths themselves (the interpreter multiplies fp8 operands too; the launch is
    prepared as on a GPU converting ``fmt``, whose tiles then stay fp8): bf16 queries, causal and not,
    against the float64 reference of the dequantized cache.  q in two parts is the 16-bit dots' error; q and P
    in two parts within 1.6x of it (P keeps 8 significant bits instead of fp16's 11, which shows over few
    keys); q or P rounded into fp8 (3 mantissa bits) four times and more."""
    from dflash_rocm_plugin.ops import _runtime, launch_config
    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    case = build([200, 90], [16, 5], num_q_heads=8, num_kv_heads=2, head_dim=32, dtype=torch.bfloat16,
                 cache_dtype=fmt, seed=3)
    q, k, v, table, sl, qsl = case.args()
    k_scale, v_scale = torch.tensor([0.5]), torch.tensor([2.0])
    for causal in (False, True):
        ref = reference.paged_attention(q, k, v, table, sl, qsl, causal=causal, scale=0.1, k_scale=k_scale,
                                        v_scale=v_scale).double()
        err = {}
        for mode in ("none", "qk_split", "qk_pv_split", "qk", "pv"):
            out = torch.full_like(q, float("nan"))
            call = AttentionCall(q, k, v, table, sl, qsl, out, causal=causal, scale=0.1, window=0, softcap=0.0,
                                 max_query_len=16, num_kv_splits=None, workspace=None, k_scale=k_scale,
                                 v_scale=v_scale)
            with monkeypatch.context() as m, launch_config.forced(fp8_dots=mode, page_ids_asm=False, num_stages=1):
                m.setattr(triton_backend, "soft_fp8", lambda dtype, index: 0)
                m.setattr(_runtime, "interpreting", lambda: False)
                prepared = triton_backend.Launch(call)
            assert prepared.constexprs["FP8_DOTS"] == {"qk_pv_split": 2, "pv": 1}.get(mode, 0)
            triton_backend.launch(prepared, q, k, v, out, table, sl, qsl, None, k_scale, v_scale, None)
            rows = int(qsl[-1])
            assert torch.isnan(out[rows:]).all()  # padding rows untouched
            err[mode] = ((out[:rows].double() - ref[:rows]).norm() / ref[:rows].norm()).item()
        assert err["none"] < 5e-3 and err["qk_split"] < 1.1 * err["none"], err
        assert err["qk_pv_split"] < 1.6 * err["none"], err
        assert min(err["qk"], err["pv"]) > 4 * err["qk_split"] and max(err["qk"], err["pv"]) < 0.15, err


@pytest.mark.parametrize("policy", ["off", "all"])
def test_deep_fp8_loops_with_q_in_two_parts_read_page_ids_inline(monkeypatch, policy):
    """On NVIDIA an unsplit page-16 loop over an fp8 cache whose Q K^T takes q in two parts reads its page
    ids inline (the 5-stage pipeline keeps only the K/V gather); not with q rounded into fp8 (untimed), in
    128-row tiles (they lost), over a 16-bit cache, on AMD, nor where a launch field is forced."""
    from dflash_rocm_plugin.ops import launch_config
    from tests.core.cases import pin_gpu
    monkeypatch.setenv(ops.FP8_QK_ENV, policy)
    ops.fp8_qk_policy.cache_clear()

    def choose(arch, group=4, cache=torch.float8_e4m3fn):
        pin_gpu(monkeypatch, arch, 227 * 1024 if arch.startswith("sm") else 160 * 1024, 132)
        return launch_config.choose(num_tokens=32 * 16, num_seqs=32, num_kv_heads=8, group=group, head_dim=128,
                                    kv_capacity=16384, max_query_len=16, num_splits=None, device_index=0,
                                    page_size=16, dtype=torch.bfloat16, kv_cache_dtype=cache, causal=True)
    try:
        split = choose("sm_90")
        assert (split.fp8_dots, split.num_splits, split.num_stages) == ("qk_split" if policy == "off" else "qk", 1, 5)
        assert split.page_ids_asm == (policy == "off")
        assert not choose("sm_90", cache=torch.bfloat16).page_ids_asm
        tall = choose("sm_90", group=8)
        assert tall.block_m == 128 and tall.fp8_dots in ("qk_split", "qk") and not tall.page_ids_asm
        assert not choose("gfx950").page_ids_asm
        with launch_config.forced(page_ids_asm=False):
            assert not choose("sm_90").page_ids_asm
    finally:
        ops.fp8_qk_policy.cache_clear()
