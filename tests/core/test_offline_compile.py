"""Every launch the plugin picks for MI300X (gfx942), MI355X (gfx950) and H100/H200 (sm_90) compiles
for that GPU, here, without one, and fits its shared memory (LDS).

The launch comes from ops.launch_config.choose with the device facts pinned, exactly as
ops.paged_attention would ask for it on that GPU; tests/core/offline_compile.py builds it.
"""

import dataclasses
import itertools
import re

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import extend_launch, launch_config
from tests.core.cases import pin_gpu
from tests.core import offline_compile

DEVICES = {  # arch: (compute units / SMs, shared memory a block may use)
    "gfx942": (304, 64 * 1024),
    "gfx950": (256, 160 * 1024),
    "sm_90": (132, 227 * 1024),
}

# (name, q heads, kv heads, head_dim, batch, context, page, causal, extras)
CASES = [
    ("qwen3-8b draft 32x16K p16", 32, 8, 128, 32, 16384, 16, False, {}),
    ("qwen3-8b verify 32x16K p1", 32, 8, 128, 32, 16384, 1, True, {}),
    ("qwen3-8b draft 8x4K p1 split", 32, 8, 128, 8, 4096, 1, False, {}),
    ("qwen3-8b verify 64x1K p16", 32, 8, 128, 64, 1024, 16, True, {}),
    ("qwen3-32b verify 32x16K p1", 64, 8, 128, 32, 16384, 1, True, {}),
    ("qwen3-32b draft 8x4K p16 split", 64, 8, 128, 8, 4096, 16, False, {}),
    ("d256 window softcap fp16 p16", 16, 8, 256, 8, 8192, 16, True, dict(window=4096, softcap=30.0, dtype="fp16")),
    ("d64 gqa2 p1", 16, 8, 64, 16, 4096, 1, False, {}),
    # fp8 caches in each GPU's native format (MI300X: e4m3fnuz; MI355X, H100/H200: e4m3fn), scaled.
    ("qwen3-8b draft 32x16K p16 fp8", 32, 8, 128, 32, 16384, 16, False, dict(cache="native")),
    ("qwen3-8b verify 8x4K p1 fp8 split", 32, 8, 128, 8, 4096, 1, True, dict(cache="native")),
    # ... and the other format, decoded from bytes where the GPU has no conversion for it.
    ("qwen3-8b draft 32x16K p16 fp8 other format", 32, 8, 128, 32, 16384, 16, False, dict(cache="other")),
    # gpt-oss-120b heads: sinks, window-128 layers, head_dim 64, GQA 8.
    ("gpt-oss-120b draft 32x16K p16 sinks window", 64, 8, 64, 32, 16384, 16, False, dict(window=128, sinks=True)),
    ("gpt-oss-120b verify 8x4K p16 sinks split", 64, 8, 64, 8, 4096, 16, True, dict(sinks=True)),
    # Gemma-4: global layers head_dim 512 (GQA 8), sliding layers 256 with window 512.
    ("gemma-4 global d512 draft 8x4K p16", 16, 2, 512, 8, 4096, 16, False, {}),
    ("gemma-4 global d512 verify 1x32K p16 split", 16, 2, 512, 1, 32768, 16, True, {}),
    ("gemma-4 sliding d256 verify 32x8K p16 window", 16, 4, 256, 32, 8192, 16, True, dict(window=512)),
    # Qwen3-Next / Qwen3.5 full-attention layers: 256-wide heads, GQA 8 (on sm_90 the q16 block in 128 rows).
    ("qwen3-next d256 verify 32x16K p16", 16, 2, 256, 32, 16384, 16, True, {}),
    ("qwen3-next d256 draft 1x32K p16 split", 16, 2, 256, 1, 32768, 16, False, {}),
    ("qwen3-next d256 verify 32x16K p16 fp8", 16, 2, 256, 32, 16384, 16, True, dict(cache="native")),
    ("qwen3-next d256 prefill 1x4K p16", 16, 2, 256, 1, 4096, 16, True, dict(q_len=4096)),
    # The target's other attention on the plugin: decode (q 1), prefill (q = context), chunked prefill.
    ("qwen3-8b decode 64x8K p16", 32, 8, 128, 64, 8192, 16, True, dict(q_len=1)),
    ("qwen3-8b decode 1x32K p16 split", 32, 8, 128, 1, 32768, 16, True, dict(q_len=1)),
    ("qwen3-8b prefill 1x8K p16", 32, 8, 128, 1, 8192, 16, True, dict(q_len=8192)),
    ("qwen3-8b chunked prefill 4x2K over 8K p16", 32, 8, 128, 4, 8192, 16, True, dict(q_len=2048)),
    ("qwen3-32b prefill 4x4K p16", 64, 8, 128, 4, 4096, 16, True, dict(q_len=4096)),
]
NATIVE_FP8 = {"gfx942": "fp8-fnuz", "gfx950": "fp8-fn", "sm_90": "fp8-fn"}
OTHER_FP8 = {"gfx942": "u8-fn", "gfx950": "u8-fnuz", "sm_90": "u8-fnuz"}


