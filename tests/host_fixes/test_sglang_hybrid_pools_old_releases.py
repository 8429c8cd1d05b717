"""The SGLang adapter over each release's own hybrid pools (hybrid_checks.py, one interpreter
per release): GDN hybrids' ``HybridLinearKVPool`` (full-attention layers 3 and 7 of a model
whose layer 0 is linear) on 0.5.11-0.5.23, and hybrid sliding-window memory (``SWAKVPool``
with its allocator's eviction) from 0.5.14, where ``KVWriteLoc`` carries the window slots;
before that such a pool is refused naming ``--disable-hybrid-swa-memory``.

Outputs are finite with NaN in every unowned and evicted slot, equal the float64 reference
over the requests' logical K/V, and, for the window pools, the release's own TritonAttnBackend
on the same pool, which must end equal bit for bit.  (Before 0.5.23 TritonAttnBackend sizes
itself from layer 0's buffer, which a GDN hybrid pool refuses; tests/sglang compares the GDN
case with Triton inside SGLang 0.5.23's real wrapper.)
"""

import pytest

from tests.host_fixes import _releases

REQUIRED = ("0.5.11", "0.5.14", "0.5.18", "0.5.23")
OPTIONAL = ("0.5.12", "0.5.13.post1")
VERSIONS = REQUIRED + OPTIONAL
SWA_FROM = (0, 5, 14)
TOL = 2e-5


@pytest.fixture(scope="module")
def all_reports():
    present = REQUIRED + tuple(v for v in OPTIONAL if _releases.release_dir("sglang", v).is_dir())
    return _releases.run_script_per_release("sglang", present, "tests/host_fixes/hybrid_checks.py")


@pytest.fixture
def report(all_reports, version):
    if version not in all_reports:
        pytest.skip(f"sglang {version} is not unpacked under {_releases.HOSTS}")
    return all_reports[version]


def _release(version):
    return tuple(int(x) for x in version.split(".")[:3])


@pytest.mark.parametrize("version", VERSIONS)
def test_gdn_hybrid_full_attention_layers(report, version):
    assert f"sglang-{version}" in report["imported_from"]
    assert len(report["gdn"]) == 4
    for case, r in report["gdn"].items():
        assert r["3"]["finite"], case
        assert r["3"]["vs_reference"] < TOL, case


@pytest.mark.parametrize("version", VERSIONS)
def test_the_wrapper_finds_the_pools_on_its_full_attention_child(report, version):
    w = report["gdn_wrapper"]
    assert w["built"], w.get("error")
    if _release(version) >= (0, 5, 13):  # releases whose wrapper reads them
        assert w["req_to_token_pool"] and w["token_to_kv_pool"]


@pytest.mark.parametrize("version", VERSIONS)
def test_swa_pool_windows_after_eviction(report, version):
    if _release(version) < SWA_FROM:
        assert report["swa_served"] is False
        reason = report["swa_refusal"]
        assert reason and "0.5.14" in reason and "--disable-hybrid-swa-memory" in reason
        return
    assert report["swa_served"] is True and len(report["swa"]) == 4
    for case, r in report["swa"].items():
        assert r["evicted"] and r["slots_differ"], case
        assert r["window_gap"] > 0.05, case  # the window matters in this case
        assert r["pools_equal"], case
        for layer in ("0", "1", "2"):
            assert r[layer]["finite"], (case, layer)
            assert r[layer]["vs_reference"] < TOL, (case, layer)
            assert r[layer]["vs_triton"] < TOL, (case, layer)
            assert r[layer]["triton_vs_reference"] < TOL, (case, layer)
