"""``dflash-rocm doctor``: text and JSON output, and its exit status.

In this environment neither host is installed in site-packages, so the in-process runs show
the no-host report.  The real SGLang 0.5.23 and 0.5.18 releases (unpacked by the hostfix
environment) are put on PYTHONPATH for CLI runs in subprocesses: on 0.5.23 the plugin's
entry point is seen, ``rocm_dflash`` is registered after SGLang's own ``load_plugins()`` and
every declared fix, the DeepSeek-V4 ones included, is listed as "not needed" but the gpt-oss /
Gemma-4 backend lists, "applied" (exit 0); with the plugin filtered out by ``SGLANG_PLUGINS`` the
same supported host reports the failed registration and exits 1.  (The reports on the older
releases are checked in test_sglang_releases.py, from the same process that exercised the fix.)
"""

import json

import pytest

from dflash_rocm_plugin import doctor
from tests.host_fixes import _releases


def test_json_without_hosts(capsys):
    assert doctor.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["platform"] in ("CPU", "CUDA", "ROCm")
    assert report["versions"]["torch"] and report["versions"]["sglang"] is None
    assert report["hosts"]["sglang"] == {**report["hosts"]["sglang"], "installed": False, "registered": None}
    assert report["kernel_path"]
    assert report["ok"] is True


def test_text_without_hosts(capsys):
    assert doctor.main([]) == 0
    text = capsys.readouterr().out
    assert "platform: " in text and "kernel path: " in text and "tuned launches: " in text
    assert "triton launches: " in text
    assert "fp8 KV caches: float8_e4m3fn and float8_e4m3fnuz decoded from their bytes" in text  # no GPU here
    assert "vllm: not installed" in text and "sglang: not installed" in text
    assert text.rstrip().endswith("status: OK")


@pytest.mark.parametrize("arch, native, decoded", [("gfx942", "float8_e4m3fnuz", "float8_e4m3fn"),
                                                   ("gfx950", "float8_e4m3fn", "float8_e4m3fnuz"),
                                                   ("sm_90", "float8_e4m3fn", "float8_e4m3fnuz"),
                                                   ("sm_80", "float8_e4m3fn", "float8_e4m3fnuz")])
def test_fp8_format_of_each_gpu(monkeypatch, arch, native, decoded):
    from dflash_rocm_plugin import ops
    monkeypatch.setattr(ops, "interpreting", lambda: False)
    monkeypatch.delenv("DFLASH_ROCM_FP8_QK", raising=False)
    ops.fp8_qk_policy.cache_clear()
    info = doctor.fp8_report(arch)
    fp8_dots = arch != "sm_80"  # Ampere multiplies no fp8 operands
    pv_split = arch == "gfx942"  # P V on fp8 dots too, P as two parts, where tuned
    assert info == {"native": native, "decoded": [decoded], "fp8_dots": fp8_dots, "fp8_pv_split": pv_split,
                    "fp8_qk": "off", "fp8_qk_env": "DFLASH_ROCM_FP8_QK"}
    line = doctor._fp8_line(info, arch)
    assert line.startswith(f"{native} converted by {arch}")
    dots = "Q K^T on fp8 dots, q as two fp8 parts" if fp8_dots else "no fp8 dots here: 16-bit dots"
    if pv_split:
        dots += " (P V too, P as two fp8 parts, where a tuned entry chose it)"
    assert line.endswith(f"{dots}; q rounded into fp8 for no call (DFLASH_ROCM_FP8_QK=off)")
    monkeypatch.setenv("DFLASH_ROCM_FP8_QK", "draft")
    ops.fp8_qk_policy.cache_clear()
    try:
        line = doctor._fp8_line(doctor.fp8_report(arch), arch)
        assert line.endswith("q rounded into fp8 for the non-causal (DFlash draft) calls (DFLASH_ROCM_FP8_QK=draft)")
    finally:
        monkeypatch.delenv("DFLASH_ROCM_FP8_QK")
        ops.fp8_qk_policy.cache_clear()


