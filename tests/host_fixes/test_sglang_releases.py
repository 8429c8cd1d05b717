"""The SGLang host fixes against the real 0.5.11, 0.5.14, 0.5.18 and 0.5.23 releases.

Each release runs in its own interpreter (tests/host_fixes/release_checks.py).  Proves, per
release: every probe's verdict (the DFLASH draft allow-list fix is needed exactly where the
allow-list is private: 0.5.11, 0.5.14, 0.5.18; nothing is needed on 0.5.23; fixes 2-4 and the
DeepSeek-V4 ones are already upstream in every release that has their code), and that after the patch the release's own
draft-backend resolution (worker __init__ on 0.5.11/0.5.14, the argument hook on 0.5.18)
keeps ``rocm_dflash``, keeps ``triton``, and on ROCm moves an unset or unusable draft backend
to ``rocm_dflash`` with exactly one warning - while before the patch the same code threw
``rocm_dflash`` away.
"""

import pytest

from tests.host_fixes import _releases

VERSIONS = ("0.5.11", "0.5.14", "0.5.18", "0.5.23")
PRIVATE_ALLOW_LIST = {"0.5.11": "worker", "0.5.14": "worker", "0.5.18": "arg_hook"}
ADAPTER_RELEASES = {"0.5.11", "0.5.14", "0.5.18"}  # private allow-list, but inside the adapter's range


@pytest.fixture(scope="module")
def reports():
    return _releases.run_script_per_release("sglang", VERSIONS, "tests/host_fixes/release_checks.py")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_release_itself_was_imported(reports, version):
    r = reports[version]
    assert f"sglang-{version}" in r["imported_from"]


@pytest.mark.parametrize("version", VERSIONS)
def test_fixes_already_upstream_are_not_needed(reports, version):
    dry = reports[version]["dry_run"]
    for fix_id in ("sglang-triton-graph-custom-mask", "sglang-dflash-k-rope-dummy-q",
                   "sglang-qwen3-dflash-capture"):
        assert dry[fix_id]["status"] == "not needed", dry[fix_id]


@pytest.mark.parametrize("version", VERSIONS)
def test_deepseek_v4_verdicts(reports, version):
    """0.5.11 has no DeepSeek-V4; the others carry the HIP radix backend with all three parts of
    the upstream fix (0.5.12, 0.5.13.post1: test_sglang_dsv4_releases.py)."""
    dry = reports[version]["dsv4_dry_run"]
    assert len(dry) == 3 and {v["status"] for v in dry.values()} == {"not needed"}, dry
    if version == "0.5.11":
        assert {v["reason"] for v in dry.values()} == {"this sglang has no DeepSeek-V4"}


def test_legacy_graph_api_is_recognised_as_guarded_on_0_5_11(reports):
    reason = reports["0.5.11"]["dry_run"]["sglang-triton-graph-custom-mask"]["reason"]
    assert "already guard" in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_draft_allow_list_probe(reports, version):
    verdict = reports[version]["dry_run"]["sglang-dflash-draft-backend"]
    if version in PRIVATE_ALLOW_LIST:
        # A dry run does not patch: the catalogue reports the gap as not applied.
        assert verdict["status"] == "refused" and "needed" in verdict["reason"], verdict
        assert reports[version]["draft_resolver"] == PRIVATE_ALLOW_LIST[version]
    else:
        assert verdict["status"] == "not needed"
        assert "add_draft_attention_backend_choices" in verdict["reason"]


@pytest.mark.parametrize("version", sorted(PRIVATE_ALLOW_LIST))
def test_unpatched_release_throws_rocm_dflash_away(reports, version):
    assert reports[version]["before_patch"]["explicit_rocm_dflash"] == "flashinfer"


@pytest.mark.parametrize("version", sorted(PRIVATE_ALLOW_LIST))
def test_adapter_register_applies_the_patch_once(reports, version):
    r = reports[version]
    assert r["patch_status"]["status"] == "applied", r["patch_status"]
    assert r["second_evaluate_same"]


@pytest.mark.parametrize("version", sorted(PRIVATE_ALLOW_LIST))
def test_patched_release_keeps_requested_backends(reports, version):
    after = reports[version]["after_patch"]
    assert after["explicit_rocm_dflash"] == "rocm_dflash"
    assert after["explicit_triton"] == "triton"
    assert after["rocm_explicit_triton"] == "triton"


@pytest.mark.parametrize("version", sorted(PRIVATE_ALLOW_LIST))
def test_patched_release_defaults_to_rocm_dflash_on_rocm(reports, version):
    after = reports[version]["after_patch"]
    assert after["rocm_explicit_trtllm"] == "rocm_dflash"
    assert after["rocm_inherits_aiter"] == "rocm_dflash"
    assert after["rocm_inherits_aiter_again"] == "rocm_dflash"
    warnings = after["rocm_warnings"]
    # One warning per distinct reason, each naming it; the repeated 'aiter' case adds none.
    assert len(warnings) == 2, warnings
    assert any("'trtllm_mha' cannot run" in w for w in warnings)
    assert any("'aiter' (inherited from the target)" in w for w in warnings)


@pytest.mark.parametrize("version", sorted(PRIVATE_ALLOW_LIST))
def test_caller_server_args(reports, version):
    after = reports[version]["after_patch"]
    if PRIVATE_ALLOW_LIST[version] == "worker":
        assert after["caller_args_after_worker"] is None  # the worker resolves on its own copy
    else:
        assert after["caller_args_after_worker"] == "rocm_dflash"  # the hook stores its result


@pytest.mark.parametrize("version", sorted(PRIVATE_ALLOW_LIST))
def test_doctor_on_an_unsupported_release(reports, version):
    report = reports[version]["doctor"]
    host = report["hosts"]["sglang"]
    assert host["version"] == version
    if version in ADAPTER_RELEASES:  # the adapter registers rocm_dflash here (see adapter tests)
        assert host["registered"]
    else:
        assert not host["supported"] and not host["registered"]
    assert host["entry_point"]
    fixes = {f["id"]: f["status"] for f in host["fixes"]}
    assert fixes["sglang-dflash-draft-backend"] == "applied"
    assert report["ok"]  # an unsupported host is reported, not a failure


def test_shared_worker_gate_of_0_5_18_lets_rocm_dflash_through(reports):
    assert reports["0.5.18"]["worker_gate"] == "rocm_dflash"