def _cache_dtype(arch, extras):
    """The torch dtype of the case's cache as the launch choice sees it (None: the model dtype)."""
    cache = extras.get("cache")
    if cache is None:
        return None
    native = ops.native_fp8_dtype(arch)
    return native if cache == "native" else next(d for d in ops.FP8_KV_CACHE_DTYPES if d != native)


def _extras(arch, extras):
    """The case's keyword arguments of ``offline_compile.attention`` (its q_len sets num_tokens)."""
    extras = {k: v for k, v in extras.items() if k != "q_len"}
    cache = extras.get("cache")
    if cache is None:
        return extras
    return {**extras, "cache": (NATIVE_FP8 if cache == "native" else OTHER_FP8)[arch]}


def _launch(monkeypatch, arch, hq, hkv, d, batch, context, page, q_len=16, kv_cache_dtype=None, dtype=None,
            causal=None):
    """The launch ``choose`` makes on ``arch``; given the query dtype and ``causal``, as a call makes it (the
    tuned files in force and the fp8 Q K^T rule included)."""
    sms, smem = DEVICES[arch]
    with monkeypatch.context() as m:
        pin_gpu(m, arch, smem, sms)
        return launch_config.choose(num_tokens=batch * q_len, num_seqs=batch, num_kv_heads=hkv, group=hq // hkv,
                                    head_dim=d, kv_capacity=context, max_query_len=q_len, num_splits=None,
                                    device_index=0, page_size=page, kv_cache_dtype=kv_cache_dtype, dtype=dtype,
                                    causal=causal)


