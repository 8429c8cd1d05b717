"""Bench output: the stdout table, the target verdicts, the JSON record and the PNG plot."""

from __future__ import annotations

import json
import pathlib

from dflash_rocm_plugin.bench import shapes as shapes_mod


def speedups(rows: list[dict]) -> None:
    """Add ``speedup_vs`` (peer time / plugin time) to every plugin row, in place."""
    by_shape: dict = {}
    for r in rows:
        by_shape.setdefault(r["label"], []).append(r)
    for group in by_shape.values():
        mine = next((r for r in group if r["impl"] == "plugin" and r.get("time_us")), None)
        if mine is None:
            continue
        mine["speedup_vs"] = {r["impl"]: r["time_us"] / mine["time_us"]
                              for r in group if r["impl"] != "plugin" and r.get("time_us")}


def table(rows: list[dict], ceiling: float) -> str:
    # us / TB/s: CUDA-graph replay of back-to-back calls; 1-call us: one call after an L2 flush
    # (what a layer pays between other kernels); eager us: one eager launch, host cost included.
    head = (f"{'shape':<34} {'impl':<20} {'us':>9} {'TB/s':>6} {'%ceil':>6} {'TFLOP/s':>7} {'1-call us':>9} "
            f"{'TB/s':>6} {'eager us':>9} {'rel err':>8}  notes")
    lines = [f"copy ceiling (D2D, read+write): {ceiling:.2f} TB/s", head, "-" * len(head)]
    for r in rows:
        t = f"{r['time_us']:9.1f}" if r.get("time_us") else f"{'-':>9}"
        e = f"{r['eager_us']:9.1f}" if r.get("eager_us") else f"{'-':>9}"
        f = f"{r['flushed_us']:9.1f}" if r.get("flushed_us") else f"{'-':>9}"
        fbw = f"{r['flushed_tbs']:6.2f}" if r.get("flushed_tbs") else f"{'-':>6}"
        bw = f"{r['tbs']:6.2f}" if r.get("tbs") else f"{'-':>6}"
        pc = f"{100 * r['frac_ceiling']:5.1f}%" if r.get("frac_ceiling") else f"{'-':>6}"
        tf = f"{r['tflops']:7.1f}" if r.get("tflops") else f"{'-':>7}"
        err = f"{r['rel_err']:8.1e}" if r.get("rel_err") is not None else f"{'-':>8}"
        notes = r.get("status", "")
        if r.get("speedup_vs"):
            notes += " x" + " x".join(f"{v:.1f} vs {k}" for k, v in r["speedup_vs"].items())
        lines.append(f"{r['label']:<34} {r['impl']:<20} {t} {bw} {pc} {tf} {f} {fbw} {e} {err}  {notes}".rstrip())
    return "\n".join(lines)


def targets(rows: list[dict], ceiling: float, triton_peers) -> list[dict]:
    """Verdicts for the goals of the shapes that were run: the q16 block's bandwidth (and one-call
    bandwidth), or the workload's bandwidth, TFLOP/s and the peers it must not lose to."""
    verdicts = []
    for r in rows:
        if r["impl"] != "plugin" or not r.get("tbs"):
            continue
        key = (r["batch"], r["context"])
        v = {"label": r["label"], "tbs": r["tbs"], "tflops": r["tflops"], "checks": []}
        work = shapes_mod.WORKLOADS.get(r.get("workload", "q16"))
        if work is None:
            if key in shapes_mod.TARGET_BANDWIDTH_TBS:
                need = shapes_mod.TARGET_BANDWIDTH_TBS[key]
                v["checks"].append(_check("TB/s", r["tbs"], need))
                if need >= 3.8:
                    v["checks"].append(_check("fraction of copy ceiling", r["frac_ceiling"], 0.9))
                peer_x = {k: x for k, x in (r.get("speedup_vs") or {}).items() if k in triton_peers}
                if peer_x:
                    best = min(peer_x, key=peer_x.get)
                    v["checks"].append(_check(f"x vs best Triton peer {best}", peer_x[best], 4.0))
            if key in shapes_mod.ONE_CALL_TBS and r.get("flushed_tbs"):
                v["checks"].append(_check("one-call TB/s", r["flushed_tbs"], shapes_mod.ONE_CALL_TBS[key]))
        else:
            if key in work.tbs:
                v["checks"].append(_check("TB/s", r["tbs"], work.tbs[key]))
            if work.tflops:
                v["checks"].append(_check("TFLOP/s", r["tflops"], work.tflops))
            for peer, cells in work.at_least.items():
                x = (r.get("speedup_vs") or {}).get(peer)
                if key in cells and x is not None:
                    v["checks"].append(_check(f"x vs {peer}", x, 1.0))
        if v["checks"]:
            verdicts.append(v)
    return verdicts


def _check(what: str, value: float, need: float) -> dict:
    return {"what": what, "value": value, "need": need, "met": value >= need}


def verdict_text(verdicts: list[dict]) -> str:
    lines = ["targets:"]
    for v in verdicts:
        parts = [f"{c['what']} {c['value']:.2f} (need {c['need']}) {'MET' if c['met'] else 'MISSED'}"
                 for c in v["checks"]]
        lines.append(f"  {v['label']:<34} " + "; ".join(parts))
    return "\n".join(lines)


def write_json(path, meta: dict, rows: list[dict], verdicts: list[dict]) -> None:
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": rows, "targets": verdicts}, indent=1) + "\n")


def plot(path, meta: dict, rows: list[dict]) -> None:
    import matplotlib  # lazily: only the bench needs it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["mode"], r["page"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.8), squeeze=False)
    for ax, (mode, page) in zip(axes[0], panels):
        sel = [r for r in rows if r["mode"] == mode and r["page"] == page and r.get("tbs")]
        xs = sorted({(r["batch"], r["context"]) for r in sel}, key=lambda bc: (bc[0] * bc[1], bc))
        labels = [f"{b}x{c // 1024}K" for b, c in xs]
        for impl in sorted({r["impl"] for r in sel}, key=lambda n: (n != "plugin", n)):
            ys = []
            for bc in xs:
                hit = [r["tbs"] for r in sel if r["impl"] == impl and (r["batch"], r["context"]) == bc]
                ys.append(max(hit) if hit else float("nan"))
            ax.plot(range(len(xs)), ys, marker="o", lw=2.5 if impl == "plugin" else 1.2, label=impl)
        ax.axhline(meta["copy_ceiling_tbs"], ls="--", color="gray", label="D2D copy ceiling")
        ax.set_xticks(range(len(xs)), labels, rotation=45)
        ax.set_title(f"{mode} ({'causal' if mode == 'verify' else 'non-causal'}), page {page}")
        ax.set_ylabel("unique KV TB/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{meta['gpu']}  torch {meta['torch']}  triton {meta['triton']}  {meta['date']}", fontsize=9)
    fig.tight_layout()
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
