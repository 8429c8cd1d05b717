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
import os
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
    check = p.add_argument_group("self-check")
    check.add_argument("--fault", choices=("none", "skip-verify"), default="none",
                       help="skip-verify: accept drafts unverified; the lossless check must then say no")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if bool(args.target) != bool(args.draft):
        print("dflash-rocm demo: --target and --draft go together", file=sys.stderr)
        return 2
    import torch

    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if device.type == "cpu":
        # Triton runs interpreted on the CPU; the tiny shapes gain nothing from threads, and
        # oversubscribed threads on a busy machine cost 10x.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(1)
    dtype = (torch.float32 if device.type == "cpu" else torch.bfloat16) if args.dtype == "auto" \
        else getattr(torch, args.dtype)
    torch.manual_seed(args.seed)

    from dflash_rocm_plugin.demo import report, speculative
    from dflash_rocm_plugin.demo.config import ConfigError
    try:
        setup = _real(args, dtype, device) if args.target else _tiny(args, dtype, device)
    except (ConfigError, FileNotFoundError) as err:
        print(f"dflash-rocm demo: {err}", file=sys.stderr)
        return 2
    target, draft, prompts, tokenizer, models = setup
    max_new = args.max_new_tokens or (128 if args.target else 16)
    block = args.block_size or draft.config.block_size
    page = args.page_size or (16 if args.target else 4)
    if max_new < 1 or block < 2 or page < 1:
        print("dflash-rocm demo: --max-new-tokens >= 1, --block-size >= 2, --page-size >= 1", file=sys.stderr)
        return 2
    # a bar only where someone watches (a terminal); logs and pipes stay clean
    bar = report.ProgressBar if sys.stderr.isatty() and not args.no_progress else None
    spec = speculative.dflash_greedy(target, draft, prompts, max_new, block_size=block, page_size=page,
                                     seed=args.seed, fault=args.fault,
                                     progress=bar("dflash     ") if bar else None)
    base = speculative.target_greedy(target, prompts, max_new, page_size=page, seed=args.seed,
                                     progress=bar("target-only") if bar else None)
    result = report.summarize(spec, base, prompts=prompts, block_size=block, page_size=page, device=device,
                              dtype=dtype, models=models, fault=args.fault)
    if args.json:
        print(json.dumps(result))
    else:
        print(report.render(result, tokenizer))
    return 0


def _tiny(args, dtype, device):
    from dflash_rocm_plugin.demo import tiny
    target = tiny.tiny_target(args.seed)
    draft = tiny.tiny_draft(target, mode=args.draft_mode, seed=args.seed, steps=args.distill_steps)
    vocab = target.config.vocab_size
    prompts = _prompt_ids(args) or tiny.random_prompts(args.batch or 3, vocab, seed=args.seed + 10,
                                                       exclude=draft.config.mask_token_id)
    models = {"target": "tiny Qwen3 (seeded random, %d layers, hidden %d, vocab %d)" % (
        target.config.num_hidden_layers, target.config.hidden_size, vocab),
        "draft": "tiny DFlash (%d layers, %s, target layers %s)" % (
        draft.config.num_hidden_layers, args.draft_mode, draft.config.target_layer_ids)}
    return (target.to(device=device, dtype=dtype), draft.to(device=device, dtype=dtype),
            _batch(prompts, args.batch), None, models)


def _real(args, dtype, device):
    from dflash_rocm_plugin.demo import checkpoint
    target = checkpoint.load_target(args.target, dtype=dtype, device=device)
    draft = checkpoint.load_draft(args.draft, target.config, dtype=dtype, device=device)
    tokenizer = None
    prompts = _prompt_ids(args)
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
    vocab = target.config.vocab_size
    for p in prompts:
        if not p or max(p) >= vocab or min(p) < 0:
            raise ConfigError(f"--prompt-ids must be non-empty ids in 0..{vocab - 1}")
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


def _prompt_ids(args) -> list[list[int]]:
    try:
        return [[int(t) for t in s.replace(" ", "").split(",") if t] for s in args.prompt_ids]
    except ValueError:
        from dflash_rocm_plugin.demo.config import ConfigError
        raise ConfigError("--prompt-ids takes comma-separated integers, e.g. 9707,11,1879") from None


def _batch(prompts: list[list[int]], batch: int | None) -> list[list[int]]:
    n = batch or len(prompts)
    if n < 1:
        from dflash_rocm_plugin.demo.config import ConfigError
        raise ConfigError("--batch must be >= 1")
    return [prompts[i % len(prompts)] for i in range(n)]


if __name__ == "__main__":
    sys.exit(main())