@pytest.fixture(scope="module")
def compiled():
    """Every (arch, case) compiled in one child process: {(arch, name): (launch, result)}, the launches chosen
    with ``DFLASH_ROCM_FP8_QK=draft`` (the fp8 draft's opt-in launch; every other case is as by default)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(ops.FP8_QK_ENV, "draft")
    ops.fp8_qk_policy.cache_clear()
    jobs, keys = [], []
    for arch in sorted(DEVICES):
        for name, hq, hkv, d, batch, context, page, causal, extras in CASES:
            q_len = extras.get("q_len", 16)
            dtype = torch.float16 if extras.get("dtype") == "fp16" else torch.bfloat16
            cfg = _launch(mp, arch, hq, hkv, d, batch, context, page, q_len, _cache_dtype(arch, extras), dtype, causal)
            shape = dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page, causal=causal,
                         num_tokens=batch * q_len, num_seqs=batch, table_width=context // page,
                         **_extras(arch, extras))
            jobs.append(dict(arch=arch, launch=dataclasses.asdict(cfg), shape=shape))
            keys.append((arch, name))
        for fp8 in (0, 1, 2):
            jobs.append(dict(kernel="kv_write", arch=arch, launch={},
                             shape=dict(num_kv_heads=8, head_dim=128, fp8=fp8)))
            keys.append((arch, f"kv write fp8={fp8}"))
    mp.undo()
    ops.fp8_qk_policy.cache_clear()
    results = offline_compile.run(jobs)
    return {k: (job["launch"], r) for k, job, r in zip(keys, jobs, results)}


@pytest.mark.parametrize("arch", sorted(DEVICES))
@pytest.mark.parametrize("fp8", [0, 1, 2], ids=["bf16", "e4m3fn", "e4m3fnuz"])
def test_kv_write_compiles_for_the_gpu(compiled, arch, fp8):
    _, result = compiled[(arch, f"kv write fp8={fp8}")]
    assert not isinstance(result, dict), result.get("error")


@pytest.mark.parametrize("arch", sorted(DEVICES))
@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_chosen_launch_compiles_for_the_gpu(compiled, arch, name):
    launch, result = compiled[(arch, name)]
    assert not isinstance(result, dict), result.get("error")
    if arch.startswith("gfx"):
        assert not launch["page_ids_asm"], "inline PTX on an AMD target"
    for kernel in result:
        assert kernel["shared"] <= offline_compile.SHARED_LIMIT[arch], f"{kernel['shared']} B of shared memory"
    if arch.startswith("gfx") and name.startswith(("qwen3-8b", "gemma-4 global")):
        # The DFlash tile of the models, and the 8-warp tiles of 512-wide heads, stay in
        # registers on both AMD generations, two waves per SIMD at most 256 per lane.
        assert result[0]["vgpr_spills"] == 0
        if launch["num_warps"] == 8:
            assert result[0]["registers"] <= 256


@pytest.mark.parametrize("arch", sorted(DEVICES))
def test_the_chosen_fp8_launches_dot_q_k_in_fp8(compiled, arch):
    """Over a cache in the GPU's own fp8 format Q K^T dots in fp8 (``launch_config.fp8_dots_rule``): under
    ``DFLASH_ROCM_FP8_QK=draft`` the draft's block with q rounded into fp8, the verify blocks with q as two
    fp8 parts; the other format (decoded from its bytes) and 16-bit caches keep 16-bit dots.  Each compiled
    above."""
    chosen = {name: compiled[(arch, name)][0]["fp8_dots"] for name, *_ in CASES}
    assert chosen.pop("qwen3-8b draft 32x16K p16 fp8") == "qk"
    assert chosen.pop("qwen3-8b verify 8x4K p1 fp8 split") == "qk_split"
    assert chosen.pop("qwen3-next d256 verify 32x16K p16 fp8") == "qk_split"
    assert set(chosen.values()) == {"none"}


def _defs(ir: str) -> dict:
    """SSA value -> the text of the op that defines it (one op per line in Triton's IR dumps)."""
    out = {}
    for line in ir.splitlines():
        m = re.match(r"\s*(%[\w.]+)(?::\d+)? = (.*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _feeds(defs: dict, value: str, op: str, depth: int = 8) -> bool:
    """Whether ``op`` lies on the chain of ops that computes ``value``."""
    text = defs.get(value, "")
    if op in text:
        return True
    return depth > 0 and any(_feeds(defs, v, op, depth - 1) for v in re.findall(r"%[\w.]+", text.split(":")[0]))


@pytest.mark.parametrize("splits, causal", [(4, False), (1, True)], ids=["split-draft", "unsplit-verify"])
def test_inline_page_id_reads_stay_inside_the_sequence(splits, causal):
    """The pipeliner runs the inline-PTX page-id read of the tiles after a loop's last as well
    (only the K/V copies it feeds are masked), so each read's key is clamped to the sequence:
    past the block table's last row there may be no mapped memory (an illegal address on the
    GPU, seen on the H200 in a long test process)."""
    cfg = launch_config.AttentionLaunch(block_q=16, block_m=64, block_n=64, head_dim_pad=128, num_splits=splits,
                                        num_warps=4, num_stages=3, page_ids_asm=True)
    shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=causal, num_tokens=128,
                 num_seqs=8, table_width=256)
    [result] = offline_compile.run([dict(kernel="attention_ttgir", arch="sm_90", launch=dataclasses.asdict(cfg),
                                         shape=shape)])
    assert "ttgir" in result, result.get("error")
    ir = result["ttgir"]
    defs = _defs(ir)
    reads = re.findall(r'tt\.elementwise_inline_asm "ld\.global\.nc\.b32 \$0, \[\$1\];" \{[^}]*\} (%[\w.]+)', ir)
    assert len(reads) >= 4, "expected the pipelined page-id reads of the prologue and the loop"
    for ptr in reads:
        assert _feeds(defs, ptr, "arith.minsi") and _feeds(defs, ptr, "arith.maxsi"), ptr


def test_fp8_dot_launches_compile_for_every_gpu(monkeypatch):
    """The opt-in fp8 launches (``fp8_dots``: Q K^T alone, P V alone, both; ``pv_transposed`` with the
    default fp16 dots) build for each GPU's native fp8 format, draft and verify, split and not, and
    fit its shared memory."""
    jobs = []
    variants = (dict(fp8_dots="qk"), dict(fp8_dots="qk_split"), dict(fp8_dots="pv"), dict(fp8_dots="qk_pv"),
                dict(fp8_dots="qk_pv_split"),
                dict(pv_transposed=True))
    for arch, variant in itertools.product(sorted(DEVICES), variants):
        for hq, batch, context, page, causal in ((32, 32, 16384, 16, False), (32, 8, 4096, 1, True), (64, 8, 4096, 16, True)):
            cfg = dataclasses.replace(_launch(monkeypatch, arch, hq, 8, 128, batch, context, page), **variant)
            jobs.append(dict(arch=arch, launch=dataclasses.asdict(cfg), shape=dict(
                num_q_heads=hq, num_kv_heads=8, head_dim=128, page_size=page, causal=causal, num_tokens=batch * 16,
                num_seqs=batch, table_width=context // page, cache=NATIVE_FP8[arch])))
    for job, result in zip(jobs, offline_compile.run(jobs)):
        assert not isinstance(result, dict), (job["arch"], result.get("error"))
        for kernel in result:
            assert kernel["shared"] <= offline_compile.SHARED_LIMIT[job["arch"]], (job["arch"], kernel["shared"])


def _dot_operand_types(ir: str) -> list[tuple[str, str, str]]:
    """(A, B, result) types of every Hopper warp-group dot in the IR."""
    out = []
    for line in ir.splitlines():
        if "ttng.warp_group_dot " in line:
            sig = re.sub(r"\s*loc\(.*", "", line).rsplit(" : ", 1)[1]
            a, rest = sig.split(" * ", 1)
            b, result = rest.split(" -> ", 1)
            out.append((a, b, result))
    return out


def test_transposed_pv_takes_a_converted_fp8_v_from_registers():
    """What ``pv_transposed`` is for: on Hopper an fp8 V tile converted to fp16 is the B operand of
    P V, which wgmma reads from shared memory, so each tile is stored back there after conversion;
    as O^T = V^T P^T the converted V is the A operand, taken from registers."""
    pv_dots = {}
    for pvt in (False, True):
        cfg = launch_config.AttentionLaunch(block_q=16, block_m=64, block_n=64, head_dim_pad=128, num_splits=1,
                                            num_warps=4, num_stages=5, pv_transposed=pvt)
        shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=True, num_tokens=512,
                     num_seqs=32, table_width=1024, cache="fp8-fn")
        [result] = offline_compile.run([dict(kernel="attention_ttgir", arch="sm_90", launch=dataclasses.asdict(cfg),
                                             shape=shape)])
        assert "ttgir" in result, result.get("error")
        # Q K^T yields 64 x 64 scores (BLOCK_M x BLOCK_N); P V the 64 x 128 output or its transpose.
        pv_dots[pvt] = {d for d in _dot_operand_types(result["ttgir"]) if not d[2].startswith("tensor<64x64x")}
    assert pv_dots[False] and all(b.startswith("!ttg.memdesc<64x128xf16") for _, b, _ in pv_dots[False])
    assert pv_dots[True] and all(a.startswith("tensor<128x64xf16") for a, _, _ in pv_dots[True])


@pytest.mark.parametrize("mode", ["qk", "qk_split"])
def test_fp8_qk_dots_take_k_as_it_was_copied(mode):
    """What ``fp8_dots="qk"`` and "qk_split" are for: q joins the cache's format (split: as two parts, two
    dots per K tile), so Q K^T reads each fp8 K tile from the buffer its copy landed in (Hopper: the
    pipelined shared-memory buffer as wgmma's B operand; MI300X: fp8 MFMAs) instead of converting it
    first, while P V keeps its fp16 dot."""
    cfg = launch_config.AttentionLaunch(block_q=16, block_m=64, block_n=64, head_dim_pad=128, num_splits=1,
                                        num_warps=4, num_stages=5, fp8_dots=mode)
    shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=True, num_tokens=512,
                 num_seqs=32, table_width=1024, cache="fp8-fn")
    amd = dataclasses.replace(cfg, num_stages=1)
    hopper, mi300 = offline_compile.run([
        dict(kernel="attention_ttgir", arch="sm_90", launch=dataclasses.asdict(cfg), shape=shape),
        dict(kernel="attention_asm", arch="gfx942", launch=dataclasses.asdict(amd), shape={**shape, "cache": "fp8-fnuz"})])
    assert "ttgir" in hopper, hopper.get("error")
    dots = _dot_operand_types(hopper["ttgir"])
    qk = [d for d in dots if d[2].startswith("tensor<64x64x")]
    pv = [d for d in dots if d[2].startswith("tensor<64x128x")]
    assert qk and all(a.startswith("tensor<64x128xf8E4M3FN") and b.startswith("!ttg.memdesc<128x64xf8E4M3FN")
                      and "mutable" in b for a, b, _ in qk), qk
    assert len(qk) == len(pv) * (2 if mode == "qk_split" else 1)
    assert pv and all(a.startswith("tensor<64x64xf16") and b.startswith("!ttg.memdesc<64x128xf16")
                      for a, b, _ in pv), pv
    assert "asm" in mi300, mi300.get("error")
    mfma = set(re.findall(r"^\s+(v_mfma\w*)", mi300["asm"], re.M))
    assert mfma == {"v_mfma_f32_32x32x16_fp8_fp8", "v_mfma_f32_32x32x8_f16"}, mfma


def test_gfx942_converts_fp8_tiles_two_values_per_instruction():
    """MI300X converts e4m3fnuz only to f32 (pairs); the cast to fp16 goes on through the packed
    truncating conversion (exact for every e4m3fnuz value), not one rounding per value and a pack."""
    cfg = launch_config.AttentionLaunch(block_q=16, block_m=64, block_n=64, head_dim_pad=128, num_splits=1,
                                        num_warps=4, num_stages=1)
    shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=True, num_tokens=512,
                 num_seqs=32, table_width=1024, cache="fp8-fnuz")
    [result] = offline_compile.run([dict(kernel="attention_asm", arch="gfx942", launch=dataclasses.asdict(cfg),
                                         shape=shape)])
    assert "asm" in result, result.get("error")
    ops = re.findall(r"^\s+(v_cvt\w*|v_pack\w*)", result["asm"], re.M)
    from_fp8 = sum(op.startswith("v_cvt_pk_f32_fp8") for op in ops)
    assert from_fp8 and ops.count("v_cvt_pkrtz_f16_f32") == from_fp8, sorted(set(ops))


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_dflash_tile_gives_both_dots_one_mfma_layout(monkeypatch, arch):
    """The chosen 16x16 MFMAs (``mfma_nonkdim``) put Q K^T and P V of the Qwen3-8B q16 tile on one
    warp layout, so P stays in its warp; Triton's 32x32 default gives them two."""
    cfg = _launch(monkeypatch, arch, 32, 8, 128, 32, 16384, 16)
    assert cfg.mfma_nonkdim == 16
    shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=True, num_tokens=512,
                 num_seqs=32, table_width=1024)
    jobs = [dict(kernel="attention_ttgir", arch=arch, launch=dataclasses.asdict(dataclasses.replace(cfg, mfma_nonkdim=n)),
                 shape=shape) for n in (16, 0)]
    chosen, default = offline_compile.run(jobs)
    layouts = {n: set(re.findall(r"#ttg\.amd_mfma<\{[^}]*\}>", r["ttgir"])) for n, r in ((16, chosen), (0, default))}
    assert len(layouts[16]) == 1 and "instrShape = [16, 16," in next(iter(layouts[16])), layouts[16]
    assert len(layouts[0]) == 2, layouts[0]


