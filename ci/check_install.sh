#!/usr/bin/env bash
# The package as a user gets it: build the wheel from this checkout, install it (not editable)
# into a fresh venv, and check what a user would:
#   - pip resolves it next to the torch that is already there and installs nothing else;
#   - both hosts' entry-point groups list the plugin, from the installed wheel's metadata;
#   - `dflash-rocm doctor` passes and `dflash-rocm demo` decodes losslessly.
# The venv starts with a CPU torch alone; a CPU torch brings no Triton (GPU builds bring their
# own), so after the check that pip adds nothing, the wheel goes in with its [triton] extra.
#
#   bash ci/check_install.sh
# shellcheck source=ci/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export PIP_DISABLE_PIP_VERSION_CHECK=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say() { printf '[install] %s\n' "$*" >&2; }

core="$(bash "$REPO_ROOT/ci/env.sh" core)" || { say "FAIL: the core environment (its pip builds the wheel)"; exit 1; }
pin() { grep -E "^$1==" "$REPO_ROOT/ci/envs/core.txt"; }

say "building the wheel from a copy of the checkout"
mkdir -p "$work/src"
cp -r "$REPO_ROOT/pyproject.toml" "$REPO_ROOT/README.md" "$REPO_ROOT/dflash_rocm_plugin" "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
quiet_pip "$core" wheel --no-deps --no-build-isolation -w "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/dflash_rocm_plugin-*.whl)"
say "built $(basename "$wheel")"

say "fresh venv with $(pin torch)"
"$PYTHON" -m venv "$work/venv"
py="$work/venv/bin/python"
quiet_pip "$work/venv" install "$(pin torch)"
# pip's report of what it would add: the plugin alone, torch being there already.
"$py" -m pip install -q --dry-run --report "$work/plan.json" "$wheel"
"$py" - "$work/plan.json" <<'PY'
import json, sys
names = sorted(i["metadata"]["name"] for i in json.load(open(sys.argv[1]))["install"])
assert names == ["dflash-rocm-plugin"], f"pip would install {names}; expected the plugin alone"
PY
say "installing ${wheel##*/}[triton] with $(pin triton)"
quiet_pip "$work/venv" install "${wheel}[triton]" "$(pin triton)"

say "installed metadata: not editable, entry points in both host groups"
(cd "$work" && "$py" - <<'PY'
import importlib.metadata as md, json, pathlib, sys
dist = md.distribution("dflash-rocm-plugin")
direct = dist.read_text("direct_url.json")
assert direct is None or not json.loads(direct).get("dir_info", {}).get("editable"), "installed editable"
import dflash_rocm_plugin
site = pathlib.Path(sys.prefix).resolve()
assert site in pathlib.Path(dflash_rocm_plugin.__file__).resolve().parents, dflash_rocm_plugin.__file__
want = {"vllm.general_plugins": "dflash_rocm_plugin.vllm:register",
        "sglang.srt.plugins": "dflash_rocm_plugin.sglang:register",
        "console_scripts": "dflash_rocm_plugin.cli:main"}
for group, target in want.items():
    eps = {ep.name: ep.value for ep in md.entry_points(group=group) if ep.dist.name == "dflash-rocm-plugin"}
    got = eps.get("dflash-rocm" if group == "console_scripts" else "rocm_dflash")
    assert got == target, f"{group}: {eps}"
    print(f"  {group}: {got}")
PY
)

say "dflash-rocm doctor"
(cd "$work" && "$work/venv/bin/dflash-rocm" doctor)
say "dflash-rocm demo"
(cd "$work" && "$work/venv/bin/dflash-rocm" demo --batch 1 --max-new-tokens 6 --no-progress)
say "ok: the wheel installs alone, registers both entry points, and its doctor and demo pass"
