#!/usr/bin/env bash
# Build Horovod 0.28.1 (torch + gloo, no MPI/TF/MXNet) from the PyPI sdist into a cached wheel,
# then install it into the venv. `make setup` runs this; a second run reuses the wheel.
#
# Why a patched source build: 0.28.1 (2023-06, the last release) has no wheels and its plain
# sdist build fails against torch >= 2.1 (C++14; torch's headers need C++17). The recipe:
#   - CMAKE_CXX_STANDARD 17 in the top-level CMakeLists.txt AND horovod/torch/CMakeLists.txt
#     (only the second: gloo link error, multiple definition of kDefaultTimeout);
#   - CMAKE_POLICY_VERSION_MINIMUM=3.5 (cmake >= 4 refuses the sdist's old minimum);
#   - --no-build-isolation (torch must be importable while it builds).
# Usage: scripts/build_horovod.sh [VENV]   (default .venv). Env: WHEEL_DIR (default
# ~/.cache/ddlstudy/wheels: outside the checkout, so every clone on this machine reuses one build).
set -euo pipefail

VERSION=0.28.1
VENV=${1:-.venv}
PY="$VENV/bin/python"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

if [[ ! -x "$PY" ]]; then
    echo "build_horovod: no python at $PY; fix: run 'make setup' (it creates the venv first)" >&2
    exit 2
fi
TORCH=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) || {
    echo "build_horovod: torch does not import in $VENV; fix: run 'make setup'" >&2
    exit 2
}
# The wheel links against this torch's C++ ABI: cache it per torch version and Python.
PYTAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEEL_DIR=${WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ddlstudy/wheels}/horovod-$VERSION-torch$TORCH-$PYTAG
mkdir -p "$WHEEL_DIR"

installed() {
    # An import of horovod.torch (its C++ extension) is the test; --check-build can claim a
    # framework that is not there.
    "$PY" - <<PYEOF 2>/dev/null
import importlib.metadata as md
import horovod.torch  # noqa: F401
assert md.version("horovod") == "$VERSION"
PYEOF
}

if installed; then
    echo "build_horovod: horovod $VERSION already installed in $VENV"
    exit 0
fi

wheel=$(ls "$WHEEL_DIR"/horovod-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [[ -z "$wheel" ]]; then
    command -v cmake >/dev/null || "$PY" -m pip install -q cmake
    command -v g++ >/dev/null || {
        echo "build_horovod: no C++ compiler; fix: apt-get install -y g++ cmake" >&2
        exit 2
    }
    src=$(mktemp -d "${TMPDIR:-/tmp}/horovod-build.XXXXXX")
    trap 'rm -rf "$src"' EXIT
    start=$(date +%s)
    "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$VERSION" -d "$src"
    tar xzf "$src/horovod-$VERSION.tar.gz" -C "$src"
    tree="$src/horovod-$VERSION"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$tree/CMakeLists.txt" "$tree/horovod/torch/CMakeLists.txt"
    grep -q 'CMAKE_CXX_STANDARD 17' "$tree/horovod/torch/CMakeLists.txt"
    echo "build_horovod: building horovod $VERSION against torch $TORCH (a few minutes)"
    CMAKE_POLICY_VERSION_MINIMUM=3.5 \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_CPU_OPERATIONS=gloo \
    MAKEFLAGS="-j$(nproc)" \
        "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$WHEEL_DIR" "$tree"
    echo "build_horovod: built in $(( $(date +%s) - start )) s"
    wheel=$(ls "$WHEEL_DIR"/horovod-"$VERSION"-*.whl | head -1)
fi
"$PY" -m pip install -q "$wheel"
installed || {
    echo "build_horovod: $wheel installed but horovod.torch does not import; fix: rm -r $WHEEL_DIR and rerun" >&2
    exit 2
}
echo "build_horovod: horovod $VERSION installed from $wheel"
