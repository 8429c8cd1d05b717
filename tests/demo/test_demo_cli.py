"""`dflash-rocm demo` end to end on the tiny default models (Triton interpreter): the DFlash run
is lossless against the independent target-only run and accepts more than the bonus token
(tau > 1); an untrained draft is still lossless but accepts less; a decoder that skips
verification is caught (lossless: no); the --json schema; the console dispatch."""

import json

import pytest

from dflash_rocm_plugin.demo import cli, report

FAST = ["--batch", "2", "--max-new-tokens", "12", "--no-progress"]


def _run_json(capsys, *extra):
    assert cli.main(["--json", *FAST, *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def default_run():
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--json", *FAST]) == 0
    return json.loads(out.getvalue())


def test_default_demo_is_lossless_with_tau_above_one(default_run):
    r = default_run
    assert r["lossless"] is True
    assert r["tokens_equal"] == r["tokens_total"] == 2 * 12
    assert r["tau"] > 1.0
    assert any(a > 1 for seq in r["acceptance"] for a in seq)
    # partial acceptances: the rollback path ran, not only all-or-nothing blocks
    assert any(1 < a < r["block_size"] for seq in r["acceptance"] for a in seq) or r["tau"] < r["block_size"]


def test_json_schema(default_run):
    r = default_run
    assert set(report.SCHEMA_KEYS) <= set(r)
    assert r["batch"] == 2 and r["max_new_tokens"] == 12 and r["block_size"] == 8
    for key in ("dflash", "target_only"):
        assert {"tokens", "seconds", "tokens_per_s"} <= set(r[key])
    assert r["device"] == "cpu" and "interpreter" in r["kernel_path"]
    # every token after the prefill's first one is accounted to a verify step
    assert all(sum(seq) == 12 - 1 for seq in r["acceptance"])
    assert r["first_mismatch"] is None


def test_random_draft_is_lossless_but_accepts_less(default_run, capsys):
    r = _run_json(capsys, "--draft-mode", "random")
    assert r["lossless"] is True
    assert r["tau"] < default_run["tau"]


def test_skipped_verification_is_caught(capsys):
    r = _run_json(capsys, "--fault", "skip-verify")
    assert r["lossless"] is False
    assert r["first_mismatch"] is not None
    assert r["tokens_equal"] < r["tokens_total"]


def test_text_report_and_console_dispatch(capsys):
    from dflash_rocm_plugin import cli as top
    assert top.main(["demo", *FAST, "--batch", "1", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "lossless:    yes" in out and "tau:" in out and "tokens/s" in out and "kernels:" in out


def test_bad_arguments_are_rejected(capsys):
    assert cli.main(["--target", "/nonexistent"]) == 2
    assert "--target and --draft go together" in capsys.readouterr().err
    assert cli.main(["--prompt-ids", "1,x", *FAST]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
