"""``dflash-rocm``: the command-line entry.  Subcommands live in their own modules."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "demo": ("dflash_rocm_plugin.demo.cli", "Tiny (or real) DFlash speculative decoding through the plugin's ops"),
    "bench": ("dflash_rocm_plugin.bench.cli", "Kernel benchmark on DFlash draft/verify shapes"),
    "doctor": ("dflash_rocm_plugin.doctor", "What the plugin sees on this machine, and whether hosts can use it"),
    "tune": ("dflash_rocm_plugin.tune.cli", "Measure the launch choices on this GPU and keep the ones that win"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="dflash-rocm", description=__doc__)
    parser.add_argument("command", choices=sorted(SUBCOMMANDS),
                        help="; ".join(f"{k}: {v[1]}" for k, v in sorted(SUBCOMMANDS.items())))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    args, rest = parser.parse_known_args(argv[:1])[0], argv[1:]
    # Without a GPU the kernels can only run interpreted; Triton reads TRITON_INTERPRET when it
    # is first imported, which has not happened yet.
    from dflash_rocm_plugin import ops
    ops.use_interpreter_without_gpu()
    module = importlib.import_module(SUBCOMMANDS[args.command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