def _loop_bodies(asm: str) -> list[list[str]]:
    """The instructions of each loop of an AMD kernel (a label up to the branch back to it)."""
    lines = asm.splitlines()
    labels = {line.split(":")[0]: i for i, line in enumerate(lines) if re.match(r"^\.LBB\w+:", line)}
    bodies = []
    for i, line in enumerate(lines):
        m = re.match(r"\s+s_cbranch_\w+\s+(\.LBB\w+)", line)
        if m and labels.get(m.group(1), i) < i:
            bodies.append([x.split()[0] for x in lines[labels[m.group(1)]:i + 1]
                           if x.startswith("\t") and x.strip() and not x.strip().startswith((".", ";"))])
    return bodies


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
def test_gfx942_key_loops_round_p_without_the_software_conversion(monkeypatch, causal):
    """gfx942 has no f32 -> bf16 instruction: Triton's round-to-nearest-even takes five per value
    (a NaN test, v_cmp_o_f32, among them).  The key loops round P by an integer add and a
    truncating cast instead (P_INT_ROUND).  And gfx942's loop is bound by its VALU: in the unmasked
    loop a score costs no multiply of its own (the scale rides in the exponent's FMA) and P no mask
    (the cast truncates), so per lane only the accumulator's rescale multiplies (64 x 128 values
    over 256 lanes, two per v_pk_mul_f32) and no v_and_b32 per P value (16 per lane)."""
    cfg = _launch(monkeypatch, "gfx942", 32, 8, 128, 32, 16384, 16)
    shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=causal, num_tokens=512,
                 num_seqs=32, table_width=1024)
    [result] = offline_compile.run([dict(kernel="attention_asm", arch="gfx942", launch=dataclasses.asdict(cfg),
                                         shape=shape)])
    assert "asm" in result, result.get("error")
    loops = [b for b in _loop_bodies(result["asm"]) if any(op.startswith("v_mfma") for op in b)]
    assert len(loops) == 2, [len(b) for b in loops]  # the unmasked key loop and the masked one
    for body in loops:
        assert "v_cmp_o_f32_e32" not in body and "v_cmp_o_f32_e64" not in body and "v_bfe_u32" not in body
    unmasked = min(loops, key=len)
    multiplies = unmasked.count("v_pk_mul_f32") + unmasked.count("v_mul_f32_e32") + unmasked.count("v_mul_f32_e64")
    assert multiplies <= 64 * 128 // 256 // 2 + 2, multiplies
    assert unmasked.count("v_and_b32_e32") < 64 * 64 // 256, unmasked.count("v_and_b32_e32")


