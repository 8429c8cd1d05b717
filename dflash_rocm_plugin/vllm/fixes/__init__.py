"""Runtime fixes for older vLLM releases, one module per fix (declared in ``host_fixes.FIXES``).

Each module has ``probe() -> Probe`` (looks at the loaded vLLM's code, never at its version
string alone) and ``patch(state) -> str``; ``dflash_rocm_plugin.hostfix`` runs them.
The source checks are plain functions of source text so tests can run them on every
release's files, including ROCm-only modules that do not import on a CPU machine.
"""
