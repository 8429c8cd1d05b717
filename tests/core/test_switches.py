"""The switches both adapters read: one parse, one set of messages (``dflash_rocm_plugin.switches``)."""

import logging

import pytest

from dflash_rocm_plugin import switches


@pytest.mark.parametrize("value, on", [
    (None, False), ("", False), ("0", False), ("false", False), ("No", False), ("off", False),
    ("1", True), ("true", True), ("YES", True), (" on ", True)])
def test_values(value, on):
    env = {} if value is None else {switches.DISABLE: value}
    sw = switches.read(switches.DISABLE, env)
    assert (sw.on, sw.problem) == (on, None)


def test_a_value_neither_on_nor_off_is_named_and_read_as_off():
    sw = switches.read(switches.ALLOW_UNTESTED_HOST, {switches.ALLOW_UNTESTED_HOST: "2"})
    assert sw.on is False
    assert sw.problem == ("DFLASH_ROCM_ALLOW_UNTESTED_HOST='2' is not understood (on: 1, true, yes, on; off: unset "
                          "or 0, false, no, off); read as off")


def test_state_lists_every_switch(monkeypatch):
    monkeypatch.setenv(switches.DISABLE, "1")
    monkeypatch.delenv(switches.ALLOW_UNTESTED_HOST, raising=False)
    assert switches.state() == {
        "DFLASH_ROCM_DISABLE": {"name": "DFLASH_ROCM_DISABLE", "value": "1", "on": True, "problem": None},
        "DFLASH_ROCM_ALLOW_UNTESTED_HOST": {"name": "DFLASH_ROCM_ALLOW_UNTESTED_HOST", "value": None, "on": False,
                                            "problem": None}}
    assert switches.disabled() and not switches.untested_host_allowed()


def test_messages_name_the_version_the_tested_ranges_and_the_switch():
    refused = switches.refused_host_message("sglang", "0.5.24", "0.5.11-0.5.18, 0.5.20-0.5.23")
    assert "SGLang 0.5.24 is outside the supported ranges 0.5.11-0.5.18, 0.5.20-0.5.23" in refused
    assert "set DFLASH_ROCM_ALLOW_UNTESTED_HOST=1" in refused
    untested = switches.untested_host_message("vllm", "0.34.0.dev3", ">=0.32,<0.34")
    assert untested.startswith("dflash_rocm_plugin: UNTESTED HOST: vLLM 0.34.0.dev3 is outside the tested range "
                               ">=0.32,<0.34; DFLASH_ROCM_ALLOW_UNTESTED_HOST=1")
    assert "DFLASH_ROCM_DISABLE=1" in switches.disabled_message("vllm")


@pytest.mark.parametrize("listed, problem", [
    (None, False), (["rocm_dflash"], False), ({"a", "rocm_dflash"}, False), (["a"], True), ([""], True),
    (set(), True)])
def test_allow_list(monkeypatch, listed, problem):
    monkeypatch.setenv("VLLM_PLUGINS", "a")
    found = switches.allow_list_problem("vllm", listed)
    assert (found is not None) is problem
    if problem:
        assert found.startswith("VLLM_PLUGINS='a' does not list 'rocm_dflash'")


def test_log_once(caplog):
    log = logging.getLogger("dflash_rocm_plugin.test")
    with caplog.at_level(logging.WARNING, logger="dflash_rocm_plugin.test"):
        for _ in range(3):
            switches.log_once(log, "vllm", "once, test_log_once")
        switches.log_once(log, "sglang", "once, test_log_once")
    assert [r.getMessage() for r in caplog.records] == ["once, test_log_once"] * 2