@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
def test_gfx942_with_q_and_p_in_two_fp8_parts_converts_no_tile(monkeypatch, causal):
    """What ``fp8_dots="qk_pv_split"`` (gfx94x, where tuned; 16x16 MFMAs) is for on MI300X, whose key loop over
    an fp8 cache is bound by its VALU: both products on fp8 MFMAs (P, like q, as the sum of two e4m3fnuz
    parts), so the unmasked loop converts neither K nor V (its conversions are P's parts) and, against the
    default (q in two parts, V converted to fp16, 32x32 MFMAs for the converted tiles' registers), runs a
    quarter fewer VALU instructions, half the LDS operations, in fewer registers."""
    before = _launch(monkeypatch, "gfx942", 32, 8, 128, 32, 16384, 16, kv_cache_dtype=torch.float8_e4m3fnuz,
                     dtype=torch.bfloat16, causal=causal)
    assert (before.fp8_dots, before.mfma_nonkdim) == ("qk_split", 0)
    with launch_config.forced(fp8_dots="qk_pv_split"):
        cfg = _launch(monkeypatch, "gfx942", 32, 8, 128, 32, 16384, 16, kv_cache_dtype=torch.float8_e4m3fnuz,
                      dtype=torch.bfloat16, causal=causal)
    assert (cfg.fp8_dots, cfg.mfma_nonkdim) == ("qk_pv_split", 16)  # no converted tile: 16x16
    shape = dict(num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=causal, num_tokens=512,
                 num_seqs=32, table_width=1024, cache="fp8-fnuz")
    jobs = []
    for launch in (cfg, before):
        jobs += [dict(kernel="attention_asm", arch="gfx942", launch=dataclasses.asdict(launch), shape=shape),
                 dict(arch="gfx942", launch=dataclasses.asdict(launch), shape=shape)]
    results = offline_compile.run(jobs)
    loops, registers = {}, {}
    for name, asm, plain in (("split", results[0], results[1]), ("before", results[2], results[3])):
        assert "asm" in asm, asm.get("error")
        loops[name] = min((b for b in _loop_bodies(asm["asm"]) if any(op.startswith("v_mfma") for op in b)), key=len)
        registers[name] = plain[0]["registers"]

    def count(body, *prefixes):
        return sum(op.startswith(prefixes) for op in body)
    split, before_loop = loops["split"], loops["before"]
    assert all(op.endswith("_fp8_fp8") for op in split if op.startswith("v_mfma")), split
    # Two conversions per P value (16 a lane: its two parts, packed) and the first one widened back, against
    # the replaced launch's V tile (32 values a lane) and P.
    assert count(split, "v_cvt") <= 64 * 64 // 256 * 3 // 2 < count(before_loop, "v_cvt")
    valu = {m: count(b, "v_") - count(b, "v_mfma") for m, b in loops.items()}
    assert valu["split"] < 0.8 * valu["before"], valu
    assert count(split, "ds_") < 0.6 * count(before_loop, "ds_")
    assert registers["split"] < registers["before"] and registers["split"] <= 200, registers  # two waves a SIMD


