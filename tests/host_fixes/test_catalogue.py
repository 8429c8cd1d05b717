"""The host fixes each adapter declares, and the machinery that runs them: every record is
complete, every diff is declared and documented, and the runner's contract holds - outcomes
applied / not needed / refused (with why), a failing probe or patch never raises, an applied fix
is not probed or patched again, and each outcome is logged once per process.
"""

import logging
import sys
import types
from pathlib import Path

import pytest

from dflash_rocm_plugin import hostfix as catalogue
from dflash_rocm_plugin.hostfix import Fix, Probe, Status
from dflash_rocm_plugin.sglang import host_fixes as sglang_fixes
from dflash_rocm_plugin.vllm import host_fixes as vllm_fixes

REPO = Path(__file__).resolve().parents[2]
DECLARED = sglang_fixes.FIXES + vllm_fixes.FIXES


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    for name in ("_applied", "_last"):
        monkeypatch.setattr(catalogue, name, {})
    monkeypatch.setattr(catalogue, "_logged", set())


@pytest.mark.parametrize("fix", DECLARED, ids=lambda f: f.id)
def test_records_are_complete(fix):
    assert fix.host in ("sglang", "vllm")
    assert callable(fix.probe) and callable(fix.patch)
    assert fix.upstream and fix.title
    for diff in fix.diffs:
        assert (REPO / diff).is_file(), diff


def test_every_diff_is_declared_and_documented():
    listed = {d for f in DECLARED for d in f.diffs}
    on_disk = {str(p.relative_to(REPO)) for p in (REPO / "patches").rglob("*.diff")}
    assert on_disk == listed
    readme = (REPO / "patches/README.md").read_text()
    for fix in DECLARED:
        assert fix.id in readme, fix.id
    for diff in on_disk:
        host, version, name = Path(diff).parts[1:]
        assert f"{host}/{version}" in readme and name in readme, diff


def test_ids_unique_and_each_adapter_declares_its_own_host():
    ids = [f.id for f in DECLARED]
    assert len(ids) == len(set(ids))
    assert {f.host for f in sglang_fixes.FIXES} == {"sglang"}
    assert {f.host for f in vllm_fixes.FIXES} == {"vllm"}


# --- runner contract, with probes/patches in a throwaway module ---------------------------------------
CALLS = []


def _module():
    m = types.ModuleType("fake_fixes")
    m.needed = lambda: Probe.need("gap found", "state")
    m.fine = lambda: Probe.not_needed("already upstream")
    m.unsafe = lambda: Probe.refuse("no source")
    m.broken = lambda: 1 / 0

    def patch(state):
        CALLS.append(state)
        return "patched"

    def bad_patch(state):
        raise RuntimeError("boom")

    m.patch, m.bad_patch = patch, bad_patch
    sys.modules["fake_fixes"] = m
    return m


def _fix(probe, patch="patch"):
    m = sys.modules["fake_fixes"]
    return Fix(f"fake-{probe}", "sglang", "t", "u", getattr(m, probe), getattr(m, patch))


def test_outcomes(caplog):
    _module()
    CALLS.clear()
    with caplog.at_level(logging.INFO, logger="dflash_rocm_plugin.host_fixes"):
        applied = catalogue.evaluate(_fix("needed"))
        assert applied.status is Status.APPLIED and "gap found; patched" in applied.reason
        assert catalogue.evaluate(_fix("needed")) == applied  # not probed or patched again
        assert CALLS == ["state"]
        assert catalogue.evaluate(_fix("fine")).status is Status.NOT_NEEDED
        refused = catalogue.evaluate(_fix("unsafe"))
        assert refused.status is Status.REFUSED and refused.reason == "no source"
        broken = catalogue.evaluate(_fix("broken"))
        assert broken.status is Status.REFUSED and "ZeroDivisionError" in broken.reason
        failed = catalogue.evaluate(Fix("fake-bad", "sglang", "t", "u", sys.modules["fake_fixes"].needed,
                                        sys.modules["fake_fixes"].bad_patch))
        assert failed.status is Status.REFUSED and "boom" in failed.reason
        catalogue.evaluate(_fix("fine"))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("fake-fine" in m for m in messages) == 1
    assert sum("fake-needed" in m for m in messages) == 1
    assert [r.levelno for r in caplog.records if "fake-unsafe" in r.getMessage()] == [logging.WARNING]
    assert {s.id for s in catalogue.statuses("sglang")} >= {"fake-needed", "fake-fine", "fake-unsafe"}


def test_dry_run_does_not_patch():
    _module()
    CALLS.clear()
    st = catalogue.evaluate(_fix("needed"), apply=False)
    assert st.status is Status.REFUSED and "not applied" in st.reason and CALLS == []
    assert st.as_dict()["status"] == "refused"


def test_host_apply_without_hosts_never_raises():
    for result in (sglang_fixes.apply(), vllm_fixes.apply()):
        assert result and all(s.status in (Status.NOT_NEEDED, Status.REFUSED) for s in result)
