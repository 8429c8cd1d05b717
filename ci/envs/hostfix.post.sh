# Runs inside the activated hostfix venv.  Unpacks the sglang releases the host-fix tests import,
# one directory each, without their (CUDA-only) dependencies.  The wheels are cached with the ones
# ci/check_patches.sh uses.
set -euo pipefail
wheels="${DFLASH_WHEEL_CACHE:-$HOME/.cache/dflash-rocm-plugin/wheels}"
mkdir -p "$wheels" "$VIRTUAL_ENV/hosts"
# release  transformers it pins  (older transformers refuse tokenizers > 0.23.0)
for spec in "0.5.11 5.6.0" "0.5.12 5.6.0" "0.5.13.post1 5.8.1" "0.5.14 5.8.1" "0.5.18 5.12.1" "0.5.23 -"; do
    read -r version transformers <<<"$spec"
    target="$VIRTUAL_ENV/hosts/sglang-$version"
    python -m pip download -q --no-deps "sglang==$version" -d "$wheels"
    python -m pip install -q --no-deps --target "$target" "$wheels"/sglang-"$version"-*.whl
    if [[ "$transformers" != - ]]; then
        python -m pip install -q --no-deps --target "$target" "transformers==$transformers" tokenizers==0.22.2
    fi
done
