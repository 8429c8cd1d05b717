# Runs inside the activated hostfix venv.  Unpacks the sglang releases the host-fix tests import,
# one directory each, without their (CUDA-only) dependencies.  The wheels are cached with the ones
# ci/check_patches.sh uses.
set -euo pipefail
wheels="${DFLASH_WHEEL_CACHE:-$HOME/.cache/dflash-rocm-plugin/wheels}"
mkdir -p "$wheels" "$VIRTUAL_ENV/hosts"
for version in 0.5.11 0.5.14 0.5.18 0.5.23; do
    python -m pip download -q --no-deps "sglang==$version" -d "$wheels"
    python -m pip install -q --no-deps --no-compile --target "$VIRTUAL_ENV/hosts/sglang-$version" \
        "$wheels"/sglang-"$version"-*.whl
done