def test_the_tuner_s_prefill_row_candidates_compile_for_every_gpu(monkeypatch):
    """``dflash-rocm tune --prefill`` tries 64-, 128- and 256-row query tiles (8 warps from 128 rows) on
    the GPU it runs on: each builds there, fits the LDS / shared memory, and the 128-row tile keeps
    the DFlash tile's register budget on AMD (no spills at the architecture's stages)."""
    from dflash_rocm_plugin.tune import space as space_mod
    jobs = []
    for arch in sorted(DEVICES):
        base = _launch(monkeypatch, arch, 32, 8, 128, 1, 8192, 16, 8192)
        for block_q, warps in space_mod.row_choices(space_mod.space_for(arch), 4, 8192):
            cfg = dataclasses.replace(base, block_q=block_q, block_m=block_q * 4, num_warps=warps)
            jobs.append(dict(arch=arch, launch=dataclasses.asdict(cfg), shape=dict(
                num_q_heads=32, num_kv_heads=8, head_dim=128, page_size=16, causal=True, num_tokens=8192,
                num_seqs=1, table_width=512)))
    assert len(jobs) == 3 * len(DEVICES)
    for job, result in zip(jobs, offline_compile.run(jobs)):
        arch, rows = job["arch"], job["launch"]["block_m"]
        assert not isinstance(result, dict), (arch, rows, result.get("error"))
        assert result[0]["shared"] <= offline_compile.SHARED_LIMIT[arch], (arch, rows, result[0]["shared"])
        if arch.startswith("gfx") and rows <= 128:
            assert result[0]["vgpr_spills"] == 0, (arch, rows)