def test_a_bad_fp8_qk_switch_fails_the_doctor(monkeypatch, capsys):
    """A ``DFLASH_ROCM_FP8_QK`` value it does not know would refuse every layer over an fp8 cache: the doctor
    says so, names the values, and exits 1."""
    from dflash_rocm_plugin import ops
    monkeypatch.setenv("DFLASH_ROCM_FP8_QK", "verify")
    ops.fp8_qk_policy.cache_clear()
    try:
        assert doctor.main([]) == 1
        text = capsys.readouterr().out
        assert "DFLASH_ROCM_FP8_QK='verify' is not one of: off, draft, all" in text
        assert "status: FAILED - DFLASH_ROCM_FP8_QK='verify'" in text
        assert doctor.main(["--json"]) == 1
        report = json.loads(capsys.readouterr().out)
        assert report["ok"] is False and report["fp8"]["fp8_qk"] is None
    finally:
        monkeypatch.delenv("DFLASH_ROCM_FP8_QK")
        ops.fp8_qk_policy.cache_clear()


def test_switches_are_shown(monkeypatch, capsys):
    monkeypatch.setenv("DFLASH_ROCM_ALLOW_UNTESTED_HOST", "1")
    monkeypatch.delenv("DFLASH_ROCM_DISABLE", raising=False)
    assert doctor.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["switches"]["DFLASH_ROCM_ALLOW_UNTESTED_HOST"] == {
        "name": "DFLASH_ROCM_ALLOW_UNTESTED_HOST", "value": "1", "on": True, "problem": None}
    assert report["switches"]["DFLASH_ROCM_DISABLE"]["on"] is False
    assert doctor.main([]) == 0
    text = capsys.readouterr().out
    assert "switches: DFLASH_ROCM_DISABLE unset (off); DFLASH_ROCM_ALLOW_UNTESTED_HOST=1 (ON)" in text


def test_untested_host_under_the_opt_in_is_expected_to_register(monkeypatch, capsys):
    real = doctor.package_version
    monkeypatch.setattr(doctor, "package_version",
                        lambda names: "0.5.24" if "sglang" in names else real(names))
    from dflash_rocm_plugin import sglang as adapter
    monkeypatch.setattr(adapter, "check_registered", lambda: (True, "stand-in: registered"))
    monkeypatch.setattr(adapter, "allow_list", lambda: None)
    monkeypatch.delenv("DFLASH_ROCM_ALLOW_UNTESTED_HOST", raising=False)
    assert doctor.main(["--host", "sglang"]) == 0  # outside the range, nothing expected
    assert "sglang 0.5.24 (outside the supported range" in capsys.readouterr().out
    monkeypatch.setenv("DFLASH_ROCM_ALLOW_UNTESTED_HOST", "1")
    assert doctor.main(["--host", "sglang"]) == 0
    text = capsys.readouterr().out
    assert "UNTESTED, registered anyway: DFLASH_ROCM_ALLOW_UNTESTED_HOST=1" in text
    assert "allow-list: SGLANG_PLUGINS unset (every plugin loads)" in text
    monkeypatch.setattr(adapter, "check_registered", lambda: (False, "stand-in: absent"))
    assert doctor.main(["--host", "sglang"]) == 1  # opted in but not registered: a failure


def test_supported_ranges_come_from_the_extras():
    ranges = doctor.supported_ranges()
    assert set(ranges) == {"vllm", "sglang"}
    assert doctor.in_range("0.5.23", ranges["sglang"]) and doctor.in_range("0.5.18", ranges["sglang"])
    assert doctor.in_range("0.5.11", ranges["sglang"]) and doctor.in_range("0.5.13.post1", ranges["sglang"])
    assert not doctor.in_range("0.5.10", ranges["sglang"]) and not doctor.in_range("0.5.19", ranges["sglang"])
    assert doctor.in_range("0.5.23+rocm7", ranges["sglang"])


def test_failed_registration_of_a_supported_host_exits_1(monkeypatch, capsys):
    real = doctor.package_version
    monkeypatch.setattr(doctor, "package_version",
                        lambda names: "0.5.23" if "sglang" in names else real(names))
    from dflash_rocm_plugin import sglang as adapter
    monkeypatch.setattr(adapter, "check_registered", lambda: (False, "not in ATTENTION_BACKENDS"))
    assert doctor.main(["--host", "sglang"]) == 1
    text = capsys.readouterr().out
    assert "rocm_dflash: NOT registered - not in ATTENTION_BACKENDS" in text
    assert "status: FAILED" in text


