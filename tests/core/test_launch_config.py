"""Launch choice from shapes only: the measured H200 rules, and what other GPUs get.

The device facts come from ops._runtime; each test pins them, so these run on any machine.
"""

import dataclasses

import pytest
import torch

from dflash_rocm_plugin import ops
from dflash_rocm_plugin.ops import _runtime, extend_launch, launch_config
from tests.core.cases import pin_gpu

H200 = dict(arch="sm_90", smem=227 * 1024, sms=132)


@pytest.fixture
def device(monkeypatch):
    def pin(arch, smem=227 * 1024, sms=132):
        pin_gpu(monkeypatch, arch, smem, sms)
    return pin


def _dflash(batch, context, page=16, q_len=16, group=4, head_dim=128, kv_heads=8):
    """A DFlash draft/verify launch: q_len queries per sequence over `context` keys."""
    return launch_config.choose(
        num_tokens=batch * q_len, num_seqs=batch, num_kv_heads=kv_heads, group=group, head_dim=head_dim,
        kv_capacity=context // page * page, max_query_len=q_len, num_splits=None, device_index=0,
        page_size=page)


@pytest.mark.parametrize("batch,context,page", [(32, 16384, 16), (64, 8192, 16), (32, 16384, 1), (64, 8192, 1),
                                                (64, 1024, 1), (128, 1024, 1), (32, 4096, 1), (64, 2048, 4)])
def test_long_or_small_page_loops_pipeline_the_page_ids_5_deep(device, batch, context, page):
    device(**H200)
    cfg = _dflash(batch, context, page)
    assert (cfg.num_splits, cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.page_ids_asm) == (1, 64, 4, 5, False)


@pytest.mark.parametrize("batch,context", [(64, 1024), (64, 2048), (32, 4096)])
def test_short_page_16_loops_read_page_ids_inline(device, batch, context):
    device(**H200)
    cfg = _dflash(batch, context, 16)  # 16-64 tiles: the 5-stage prologue costs more than it saves
    assert (cfg.num_splits, cfg.num_stages, cfg.page_ids_asm) == (1, 3, True)


@pytest.mark.parametrize("page", [16, 1])
@pytest.mark.parametrize("batch,context,splits", [(8, 4096, 4), (1, 32768, 32), (1, 4096, 32), (4, 8192, 8),
                                                  (16, 4096, 2), (8, 16384, 4)])
def test_split_kv_loops_read_page_ids_inline_at_3_stages(device, batch, context, splits, page):
    device(**H200)
    cfg = _dflash(batch, context, page)
    assert (cfg.num_splits, cfg.num_stages, cfg.page_ids_asm) == (splits, 3, True)


def test_unknown_page_size_decides_by_loop_length(device):
    device(**H200)
    choose = dict(num_seqs=32, num_tokens=512, num_kv_heads=8, group=4, head_dim=128, max_query_len=16,
                  num_splits=None, device_index=0)
    assert launch_config.choose(kv_capacity=16384, **choose).num_stages == 5
    assert launch_config.choose(kv_capacity=2048, **choose).num_stages == 3


def test_gpus_with_less_shared_memory_get_two_stages(device):
    device("sm_89", smem=99 * 1024, sms=128)
    cfg = _dflash(32, 16384)
    assert (cfg.num_stages, cfg.page_ids_asm) == (2, True)


@pytest.mark.parametrize("arch,stages", [("gfx942", 1), ("gfx950", 2)])
def test_amd_configs_never_use_inline_ptx(device, arch, stages):
    device(arch, sms=304)
    for batch, context in [(32, 16384), (1, 32768)]:
        cfg = _dflash(batch, context)
        assert (cfg.num_stages, cfg.page_ids_asm) == (stages, False)


def test_large_gqa_groups_take_128_row_tiles(device):
    device(**H200)
    cfg = _dflash(32, 16384, group=8)  # Qwen3-32B: 64 query / 8 KV heads
    assert (cfg.block_m, cfg.block_q, cfg.num_warps, cfg.num_stages, cfg.overlap_qk) == (128, 16, 8, 5, False)


@pytest.mark.parametrize("batch,context,splits", [(8, 4096, 2), (1, 32768, 16), (4, 8192, 4), (16, 4096, 1)])
def test_128_row_tiles_fill_one_program_per_sm(device, batch, context, splits):
    device(**H200)
    assert _dflash(batch, context, group=8).num_splits == splits


