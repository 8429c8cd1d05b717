"""``dflash-rocm demo``: greedy DFlash speculative decoding with every attention call on the plugin.

Without arguments it builds a seeded tiny Qwen3 target and distills a tiny DFlash draft from it
(a few seconds), then decodes a batch of random prompts twice -- DFlash, and plain target-only
greedy -- and reports whether the outputs are identical token for token (``lossless``), the mean
acceptance length tau (bonus included), and tokens/s of each.  ``--target DIR --draft DIR`` runs
published checkpoints instead (e.g. Qwen/Qwen3-8B + z-lab/Qwen3-8B-DFlash-b16).
"""

from __future__ import annotations

import argparse
import json
import sys

DTYPES = ("auto", "float32", "float16", "bfloat16")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dflash-rocm demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", metavar="DIR", help="Hugging Face Qwen3 checkpoint directory")
    p.add_argument("--draft", metavar="DIR", help="DFlash draft checkpoint directory")
    p.add_argument("--prompt", action="append", default=[], help="prompt text (needs the target's tokenizer; "
                   "repeat for several)")
    p.add_argument("--prompt-ids", action="append", default=[], metavar="IDS",
                   help="comma-separated token ids (repeat for several prompts)")
    p.add_argument("--no-chat-template", action="store_true", help="tokenize --prompt as raw text")
    p.add_argument("--max-new-tokens", type=int, help="tokens to generate per sequence (tiny: 16, real: 128)")
    p.add_argument("--batch", type=int, help="sequences decoded together; prompts are reused cyclically "
                   "(tiny: 3, real: number of prompts)")
    p.add_argument("--block-size", type=int, help="DFlash block (1 anchor + block-1 drafts); "
                   "default: the draft's block_size (16 for z-lab drafts, 8 for the tiny one)")
    p.add_argument("--page-size", type=int, help="paged KV cache page size (tiny: 4, real: 16)")
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="auto: float32 on CPU, bfloat16 on GPU")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (ROCm GPUs are 'cuda')")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (it is shown only when "
                   "stderr is a terminal)")
    tiny = p.add_argument_group("tiny default models")
    tiny.add_argument("--draft-mode", choices=("distilled", "random"), default="distilled",
                      help="random: an untrained draft (still lossless, tau ~ 1)")
    tiny.add_argument("--distill-steps", type=int, default=200)
    tiny.add_argument("--draft-window", type=int, metavar="N",
                      help="a DFlash2-style draft: every draft layer attends over a sliding window of the last "
                           "N keys (still non-causal within its block; N >= the block size), distilled with "
                           "that window; its cache evicts what no later window sees")
    check = p.add_argument_group("self-check")
    check.add_argument("--fault", choices=("none", "skip-verify"), default="none",
                       help="skip-verify: accept drafts unverified; the lossless check must then say no")
    return p


class UsageError(ValueError):
    """A flag's value the demo cannot run with; the message names the flag and what it accepts."""


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 lossless, 1 not lossless (the report is printed first), 2 bad arguments."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        device, dtype, prompts = _validate(args)
    except UsageError as err:
        print(f"dflash-rocm demo: {err}", file=sys.stderr)
        return 2
    import torch

    from dflash_rocm_plugin import ops
    if ops.use_interpreter_without_gpu(device):
        # The tiny shapes gain nothing from threads, and oversubscribed threads on a busy
        # machine cost 10x.
        torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    from dflash_rocm_plugin.demo import report, speculative
    from dflash_rocm_plugin.demo.config import ConfigError
    try:
        setup = _real(args, prompts, dtype, device) if args.target else _tiny(args, prompts, dtype, device)
    except (ConfigError, FileNotFoundError) as err:
        print(f"dflash-rocm demo: {err}", file=sys.stderr)
        return 2
    target, draft, prompts, tokenizer, models = setup
    max_new = _given(args.max_new_tokens, 128 if args.target else 16)
    block = _given(args.block_size, draft.config.block_size)
    window = draft.config.sliding_window
    if window is not None and block > window:
        print(f"dflash-rocm demo: --block-size {block} is longer than the draft's sliding window {window}; "
              "the block must see itself whole", file=sys.stderr)
        return 2
    page = _given(args.page_size, 16 if args.target else 4)
    # a bar only where someone watches (a terminal); logs and pipes stay clean
    bar = report.ProgressBar if sys.stderr.isatty() and not args.no_progress else None
    spec = speculative.dflash_greedy(target, draft, prompts, max_new, block_size=block, page_size=page,
                                     seed=args.seed, fault=args.fault,
                                     progress=bar("dflash     ") if bar else None)
    base = speculative.target_greedy(target, prompts, max_new, page_size=page, seed=args.seed,
                                     progress=bar("target-only") if bar else None)
    result = report.summarize(spec, base, prompts=prompts, block_size=block, page_size=page, device=device,
                              dtype=dtype, models=models, fault=args.fault, draft=draft.config)
    if args.json:
        print(json.dumps(result))
    else:
        print(report.render(result, tokenizer))
    return 0 if result["lossless"] else 1


def _given(value, default):
    return default if value is None else value


def _at_least(flag: str, value, low: int) -> None:
    if value is not None and value < low:
        raise UsageError(f"{flag} must be >= {low}, got {value}")