def test_dense_kv_prefill_launch_compiles_for_every_gpu(monkeypatch):
    # The launch ops.paged_attention(new_keys=...) picks on each GPU, for the head layouts it takes: Qwen3,
    # gpt-oss with sinks and its windowed layers, Qwen3.5's 256-wide full-attention layers, Gemma-4's
    # windowed 256-wide layers.
    jobs = []
    for arch, (sms, smem) in DEVICES.items():
        for hq, hkv, d, sinks, window in ((32, 8, 128, False, 0), (64, 8, 128, False, 0), (64, 8, 64, True, 0),
                                          (64, 8, 64, True, 128), (16, 2, 256, False, 0), (16, 8, 256, False, 512),
                                          (16, 8, 256, False, 256)):
            with monkeypatch.context() as m:
                pin_gpu(m, arch, smem, sms)
                cfg = extend_launch.choose_extend(head_dim=d, max_query_len=8192, device_index=0, window=window)
            jobs.append(dict(kernel="extend", arch=arch, launch=dataclasses.asdict(cfg),
                             shape=dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, sinks=sinks,
                                        window=window > 0)))
    for job, result in zip(jobs, offline_compile.run(jobs)):
        assert "error" not in result, (job, result)
        # The launch serves chunks too: the prefixes' copy, then the attention (but for gfx94x's 256-wide
        # windowed tiles, whose windowed prefix would spill).
        wide_window = job["arch"].startswith("gfx94") and job["shape"]["window"] and job["shape"]["head_dim"] > 128
        assert len(result) == (1 if wide_window else 2), (job, result)
        for kernel in result:
            assert kernel["shared"] <= offline_compile.SHARED_LIMIT[job["arch"]], (job, kernel)
            assert kernel["vgpr_spills"] == 0, (job, kernel)