@pytest.mark.parametrize("batch,context", [(32, 16384), (64, 1024)])
def test_128_row_tiles_overlap_scores_with_softmax_at_page_1(device, batch, context):
    device(**H200)
    assert _dflash(batch, context, page=1, group=8).overlap_qk
    assert not _dflash(batch, context, page=1, group=4).overlap_qk   # 64-row tiles lost 5-10 %
    assert not _dflash(8, 4096, page=1, group=8).overlap_qk         # split-KV


def test_the_same_shapes_always_give_the_same_launch(device):
    device(**H200)
    assert _dflash(8, 4096) == _dflash(8, 4096)


def test_forced_fields_apply_inside_the_block_only(device):
    device(**H200)
    with launch_config.forced(num_stages=2, page_ids_asm=True):
        assert (_dflash(32, 16384).num_stages, _dflash(32, 16384).page_ids_asm) == (2, True)
    assert _dflash(32, 16384).num_stages == 5
    with pytest.raises(ValueError, match="unknown launch fields"):
        with launch_config.forced(stages=2):
            pass


@pytest.mark.parametrize("batch,context", [(32, 16384), (8, 4096), (1, 32768)])
def test_a_window_launches_as_a_sequence_of_the_window_s_keys(device, batch, context):
    """DFlash2 drafts: window 2048 over a long capacity gets the launch of ~2K keys."""
    device(**H200)

    def launch(capacity, window=None):
        return launch_config.choose(num_tokens=batch * 8, num_seqs=batch, num_kv_heads=8, group=4, head_dim=128,
                                    kv_capacity=capacity, max_query_len=8, num_splits=None, device_index=0,
                                    page_size=16, window=window)
    assert launch(context, window=2048) == launch(2048 + 8 - 1)
    assert launch(1024, window=2048) == launch(1024)


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_tiles_under_32_rows_per_warp_take_16x16_mfmas(device, arch):
    """16x16 MFMAs where a warp holds fewer than 32 of the tile's rows (the q16 GQA-4 tile, decode),
    Triton's own choice for 128-row tiles over 4 warps; NVIDIA never gets the AMD option."""
    device(arch, smem=64 * 1024, sms=304)
    assert (_dflash(32, 16384).block_m, _dflash(32, 16384).mfma_nonkdim) == (64, 16)
    assert _dflash(64, 8192, q_len=1).mfma_nonkdim == 16
    qwen3_32b = _dflash(32, 16384, group=8)
    assert (qwen3_32b.block_m, qwen3_32b.num_warps, qwen3_32b.mfma_nonkdim) == (128, 4, 0)
    with launch_config.forced(num_warps=8):  # the rule follows the warps a sweep or a tuned file sets
        assert _dflash(32, 16384, group=8).mfma_nonkdim == 16
    with launch_config.forced(mfma_nonkdim=32):
        assert _dflash(32, 16384).mfma_nonkdim == 32
    own_fp8 = launch_config.choose(num_tokens=512, num_seqs=32, num_kv_heads=8, group=4, head_dim=128,
                                   kv_capacity=16384, max_query_len=16, num_splits=None, device_index=0,
                                   page_size=16, kv_cache_dtype=ops.native_fp8_dtype(arch))
    # gfx94x over its own fp8 format keeps 32x32 (registers: two waves per SIMD); gfx950 does not.
    assert own_fp8.mfma_nonkdim == (0 if arch == "gfx942" else 16)
    device(**H200)
    assert _dflash(32, 16384).mfma_nonkdim == 0


def test_the_mfma_size_reaches_the_launch_as_an_amd_compile_option(device, monkeypatch):
    import torch

    from dflash_rocm_plugin.ops.backends import triton as triton_backend
    from dflash_rocm_plugin.ops.call import AttentionCall
    from tests.core.cases import build
    case = build([40, 9], [16, 3], dtype=torch.float16)
    q, k, v, table, sl, qsl = case.args()
    call = AttentionCall(q, k, v, table, sl, qsl, torch.empty_like(q), causal=True, scale=0.1, window=0,
                         softcap=0.0, max_query_len=None, num_kv_splits=None, workspace=None)
    device("gfx942", smem=64 * 1024, sms=304)
    monkeypatch.setattr(_runtime, "is_rocm", lambda: True)
    assert triton_backend.Launch(call).constexprs["matrix_instr_nonkdim"] == 16
    monkeypatch.setattr(_runtime, "is_rocm", lambda: False)  # not a ROCm build of torch: never passed
    assert "matrix_instr_nonkdim" not in triton_backend.Launch(call).constexprs