def _validate(args):
    """Every flag, before any model is built: (device, dtype, prompt ids or None)."""
    if bool(args.target) != bool(args.draft):
        raise UsageError("--target and --draft go together (both checkpoint directories, or neither "
                         "for the tiny models)")
    _at_least("--batch", args.batch, 1)
    _at_least("--max-new-tokens", args.max_new_tokens, 1)
    _at_least("--block-size", args.block_size, 2)  # 1 anchor + at least one drafted token
    _at_least("--page-size", args.page_size, 1)
    _at_least("--distill-steps", args.distill_steps, 1)
    if args.target and args.draft_mode != "distilled":
        raise UsageError("--draft-mode only applies to the tiny models (a checkpoint draft is what it is)")
    if args.draft_window is not None:
        if args.target:
            raise UsageError("--draft-window only applies to the tiny models (a checkpoint draft's window is "
                             "its config.json's sliding_window)")
        from dflash_rocm_plugin.demo.tiny import TINY_BLOCK_SIZE
        _at_least("--draft-window", args.draft_window, _given(args.block_size, TINY_BLOCK_SIZE))
    device = _device(args.device)
    dtype = _dtype(args.dtype, device)
    prompts = _prompt_ids(args.prompt_ids)
    if args.prompt and not args.target:
        raise UsageError("--prompt needs a tokenizer and the tiny models have none: pass token ids with "
                         f"--prompt-ids (0..{_vocab_size(args) - 1}), or use --target/--draft checkpoints")
    if prompts:
        vocab = _vocab_size(args)
        for ids in prompts:
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise UsageError(f"--prompt-ids holds {bad[0]}, outside the target's vocabulary 0..{vocab - 1}")
    return device, dtype, prompts


def _device(text: str):
    import torch

    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {text!r} is not supported (auto, cpu, cuda, cuda:N; ROCm GPUs are 'cuda')")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"ROCm {torch.version.hip}" if torch.version.hip else (
                f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU only")
            raise UsageError(f"--device {text}: torch sees no GPU here (torch {torch.__version__}, {build}); "
                             "use --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise UsageError(f"--device {text}: only {count} GPU(s) visible (cuda:0..cuda:{count - 1})")
    return device


def _dtype(name: str, device):
    import torch

    if name == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return getattr(torch, name)


def _vocab_size(args) -> int:
    if not args.target:
        from dflash_rocm_plugin.demo import tiny
        return tiny.tiny_configs()[0].vocab_size
    from dflash_rocm_plugin.demo import checkpoint
    from dflash_rocm_plugin.demo.config import ConfigError
    try:
        return int(checkpoint.read_config(args.target)["vocab_size"])
    except (ConfigError, KeyError, ValueError, OSError) as err:
        raise UsageError(f"--target {args.target}: cannot read its vocabulary size ({err})") from None


def _tiny(args, prompts, dtype, device):
    from dflash_rocm_plugin.demo import tiny
    target = tiny.tiny_target(args.seed)
    draft = tiny.tiny_draft(target, mode=args.draft_mode, seed=args.seed, steps=args.distill_steps,
                            sliding_window=args.draft_window)
    vocab = target.config.vocab_size
    prompts = prompts or tiny.random_prompts(_given(args.batch, 3), vocab, seed=args.seed + 10,
                                             exclude=draft.config.mask_token_id)
    models = {"target": "tiny Qwen3 (seeded random, %d layers, hidden %d, vocab %d)" % (
        target.config.num_hidden_layers, target.config.hidden_size, vocab),
        "draft": "tiny DFlash (%d layers, %s, target layers %s%s)" % (
        draft.config.num_hidden_layers, args.draft_mode, draft.config.target_layer_ids,
        "" if args.draft_window is None else f", sliding window {args.draft_window}")}
    return (target.to(device=device, dtype=dtype), draft.to(device=device, dtype=dtype),
            _batch(prompts, args.batch), None, models)


def _real(args, prompts, dtype, device):
    from dflash_rocm_plugin.demo import checkpoint
    target = checkpoint.load_target(args.target, dtype=dtype, device=device)
    draft = checkpoint.load_draft(args.draft, target.config, dtype=dtype, device=device)
    tokenizer = None
    prompts = list(prompts)
    if args.prompt or not prompts:
        tokenizer = _tokenizer(args.target)
        texts = args.prompt or ["Write a Python function that checks whether a number is prime."]
        for text in texts:
            if tokenizer.chat_template and not args.no_chat_template:
                ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                                    add_generation_prompt=True, enable_thinking=False)
                ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            else:
                ids = tokenizer(text)["input_ids"]
            prompts.append(list(ids))
    models = {"target": str(args.target), "draft": str(args.draft)}
    return target, draft, _batch(prompts, args.batch), tokenizer, models


def _tokenizer(path):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("--prompt needs the 'transformers' package (pip install transformers), "
                          "or pass token ids with --prompt-ids") from None
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as err:  # noqa: BLE001 - any loader failure means: no usable tokenizer
        raise ConfigError(f"no usable tokenizer in {path} ({err}); pass --prompt-ids instead") from None


def _prompt_ids(texts) -> list[list[int]]:
    prompts = []
    for text in texts:
        try:
            ids = [int(t) for t in text.replace(" ", "").split(",") if t]
        except ValueError:
            raise UsageError(f"--prompt-ids takes comma-separated integers, e.g. 9707,11,1879; got {text!r}") from None
        if not ids:
            raise UsageError("--prompt-ids got an empty list; give at least one token id")
        prompts.append(ids)
    return prompts


def _batch(prompts: list[list[int]], batch: int | None) -> list[list[int]]:
    n = _given(batch, len(prompts))
    return [prompts[i % len(prompts)] for i in range(n)]


if __name__ == "__main__":
    sys.exit(main())
