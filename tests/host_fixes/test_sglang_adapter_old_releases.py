"""The SGLang adapter on the real 0.5.11, 0.5.14 and 0.5.18 releases (0.5.23 as the control),
and on 0.5.12 and 0.5.13.post1 where the environment has unpacked them.

Each release runs adapter_checks.py in its own interpreter.  There the adapter's real
``register()`` must put ``rocm_dflash`` into ATTENTION_BACKENDS and the --attention-backend
choices exactly once, and SGLang's backend factory must build the plugin's backend from a
runner stand-in made of the release's own pool classes.  On identical ForwardBatches over
shuffled pages (page sizes 1 and 16) the plugin's output, written into a NaN-poisoned
buffer, must match the release's own TritonAttnBackend and the float64 reference for
EXTEND with a radix prefix, DECODE, causal TARGET_VERIFY of a 16-token block and
non-causal ENCODER_ONLY verify; the KV pool afterwards must equal Triton's bit for bit;
and for every multi-row case the other causality must be far off, so a mask mix-up fails.
A runner whose ``req_to_token`` holds virtual ids (the unified pool) is refused with a
reason.  On 0.5.14/0.5.18 there is no kv_index_translator, so this exercises the ``req_to_token``
block-table path and the pre-0.5.15 server-args fallbacks.  0.5.11 additionally has no
``runtime_context`` and no ``KVWriteLoc`` (nor do 0.5.12/0.5.13) and, like 0.5.12, drives graphs through the legacy
capture/replay hooks: those must rebuild the eager result for a batch padded to the
captured size, from the same metadata tensors at capture and replay.
"""

import pytest

from tests.host_fixes import _releases

REQUIRED = ("0.5.11", "0.5.14", "0.5.18", "0.5.23")
OPTIONAL = ("0.5.12", "0.5.13.post1")  # checked when ci/envs/hostfix.post.sh unpacked them
VERSIONS = REQUIRED + OPTIONAL
LEGACY_GRAPH_HOOKS = ("0.5.11", "0.5.12")
TOL = 2e-5
CASES = [f"{c}/page{p}" for p in (1, 16)
         for c in ("extend_prefix", "decode", "verify_causal", "verify_encoder_only")]


@pytest.fixture(scope="module")
def all_reports():
    present = REQUIRED + tuple(v for v in OPTIONAL if _releases.release_dir("sglang", v).is_dir())
    return _releases.run_script_per_release("sglang", present, "tests/host_fixes/adapter_checks.py")


@pytest.fixture
def reports(all_reports, version):
    if version not in all_reports:
        pytest.skip(f"sglang {version} is not unpacked under {_releases.HOSTS}")
    return all_reports


@pytest.mark.parametrize("version", VERSIONS)
def test_register_adds_backend_and_choice_once(reports, version):
    r = reports[version]
    assert f"sglang-{version}" in r["imported_from"]
    assert r["registered"] is True
    assert r["choices_count"] == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_draft_allow_list_accepts_rocm_dflash(reports, version):
    """Before 0.5.20 the host fix widens the private allow-list; from 0.5.20 the adapter
    registers in the public one."""
    assert reports[version]["draft_accepts_rocm_dflash"] is True


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("version", VERSIONS)
def test_plugin_matches_triton_and_reference(reports, version, case):
    r = reports[version]["numerics"][case]
    assert r["backend_class"] == "RocmDflashAttnBackend"
    assert not r["plugin_nan"], "rows left unwritten (NaN poison survived) or NaN read"
    assert r["vs_reference"] < TOL
    assert r["vs_triton"] < TOL
    assert r["triton_vs_reference"] < TOL  # the control itself computes the same attention
    assert r["pools_equal"]
    if not case.startswith("decode"):
        assert r["other_causality_gap"] > 0.05


@pytest.mark.parametrize("version", VERSIONS)
def test_graph_decode_and_verify_metadata(reports, version):
    """Capture-shaped metadata (init_cuda_graph_state + out-of-graph refill, padded to a
    larger batch) gives the eager result."""
    for key, err in reports[version]["graph"].items():
        assert err < TOL, key


@pytest.mark.parametrize("version", VERSIONS)
def test_translated_kv_ids_are_rejected(reports, version):
    """A unified (virtual-id) pool is refused at backend construction, with the reason."""
    reason = reports[version]["unified_pool_rejection"]
    assert reason and "rocm_dflash" in reason and "unified" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_legacy_graph_hooks(reports, version):
    """Capture at a padded batch, replay a smaller one: eager result, address-stable metadata.
    Only releases before the out-of-graph hooks call them."""
    r = reports[version]
    assert r["legacy_graph_hooks_used"] is (version in LEGACY_GRAPH_HOOKS)
    if version not in LEGACY_GRAPH_HOOKS:
        return
    assert set(r["legacy_graph"]) == {f"{c}/page{p}" for p in (1, 16) for c in ("decode", "verify_causal")}
    for key, res in r["legacy_graph"].items():
        assert res["err"] < TOL, key
        assert res["same_tensors"], key