@pytest.mark.parametrize("batch,context", [(64, 8192), (16, 16384), (256, 2048), (1, 32768)])
def test_decode_takes_128_key_tiles_two_deep_on_hopper(device, batch, context):
    device(**H200)
    cfg = _dflash(batch, context, q_len=1)
    assert (cfg.block_q, cfg.block_m, cfg.block_n, cfg.num_stages) == (1, 16, 128, 2)
    assert _dflash(batch, context, page=1, q_len=1).block_n == 64  # measured at page 16 only
    assert _dflash(batch, context, q_len=16).block_n == 64  # the DFlash block keeps its tiles
    device(arch="sm_90", smem=100 * 1024)
    assert _dflash(batch, context, q_len=1).block_n == 64   # two 128-key stages would not fit


@pytest.mark.parametrize("batch,context,q_len,group,rows,stages", [
    (1, 8192, 8192, 4, 256, 3), (1, 32768, 32768, 4, 256, 3), (4, 4096, 4096, 4, 128, 3),
    (4, 8192, 2048, 4, 128, 5), (1, 32768, 8192, 4, 256, 3), (1, 4096, 4096, 8, 256, 3),
    (16, 1024, 1024, 4, 64, 3)])
def test_long_prefill_takes_taller_tiles_of_8_warps_on_hopper(device, batch, context, q_len, group, rows, stages):
    device(**H200)
    cfg = _dflash(batch, context, q_len=q_len, group=group)
    assert (cfg.block_m, cfg.block_q * group, cfg.num_stages, cfg.num_splits) == (rows, rows, stages, 1)
    assert cfg.num_warps == (8 if rows >= 128 else 4)


@pytest.mark.parametrize("arch,warps,mfma", [("gfx942", 8, 16), ("gfx950", 4, 0)])
@pytest.mark.parametrize("batch,context,q_len,group,rows", [
    (1, 8192, 8192, 4, 128), (1, 32768, 32768, 4, 128), (4, 4096, 4096, 4, 128), (4, 8192, 2048, 4, 128),
    (1, 4096, 4096, 8, 128), (16, 1024, 1024, 4, 64)])
def test_long_prefill_takes_128_row_tiles_on_amd(device, arch, warps, mfma, batch, context, q_len, group, rows):
    """From 8192 query rows per KV head, as on Hopper, but 128 rows at most: gfx950 over 4 warps
    (32x32 MFMAs, two waves per SIMD), gfx942 over 8 (16x16; 4 warps would take one wave per SIMD)."""
    device(arch)
    cfg = _dflash(batch, context, q_len=q_len, group=group)
    assert (cfg.block_m, cfg.block_q * group, cfg.num_splits) == (rows, rows, 1)
    if rows == 128 and group == 4:
        assert (cfg.num_warps, cfg.mfma_nonkdim) == (warps, mfma)
    else:
        assert cfg.num_warps == (warps if q_len * group >= 8192 else 4)
    # The DFlash block of the same heads keeps its tile.
    assert _dflash(32, 16384, group=group).block_m == (128 if group >= 8 else 64)


def test_a_mixed_step_keeps_its_decodes_out_of_tall_tiles(device):
    device(**H200)
    one_chunk_and_decodes = launch_config.choose(
        num_tokens=8192 + 63, num_seqs=64, num_kv_heads=8, group=4, head_dim=128, kv_capacity=16384,
        max_query_len=8192, num_splits=None, device_index=0, page_size=16)
    assert one_chunk_and_decodes.block_m == 64
    device(arch="gfx942")
    assert launch_config.choose(
        num_tokens=8192 + 63, num_seqs=64, num_kv_heads=8, group=4, head_dim=128, kv_capacity=16384,
        max_query_len=8192, num_splits=None, device_index=0, page_size=16).block_m == 64


