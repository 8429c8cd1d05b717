"""`dflash-rocm demo` end to end on the tiny default models (Triton interpreter): the DFlash run
is lossless against the independent target-only run and accepts more than the bonus token
(tau > 1); an untrained draft is still lossless but accepts less; a decoder that skips
verification is caught (lossless: no); the --json schema; the console dispatch."""

import json

import pytest

from dflash_rocm_plugin.demo import cli, report

FAST = ["--batch", "2", "--max-new-tokens", "12", "--no-progress"]


def _run_json(capsys, *extra, status=0):
    assert cli.main(["--json", *FAST, *extra]) == status
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


def test_bf16_on_the_cpu_is_lossless(capsys):
    """bf16 runs on the CPU too: ops runs the interpreter's dots over bf16 operands in fp32."""
    run = _run_json(capsys, "--device", "cpu", "--dtype", "bfloat16")
    assert run["lossless"] is True and run["tau"] > 1.0 and run["dtype"] == "bfloat16"


def test_skipped_verification_is_caught_and_exits_1(capsys):
    r = _run_json(capsys, "--fault", "skip-verify", status=1)
    assert r["lossless"] is False
    assert r["first_mismatch"] is not None
    assert r["tokens_equal"] < r["tokens_total"]


def test_text_report_and_console_dispatch(capsys):
    from dflash_rocm_plugin import cli as top
    assert top.main(["demo", *FAST, "--batch", "1", "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "lossless:    yes" in out and "tau:" in out and "tokens/s" in out and "kernels:" in out


def test_text_report_of_a_lossy_run_is_printed_before_exit_1(capsys):
    assert cli.main([*FAST, "--batch", "1", "--max-new-tokens", "6", "--fault", "skip-verify"]) == 1
    out = capsys.readouterr().out
    assert "lossless:    no" in out and "FAULT INJECTED: skip-verify" in out


@pytest.fixture
def no_model_may_be_built(monkeypatch):
    """Bad flags must be answered before any model is built."""
    from dflash_rocm_plugin.demo import checkpoint, tiny

    def refuse(*_a, **_k):
        raise AssertionError("a model was built before the arguments were checked")
    monkeypatch.setattr(tiny, "tiny_target", refuse)
    monkeypatch.setattr(checkpoint, "load_target", refuse)


@pytest.mark.parametrize("argv,message", [
    (["--target", "/nonexistent"], "--target and --draft go together"),
    (["--prompt-ids", "1,x"], "--prompt-ids takes comma-separated integers"),
    (["--prompt-ids", ""], "--prompt-ids got an empty list"),
    (["--prompt-ids", "5,999"], "--prompt-ids holds 999, outside the target's vocabulary 0..127"),
    (["--prompt-ids", "-1"], "--prompt-ids holds -1"),
    (["--batch", "0"], "--batch must be >= 1, got 0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["--page-size", "0"], "--page-size must be >= 1, got 0"),
    (["--block-size", "1"], "--block-size must be >= 2, got 1"),
    (["--distill-steps", "0"], "--distill-steps must be >= 1, got 0"),
    (["--prompt", "hello"], "--prompt needs a tokenizer and the tiny models have none"),
    (["--prompt", ""], "--prompt needs a tokenizer"),
    (["--device", "tpu"], "--device 'tpu' is not supported (auto, cpu, cuda, cuda:N"),
    (["--target", "/nonexistent", "--draft", "/nonexistent", "--prompt-ids", "1"], "--target /nonexistent: cannot read"),
])
def test_bad_arguments_are_rejected_at_once(no_model_may_be_built, capsys, argv, message):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1, err  # one line


def test_an_unavailable_gpu_is_answered_at_once(no_model_may_be_built, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cli.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda: torch sees no GPU here" in err and err.count("\n") == 1
