"""The opt-in launches for fp8 caches, compiled for the GPU, bf16 queries.

``fp8_dots``: "qk": q joins K's fp8 format under one scale per program; "pv": P is scaled into V's
fp8 format; "qk_pv": both.  So the answer is further from the float64 reference of the dequantized cache than the
fp16 dots (which only round P to fp16): it must stay within each mode's relative error and
differ from the default (the switch takes effect).  "qk_split": q as the sum of two fp8 parts, two fp8
dots over each K tile: the default's error, a tenth of "qk"'s; "qk_pv_split": P too as two parts (8 significant
bits instead of fp16's 11: within 1.6x the fp16 dots' error).  ``pv_transposed`` (O^T = V^T P^T, fp16 dots)
keeps the default's error.  Each replays bitwise under graph capture.
"""

import pytest
import torch

from dflash_rocm_plugin import ops, reference
from dflash_rocm_plugin.ops import launch_config
from tests.gpu.test_fp8_sinks_window import _build, _rel

pytestmark = pytest.mark.gpu
NATIVE = ops.native_fp8_dtype(ops.gpu_arch())
# launch fields forced, relative error allowed, whether the answer must differ from the default's
VARIANTS = {
    "fp8-qk": (dict(fp8_dots="qk"), 5e-2, True),
    "fp8-pv": (dict(fp8_dots="pv"), 5e-2, True),
    "fp8-qk-pv": (dict(fp8_dots="qk_pv"), 5e-2, True),
    "fp8-qk-split": (dict(fp8_dots="qk_split"), 5e-3, True),
    "fp8-qk-pv-split": (dict(fp8_dots="qk_pv_split"), 5e-3, True),
    "pv-transposed": (dict(pv_transposed=True), 1e-2, False),
}
# P as two fp8 parts is refused on NVIDIA (Triton 3.6 computed non-finite rows on the H100): AMD only.
if not ops.gpu_arch().startswith("gfx"):
    del VARIANTS["fp8-qk-pv-split"]
MODES = sorted(VARIANTS)


def _run(args, causal, **kw):
    q, k, v, table, sl, qsl = args
    out = torch.full_like(q, float("nan"))
    ops.paged_attention(q, k, v, table, sl, qsl, causal=causal, out=out, max_query_len=16, **kw)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("causal", [False, True], ids=["draft", "verify"])
@pytest.mark.parametrize("page", [16, 1])
@pytest.mark.parametrize("splits", [None, 4], ids=["chosen", "4-splits"])
def test_opt_in_launch_stays_close_to_the_reference(mode, causal, page, splits):
    args = _build([1000, 4111, 16, 2049], page, cache=NATIVE, seed=7)
    scales = dict(k_scale=torch.tensor([0.75], device="cuda"), v_scale=torch.tensor([1.25], device="cuda"))
    with launch_config.forced(fp8_dots="none"):  # fp16 dots, whatever the rule chooses for this call
        default = _run(args, causal, num_kv_splits=splits, **scales)
    fields, tolerance, differs = VARIANTS[mode]
    with launch_config.forced(**fields):
        out = _run(args, causal, num_kv_splits=splits, **scales)
    q, k, v, table, sl, qsl = args
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=causal,
                                    **{n: t.cpu() for n, t in scales.items()})
    assert torch.isfinite(out).all()
    err, err_default = _rel(out, ref), _rel(default, ref)
    print(f"{mode} rel err {err:.2e} (fp16 dots {err_default:.2e})")
    assert err < tolerance
    if fields.get("fp8_dots") in launch_config.FP8_PV_SPLIT_MODES:
        assert err < 1.6 * err_default  # P as two parts: 8 significant bits
    elif fields.get("fp8_dots") in launch_config.FP8_QK_SPLIT_MODES:
        assert err < 1.1 * err_default  # q exactly as two parts: only the dots' rounding differs
    if differs:
        assert not torch.equal(out, default)


@pytest.mark.parametrize("mode", MODES)
def test_opt_in_launch_with_a_window_and_sinks(mode):
    args = _build([3000, 700], 16, hq=64, hkv=8, d=64, cache=NATIVE, seed=8)
    sinks = torch.randn(64, device="cuda") + 1.0
    kw = dict(sliding_window=128, sinks=sinks)
    fields, tolerance, _ = VARIANTS[mode]
    with launch_config.forced(**fields):
        out = _run(args, True, **kw)
    q, k, v, table, sl, qsl = args
    ref = reference.paged_attention(q.cpu(), k.cpu(), v.cpu(), table.cpu(), sl.cpu(), qsl.cpu(), causal=True,
                                    sliding_window=128, sinks=sinks.cpu())
    assert _rel(out, ref) < tolerance


@pytest.mark.parametrize("mode", MODES)
def test_opt_in_launch_replays_bitwise_under_graph_capture(mode):
    args = _build([4096] * 8, 16, cache=NATIVE, seed=9)
    q, k, v, table, sl, qsl = args
    ws = torch.empty(ops.workspace_floats(num_q_heads=32, num_kv_heads=8, head_dim=128, max_num_seqs=8,
                                          max_kv_len=table.shape[1] * 16), dtype=torch.float32, device="cuda")
    out = torch.full_like(q, float("nan"))
    with launch_config.forced(**VARIANTS[mode][0]):
        def call():
            ops.paged_attention(q, k, v, table, sl, qsl, causal=True, out=out, max_query_len=16, workspace=ws)
        call()
        torch.cuda.synchronize()
        eager = out.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)