@pytest.mark.parametrize("heads,batch,context,splits", [((16, 2, 512), 1, 32768, 32), ((16, 2, 512), 8, 4096, 4),
                                                        ((64, 4, 128), 1, 32768, 16), ((64, 4, 128), 8, 4096, 2)])
def test_dflash_blocks_spanning_several_query_tiles_split_their_keys_at_small_batch(device, heads, batch, context,
                                                                                    splits):
    """512-wide heads (Gemma-4 global layers: 64-row tiles of 8 queries) and GQA-16 groups (128-row
    tiles of 8 queries) put a 16-token block in several tiles; at small batch those still fill one
    wave with KV splits, and a longer query block (a prefill chunk) never splits."""
    device(**H200)
    hq, hkv, d = heads
    cfg = _dflash(batch, context, group=hq // hkv, head_dim=d, kv_heads=hkv)
    assert cfg.block_q < 16 and cfg.num_splits == splits
    per_sm = 1 if cfg.block_m >= 128 or d > 256 else 2
    assert batch * hkv * (16 // cfg.block_q) * cfg.num_splits <= per_sm * H200["sms"]
    assert _dflash(batch, context, q_len=32, group=hq // hkv, head_dim=d, kv_heads=hkv).num_splits == 1
    assert ops.may_split_keys(batch * 16, batch, cfg.block_q) and not ops.may_split_keys(batch * 17, batch, cfg.block_q)


@pytest.mark.parametrize("arch,smem,sms,rows,keys", [("gfx942", 64 * 1024, 304, 64, 16),
                                                     ("gfx950", 160 * 1024, 256, 32, 16),
                                                     ("sm_90", H200["smem"], H200["sms"], 64, 32)])
def test_512_wide_heads_take_taller_tiles_of_8_warps(device, arch, smem, sms, rows, keys):
    """Gemma-4 global layers (16 q / 2 kv heads of 512): 16-row tiles read each K/V tile eight
    times over a GQA-8 group; the tallest tile that fits (AMD: without spills within two waves per
    SIMD; the H200: its shared memory, measured fastest) runs one program per multiprocessor, and a
    decode keeps 16 rows over 4 warps.  NVIDIA parts with less shared memory keep 16 rows."""
    device(arch, smem=smem, sms=sms)
    big = _dflash(32, 16384, group=8, head_dim=512, kv_heads=2)
    assert (big.block_m, big.block_q, big.num_warps, big.block_n) == (rows, rows // 8, 8, keys)
    small = _dflash(8, 4096, group=8, head_dim=512, kv_heads=2)
    assert small.num_splits == sms // (8 * 2 * (16 // small.block_q))  # one program per CU fills a wave
    decode = _dflash(8, 4096, q_len=1, group=8, head_dim=512, kv_heads=2)
    assert (decode.block_m, decode.num_warps) == (16, 4)
    device("sm_89", smem=100 * 1024, sms=128)
    assert _dflash(32, 16384, group=8, head_dim=512, kv_heads=2).block_m == 16


@pytest.mark.parametrize("heads,batch,q_len,rows", [((16, 2, 256), 4, 16, 128), ((16, 2, 256), 1, 16, 64),
                                                   ((16, 2, 256), 4, 8, 64), ((16, 8, 256), 4, 16, 32),
                                                   ((16, 2, 256), 4, 1, 16), ((16, 8, 256), 4, 4096, 64),
                                                   ((16, 2, 256), 4, 4096, 64)])
def test_256_wide_heads_take_64_key_tiles_on_hopper(device, heads, batch, q_len, rows):
    """Qwen3-Next / Qwen3.5 full-attention layers (16 q / 2 kv) and Gemma-4 sliding layers (16 / 8)
    of 256: 64-key tiles (H200: 1.4-2x the 32-key tiles over 8 warps at every workload), over 4
    warps, or 8 for a whole q16 block of a GQA-8 group in 128 rows where the call fills the GPU
    (not batch 1, not prefill); 32-key tiles where 160 KB of shared memory do not fit."""
    hq, hkv, d = heads
    device(**H200)
    cfg = _dflash(batch, 4096 if q_len > 16 else 16384, q_len=q_len, group=hq // hkv, head_dim=d, kv_heads=hkv)
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.page_ids_asm) == \
        (rows, 64, 8 if rows >= 128 else 4, 2, True)
    if rows == 128:
        assert batch * hkv * cfg.num_splits <= H200["sms"]  # one program per SM
    device("sm_89", smem=100 * 1024, sms=128)
    cfg = _dflash(batch, 16384, q_len=min(q_len, 16), group=hq // hkv, head_dim=d, kv_heads=hkv)
    assert (cfg.block_n, cfg.num_warps, cfg.num_stages) == (32, 8, 2) and cfg.block_m <= 64


@pytest.mark.parametrize("heads,context,splits,merge_warps", [((16, 2, 256), 32768, 64, 4), ((16, 2, 512), 32768, 64, 4),
                                                              ((16, 2, 128), 8192, 64, 1), ((32, 8, 128), 32768, 32, 1),
                                                              ((16, 2, 256), 4096, 32, 1)])
def test_a_batch_1_decode_of_two_kv_heads_splits_past_one_waves_32(device, heads, context, splits, merge_warps):
    """Two programs per split (Qwen3.5 / Qwen3-Next, Gemma-4 global decode at batch 1) leave most SMs
    idle at 32 splits, so they take up to ops.MAX_KV_SPLITS (64), whose merge then runs on 4 warps
    where a (token, head)'s partial rows pass 8192 floats; 8 KV heads keep their measured 32, and a
    short context its 128 keys per split."""
    device(**H200)
    hq, hkv, d = heads
    cfg = launch_config.choose(num_tokens=1, num_seqs=1, num_kv_heads=hkv, group=hq // hkv, head_dim=d,
                               kv_capacity=context, max_query_len=1, num_splits=None, device_index=None,
                               page_size=16)
    assert (cfg.num_splits, cfg.merge_warps) == (splits, merge_warps), cfg
    assert ops.MAX_KV_SPLITS == launch_config.MAX_SPLITS == 64


@pytest.mark.parametrize("heads", [(16, 2, 256), (16, 2, 512)])
def test_a_batch_1_dflash_block_of_two_kv_heads_keeps_32_splits(device, heads):
    """Four programs per split (a q16 block in two query tiles): 64 splits lost on the H200
    (Qwen3-Next 1 x 32K 1.21 vs 1.40 TB/s), so the block keeps one wave's 32."""
    device(**H200)
    hq, hkv, d = heads
    assert _dflash(1, 32768, group=hq // hkv, head_dim=d, kv_heads=hkv).num_splits == 32


@pytest.mark.parametrize("arch", ["sm_90", "gfx942", "gfx950"])
def test_reverse_tile_order_is_forced_only(device, arch):
    device(arch)
    prefill = dict(num_tokens=4 * 4096, num_seqs=4, num_kv_heads=8, group=4, head_dim=128, kv_capacity=4096,
                   max_query_len=4096, num_splits=None, device_index=0, page_size=16, causal=True)
    cfg = launch_config.choose(**prefill)
    assert not cfg.heavy_first
    with launch_config.forced(heavy_first=True):
        assert launch_config.choose(**prefill).heavy_first


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "gfx942", "gfx950"])
def test_short_prompts_go_dense_on_hopper_only_in_steps_of_many_rows(monkeypatch, arch):
    from tests.core.cases import pin_gpu
    pin_gpu(monkeypatch, arch, 160 * 1024, 132)
    short, many = extend_launch.SHORT_PROMPTS_MIN_QUERY_LEN, extend_launch.SHORT_PROMPTS_MIN_TOKENS
    cfg = extend_launch.choose_extend(head_dim=128, max_query_len=short, device_index=0, num_tokens=many)
    if arch != "sm_90":
        assert cfg is None  # unmeasured there: the long-prompt bound holds
        return
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages, cfg.use_desc, cfg.qo_desc) == (
        128, 64, 4, 2, True, True)
    for kw in (dict(max_query_len=short - 1, num_tokens=many), dict(max_query_len=short, num_tokens=many - 1)):
        assert extend_launch.choose_extend(head_dim=128, device_index=0, **kw) is None
    assert extend_launch.choose_extend(head_dim=256, max_query_len=short, device_index=0, num_tokens=many) is None
    long = extend_launch.choose_extend(head_dim=128, max_query_len=extend_launch.DENSE_MIN_QUERY_LEN,
                                       device_index=0, num_tokens=many)
    assert (long.block_n, long.num_warps) == (128, 8)  # long prompts keep the 128-key tile


@pytest.mark.parametrize("arch, tma", [("sm_90", True), ("sm_100", True), ("sm_80", False), ("gfx942", False),
                                       ("gfx950", False)])
def test_dense_prompts_launch_only_where_the_host_cost_is_hidden(monkeypatch, arch, tma):
    from tests.core.cases import pin_gpu
    pin_gpu(monkeypatch, arch, 160 * 1024, 132)
    least = extend_launch.DENSE_MIN_QUERY_LEN
    assert extend_launch.choose_extend(head_dim=128, max_query_len=None, device_index=0) is None
    assert extend_launch.choose_extend(head_dim=128, max_query_len=least - 1, device_index=0) is None
    cfg = extend_launch.choose_extend(head_dim=128, max_query_len=least, device_index=0)
    assert cfg is not None and cfg.use_desc == tma and cfg.block_m == 128
    with extend_launch.forced_extend(use_desc=not tma, num_stages=2):
        forced = extend_launch.choose_extend(head_dim=128, max_query_len=least, device_index=0)
    assert (forced.use_desc, forced.num_stages) == (not tma, 2)
    wide = extend_launch.choose_extend(head_dim=256, max_query_len=least, device_index=0)
    assert wide.use_desc == tma and wide.block_m == 128 and wide.block_n <= cfg.block_n
    with pytest.raises(ValueError, match="unknown extend launch fields"):
        with extend_launch.forced_extend(block_q=64):
            pass
    # gpt-oss's 128-key windows take 64-row tiles; Gemma-4's 512-key windows keep the prompt's tile.
    small = extend_launch.choose_extend(head_dim=64, max_query_len=least, device_index=0, window=128)
    assert (small.block_m, small.block_n, small.num_warps, small.use_desc) == (64, 64, 4, tma)
    windowed = extend_launch.choose_extend(head_dim=256, max_query_len=least, device_index=0, window=512)
    # Chunks over a prefix go dense with every launch but gfx94x's 256-wide windowed tile (it would spill).
    assert windowed == dataclasses.replace(wide, chunks=not arch.startswith("gfx94"))
    assert cfg.chunks and wide.chunks and small.chunks


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "gfx942", "gfx950"])
def test_windowed_wide_heads_stay_paged_over_an_fp8_cache_the_pages_multiply(monkeypatch, arch):
    pin_gpu(monkeypatch, arch, 160 * 1024, 132)
    least = extend_launch.DENSE_MIN_QUERY_LEN
    native = ops.support.native_fp8_dtype(arch)
    other = torch.float8_e4m3fn if native == torch.float8_e4m3fnuz else torch.float8_e4m3fnuz
    multiplied = arch != "sm_80"  # Ampere has no fp8 dots: its pages convert every tile too
    gemma = dict(head_dim=256, max_query_len=least, device_index=0, window=512)
    assert (extend_launch.choose_extend(**gemma, kv_cache_dtype=native) is None) == multiplied
    for kv in (None, torch.bfloat16, other):  # the pages convert these as the dense kernel's copy does
        assert extend_launch.choose_extend(**gemma, kv_cache_dtype=kv) is not None
    # Qwen3.5's 256-wide full attention and gpt-oss's 64-wide windows keep the dense path over fp8.
    for heads in (dict(head_dim=256, window=0), dict(head_dim=64, window=128)):
        assert extend_launch.choose_extend(max_query_len=least, device_index=0, kv_cache_dtype=native,
                                           **heads) is not None
    # A sweep's forced fields still time the dense side; lengths still decide.
    with extend_launch.forced_extend(use_desc=False):
        assert extend_launch.choose_extend(**gemma, kv_cache_dtype=native) is not None
        assert extend_launch.choose_extend(**{**gemma, "max_query_len": least - 1}, kv_cache_dtype=native) is None
    # What a host's call reads (ops.describe_launch -> plan.dense_kv_launch) follows the same choice.
    described = ops.describe_launch(num_tokens=least, num_seqs=1, num_q_heads=16, num_kv_heads=8, head_dim=256,
                                    page_size=16, kv_capacity=least, causal=True, max_query_len=least,
                                    sliding_window=512, kv_cache_dtype=native, device="cuda:0", new_kv=True)
    assert (described.dense_launch is None) == multiplied
