"""Runtime fixes for older SGLang releases, one module per fix (declared in ``host_fixes.FIXES``).

Each module has ``probe() -> Probe`` (looks at the loaded SGLang, never at its version
string alone) and ``patch(state) -> str``; ``dflash_rocm_plugin.hostfix`` runs them.
The probes also take the objects they inspect as arguments, so tests can point them at any
release's classes, or at a stand-in written like a release that no longer imports.
"""