def test_dense_kv_prefill_over_fp8_caches_compiles_for_every_gpu(monkeypatch):
    # Over each GPU's own fp8 format (e4m3fnuz on gfx942, e4m3fn elsewhere), per-head scales: the rows'
    # rounding, the prefixes' copy (decoding the cache's bytes) and the attention over their buffers,
    # Qwen3 and Qwen3.5 full-attention heads.
    jobs = []
    for arch, (sms, smem) in DEVICES.items():
        for hq, hkv, d in ((32, 8, 128), (16, 2, 256)):
            with monkeypatch.context() as m:
                pin_gpu(m, arch, smem, sms)
                cfg = extend_launch.choose_extend(head_dim=d, max_query_len=8192, device_index=0)
            jobs.append(dict(kernel="extend", arch=arch, launch=dataclasses.asdict(cfg),
                             shape=dict(num_q_heads=hq, num_kv_heads=hkv, head_dim=d,
                                        fp8=2 if arch.startswith("gfx94") else 1)))
    for job, result in zip(jobs, offline_compile.run(jobs)):
        assert "error" not in result, (job, result)
        assert len(result) == 3, (job, result)
        for kernel in result:
            assert kernel["shared"] <= offline_compile.SHARED_LIMIT[job["arch"]], (job, kernel)
            assert kernel["vgpr_spills"] == 0, (job, kernel)
