"""Run as a fresh process (like an SGLang launcher or scheduler): without plugins
``--attention-backend rocm_dflash`` must be rejected by argparse; after SGLang's own
``load_plugins()`` (entry point ``sglang.srt.plugins``) target and DFLASH draft must both
resolve to it, and repeated registration must leave one entry.  Prints one JSON line."""

import json
import sys


def main(target: str, draft: str) -> None:
    from sglang.srt.arg_groups import choices
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view
    from sglang.srt.server_args import prepare_server_args

    argv = ["--model-path", target, "--attention-backend", "rocm_dflash", "--speculative-algorithm", "DFLASH",
            "--speculative-draft-model-path", draft, "--device", "cuda"]
    result = {}
    try:
        prepare_server_args(argv)
        result["rejected_without_plugin"] = False
    except SystemExit:
        result["rejected_without_plugin"] = True

    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.plugins import load_plugins

    load_plugins()
    args = prepare_server_args(argv)
    args.resolve_once()
    view = resolved_view(args)
    result["prefill_decode"] = list(attention_backends_of(view))
    result["draft"] = view.speculative_draft_attention_backend

    from dflash_rocm_plugin.sglang import register

    register()
    register()
    result["registered"] = "rocm_dflash" in ATTENTION_BACKENDS
    result["choices_count"] = choices.ATTENTION_BACKEND_CHOICES.count("rocm_dflash")
    result["draft_choices_count"] = choices.DRAFT_ATTENTION_BACKEND_CHOICES.count("rocm_dflash")
    print("PROBE " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
