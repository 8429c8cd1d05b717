"""The gpt-oss / Gemma-4 attention-backend fix against the real SGLang releases
(model_backend_checks.py, one interpreter per release): each release's own ``ServerArgs``
resolution for a config-only gpt-oss checkpoint (every release) and Gemma-4 checkpoint
(0.5.13.post1 on) refuses ``--attention-backend rocm_dflash`` before the adapter registers, the
probe says why, and after ``register()`` the same resolution accepts it - while the lists still
refuse what they refused before (flashinfer) and no other model family's list changes.
"""

import pytest

from tests.host_fixes import _releases

REQUIRED = ("0.5.11", "0.5.14", "0.5.18", "0.5.23")
OPTIONAL = ("0.5.12", "0.5.13.post1")
VERSIONS = REQUIRED + OPTIONAL
WHERE = {v: "sglang.srt.server_args.ServerArgs._handle_model_specific_adjustments" for v in VERSIONS}
WHERE["0.5.23"] = "sglang.srt.arg_groups.model_hook.handle_model_specific_adjustments"
OPENINGS = {"gpt_oss": "GptOssForCausalLM requires one of", "gemma4": "Gemma4 only supports"}


@pytest.fixture(scope="module")
def all_reports():
    present = REQUIRED + tuple(v for v in OPTIONAL if _releases.release_dir("sglang", v).is_dir())
    return _releases.run_script_per_release("sglang", present, "tests/host_fixes/model_backend_checks.py")


@pytest.fixture
def report(all_reports, version):
    if version not in all_reports:
        pytest.skip(f"sglang {version} is not unpacked under {_releases.HOSTS}")
    return all_reports[version]


def _families(version):
    release = tuple(int(x) for x in version.split(".")[:3])
    return ("gpt_oss", "gemma4") if release >= (0, 5, 13) else ("gpt_oss",)


@pytest.mark.parametrize("version", VERSIONS)
def test_probe_verdict(report, version):
    assert f"sglang-{version}" in report["imported_from"]
    dry = report["dry_run"]
    # A dry run does not patch: the gap is reported as needed, not applied.
    assert dry["status"] == "refused" and "needed, not applied" in dry["reason"], dry
    assert f"GptOssForCausalLM in {WHERE[version]}" in dry["reason"]
    assert ("Gemma4 in" in dry["reason"]) == ("gemma4" in _families(version))


@pytest.mark.parametrize("version", VERSIONS)
def test_unpatched_release_refuses_rocm_dflash(report, version):
    for family in _families(version):
        before = report["before"][family]
        assert not before["accepted"] and before["error"] == "AssertionError", before
        assert before["message"].startswith(OPENINGS[family])


@pytest.mark.parametrize("version", VERSIONS)
def test_register_applies_it_once(report, version):
    assert report["status"]["status"] == "applied", report["status"]
    assert report["second_register_same"]
    assert report["probe_after"] == "no gpt-oss / Gemma-4 attention-backend list without rocm_dflash"


@pytest.mark.parametrize("version", VERSIONS)
def test_patched_release_accepts_rocm_dflash(report, version):
    for family in _families(version):
        assert report["after"][family] == {"accepted": True, "attention_backend": "rocm_dflash"}, family
        assert report["after_triton"][family] == {"accepted": True, "attention_backend": "triton"}, family


@pytest.mark.parametrize("version", VERSIONS)
def test_the_lists_stay_closed_to_other_backends(report, version):
    for family in _families(version):
        refused = report["after_flashinfer"][family]
        assert not refused["accepted"] and refused["message"].startswith(OPENINGS[family]), refused
    changed = [c for lists in report["lists_changed"].values() for c in lists]
    # Only the gpt-oss (and Gemma-4) lists gained rocm_dflash; Llama4's, Exaone's... are as they were.
    assert len(changed) == len(_families(version)) and all("rocm_dflash" in c for c in changed), changed
