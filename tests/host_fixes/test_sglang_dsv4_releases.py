"""The DeepSeek-V4 ROCm fixes against the real sglang releases of the hostfix environment.

Each release runs in its own interpreter (tests/host_fixes/dsv4_checks.py).  Per release: each
probe's verdict (0.5.12 has DeepSeek-V4 but no HIP radix backend: refused, naming the release to
move to; 0.5.13.post1 and 0.5.23 carry the upstream fix: not needed; the verdicts on 0.5.11, 0.5.14
and 0.5.18 are checked in test_sglang_releases.py), as doctor shows them too; registration wraps the release's own ``dsv4`` backend
factory and runs none of these fixes; that factory, asked for a speculating target on (faked)
ROCm, runs them first and logs each outcome once, and the host's own error still reaches the
caller.  Then the applied path on real code written like a partial back-port: 0.5.12's
DraftBackendFactory and CUDA DeepseekV4AttnBackend (the code the HIP radix backend was forked
from) and, on the releases with the HIP module, their own classes with one part of the fix taken
out; each probe finds its gap, the patch gives the upstream behaviour, and the probe then reports
"already patched".
"""

import pytest

from tests.host_fixes import _releases

VERSIONS = ("0.5.12", "0.5.13.post1", "0.5.23")  # 0.5.11, 0.5.14, 0.5.18: test_sglang_releases.py
WITH_HIP = ("0.5.13.post1", "0.5.23")
IDS = ("sglang-dsv4-hip-draft-dispatch", "sglang-dsv4-hip-eager-verify-metadata",
       "sglang-dsv4-hip-draft-step-cache-loc")
HIP_FILE = "deepseek_v4_backend_hip_radix.py"


@pytest.fixture(scope="module")
def reports():
    return _releases.run_script_per_release("sglang", VERSIONS, "tests/host_fixes/dsv4_checks.py")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_release_itself_was_imported(reports, version):
    assert f"sglang-{version}" in reports[version]["imported_from"]


@pytest.mark.parametrize("version", VERSIONS)
def test_verdicts(reports, version):
    dry, doctor = reports[version]["dry_run"], reports[version]["doctor_fixes"]
    assert list(dry) == list(IDS)
    for fix_id in IDS:
        verdict = dry[fix_id]
        assert doctor[fix_id] == verdict["status"]
        if version == "0.5.12":
            assert verdict["status"] == "refused", verdict
            assert "no HIP radix backend" in verdict["reason"]
            assert "move to sglang 0.5.13.post1 or later" in verdict["reason"]
        else:
            assert verdict["status"] == "not needed", verdict
    if version in WITH_HIP:
        assert "is_hip()" in dry[IDS[0]]["reason"]
        assert "no lazy upgrade under SGLANG_PREP_IN_CUDA_GRAPH" in dry[IDS[1]]["reason"]
        assert "per_step_draft_out_cache_loc" in dry[IDS[2]]["reason"]


@pytest.mark.parametrize("version", VERSIONS)
def test_registration_installs_the_hook_and_runs_none_of_them(reports, version):
    hook = reports[version]["hook"]
    assert hook["host_has_dsv4"] and hook["installed"]
    assert hook["wraps_host_factory"] and hook["same_after_second_register"]
    assert hook["registration_ran_dsv4"] == []


@pytest.mark.parametrize("version", VERSIONS)
def test_speculating_start_up_on_rocm_runs_them_once(reports, version):
    startup = reports[version]["startup"]
    assert startup["ran_without_speculation"] == []
    assert sorted(startup["statuses"]) == sorted(IDS)
    assert all(startup["host_errors"]), startup["host_errors"]  # the host's error is not swallowed
    log = startup["log"]
    assert sorted(line[1].split()[3].rstrip(":") for line in log) == sorted(IDS)  # once each
    level = "WARNING" if version == "0.5.12" else "INFO"
    assert {line[0] for line in log} == {level}


def test_0_5_12_draft_factory_gets_the_dispatch(reports):
    d = reports["0.5.12"]["dispatch"]
    assert d["probe"][:2] == [True, False] and "no is_hip() dispatch" in d["probe"][2]
    assert d["rocm_decode"]["built"] == "DeepseekV4MultiStepBackend" and not d["rocm_decode"]["pair"]
    assert d["rocm_prefill"]["built"] == "DeepseekV4HipRadixBackend"
    assert "deepseek_v4_backend.py" in d["cuda_decode"]["files"]  # elsewhere: the host's CUDA backend
    assert d["reprobe"] == [False, "already patched"]


def test_0_5_12_lazy_target_verify_is_made_eager(reports):
    v = reports["0.5.12"]["verify"]
    assert v["probe"][:2] == [True, False] and "SGLANG_PREP_IN_CUDA_GRAPH" in v["probe"][2]
    assert v["before"] == "DSV4RawVerifyMetadata"
    kind, seq_lens_cpu, same_loc, kwargs = v["after"]
    assert kind == "eager" and seq_lens_cpu == [3, 8] and same_loc
    assert "extend_seq_lens" not in kwargs and "seq_lens_cpu" in kwargs
    assert v["reprobe"] == "already patched"


def test_0_5_12_draft_step_gets_its_slice(reports):
    r = reports["0.5.12"]
    s = r["step"]
    assert not r["host_helper"]
    assert s["probe_without_helper"][:2] == [True, True]
    assert "no per_step_draft_out_cache_loc" in s["probe_without_helper"][2]
    assert s["probe"][:2] == [True, False]
    assert s["baked"] == [[10, 11, 12, 20, 21, 22], [11, 21]]  # step 1 of 3, two requests
    assert s["caller_buffer_back"] and s["reprobe"] == "already patched"


@pytest.mark.parametrize("version", WITH_HIP)
def test_backport_without_dispatch_reaches_the_real_hip_backend(reports, version):
    d = reports[version]["dispatch"]
    assert d["probe"][:2] == [True, False], d["probe"]
    for kind in ("rocm_decode", "rocm_prefill"):
        assert HIP_FILE in d[kind]["files"], d[kind]  # the real HIP radix constructor ran
    assert HIP_FILE not in d["cuda_decode"]["files"] and "deepseek_v4_backend.py" in d["cuda_decode"]["files"]
    assert d["reprobe"] == [False, "already patched"]


@pytest.mark.parametrize("version", WITH_HIP)
def test_backport_with_lazy_verify_is_made_eager(reports, version):
    v = reports[version]["verify"]
    assert v["probe"][:2] == [True, False]
    assert v["before"] == "tuple"  # the stand-in's raw route
    assert v["after"][:3] == ["eager", [3, 8], True] and v["reprobe"] == "already patched"


@pytest.mark.parametrize("version", WITH_HIP)
def test_backport_step_slice_verdicts(reports, version):
    s = reports[version]["step"]
    assert s["partial"][:2] == [True, True] and "the other entry point slices" in s["partial"][2]
    assert s["probe"][:2] == [True, False]
    assert "init_forward_metadata," in s["probe"][2] and "init_forward_metadata_in_graph" in s["probe"][2]