def test_a_crashing_host_check_is_reported_not_raised(monkeypatch, capsys):
    real = doctor.package_version
    monkeypatch.setattr(doctor, "package_version", lambda names: "0.33.0" if "vllm" in names else real(names))
    from dflash_rocm_plugin import vllm as adapter
    monkeypatch.setattr(adapter, "check_registered", lambda: 1 / 0)
    assert doctor.main(["--json", "--host", "vllm"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "ZeroDivisionError" in report["hosts"]["vllm"]["detail"]
    assert [f["id"] for f in report["hosts"]["vllm"]["fixes"]] == [
        "vllm-aiter-fa-extend-noncausal", "vllm-noncausal-claims"]


RUNS = {
    "0.5.23": ("0.5.23", {}),
    "0.5.23-filtered": ("0.5.23", {"SGLANG_PLUGINS": "some_other_plugin"}),
    "0.5.23-disabled": ("0.5.23", {"DFLASH_ROCM_DISABLE": "1"}),
}


@pytest.fixture(scope="module")
def real_runs():
    if not all(_releases.release_dir("sglang", v).is_dir() for v, _ in RUNS.values()):
        pytest.skip("sglang releases not unpacked (ci/envs/hostfix.post.sh)")
    results, procs, pending = {}, {}, list(RUNS)
    while pending or procs:
        while pending and len(procs) < 2:
            name = pending.pop(0)
            version, env = RUNS[name]
            procs[name] = _releases.start("sglang", version, ["-m", "dflash_rocm_plugin.cli", "doctor", "--json",
                                                             "--host", "sglang"], **env)
        name = next(iter(procs))
        rc, out, err = _releases.finish(procs.pop(name))
        start = out.find("{")
        assert start >= 0, f"no JSON from doctor ({name}): {out[-2000:]}\n{err[-4000:]}"
        results[name] = (rc, json.loads(out[start:]), err)
    return results


def test_real_sglang_0_5_23_registered(real_runs):
    rc, report, err = real_runs["0.5.23"]
    host = report["hosts"]["sglang"]
    assert host["version"] == "0.5.23" and host["supported"] and host["entry_point"]
    assert host["registered"] is True, (host["detail"], err[-3000:])
    from dflash_rocm_plugin.sglang import host_fixes
    assert [f["id"] for f in host["fixes"]] == [f.id for f in host_fixes.FIXES]  # the DeepSeek-V4 ones too
    # Every fix is upstream in 0.5.23 but the gpt-oss / Gemma-4 backend lists, which no release widens.
    statuses = {f["id"]: f["status"] for f in host["fixes"]}
    assert statuses.pop("sglang-model-attention-backends") == "applied"
    assert set(statuses.values()) == {"not needed"}
    assert rc == 0 and report["ok"]


def test_real_sglang_0_5_23_filtered_plugin_fails(real_runs):
    rc, report, _ = real_runs["0.5.23-filtered"]
    host = report["hosts"]["sglang"]
    assert host["entry_point"] and host["registered"] is False
    assert host["allow_list"]["value"] == "some_other_plugin"
    assert host["detail"].startswith("SGLANG_PLUGINS='some_other_plugin' does not list 'rocm_dflash'")
    assert rc == 1 and not report["ok"]


def test_real_sglang_0_5_23_switched_off_says_so(real_runs):
    rc, report, _ = real_runs["0.5.23-disabled"]
    host = report["hosts"]["sglang"]
    assert report["switches"]["DFLASH_ROCM_DISABLE"]["on"] is True
    assert host["registered"] is False and host["detail"].startswith("DFLASH_ROCM_DISABLE=1 turns the plugin off")
    # Reported as they would be, none applied: the one 0.5.23 needs shows as needed and not applied.
    statuses = {f["id"]: f for f in host["fixes"]}
    backends = statuses.pop("sglang-model-attention-backends")
    assert backends["status"] == "refused" and backends["reason"].startswith("needed, not applied"), backends
    assert {f["status"] for f in statuses.values()} == {"not needed"}
    assert rc == 1 and not report["ok"]
