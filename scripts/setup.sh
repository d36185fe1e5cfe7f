#!/usr/bin/env bash
# Installs what fusetune needs on a fresh Debian machine (only what is missing), fetches ONNX's
# operator conformance data, and builds the project.
#
#   scripts/setup.sh                 # deps + a Release build in ./build
#   scripts/setup.sh --sanitize      # deps + an ASan+UBSan build in ./build-asan
#   scripts/setup.sh --tsan          # deps + a ThreadSanitizer build in ./build-tsan
#   scripts/setup.sh --deps-only     # deps and conformance data, no build
set -euo pipefail
cd "$(dirname "$0")/.."

mode=build
case "${1:-}" in
  --sanitize) mode=sanitize ;;
  --tsan) mode=tsan ;;
  --deps-only) mode=deps ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--sanitize|--tsan|--deps-only]" >&2; exit 2 ;;
esac

# Debian packages the build and the tests use. The CUDA toolkit (NVRTC) is optional for this
# build: it comes with the machine image where GPUs are targeted, and is not in Debian's main.
packages=(cmake ninja-build g++ pkg-config python3 python3-pip python3-venv
          libprotobuf-dev protobuf-compiler libzmq3-dev cppzmq-dev nlohmann-json3-dev
          libsqlite3-dev libssl-dev libcpp-httplib-dev libjs-chart.js libseccomp-dev libdw-dev python3-prometheus-client
          python3-websocket chromium libgtest-dev libgmock-dev libboost-context-dev libxgboost-dev
          python3-torch python3-torchvision python3-onnx python3-dev python3-numpy python3-pytest pybind11-dev libdlpack-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ONNX's operator conformance cases ship inside the onnx Python package. fusetune runs two sets:
# onnx 1.12.0's (opset 17), the data files of its wheel (no Python import), and onnx 1.23.2's.
testdata=third_party/onnx-testdata
if [ ! -f "$testdata/node/test_abs/model.onnx" ]; then
  wheel_sha=9fd2f4e23078df197bb76a59b9cd8f5a43a6ad2edc035edb3ecfb9042093e05a
  tmp=$(mktemp -d)
  echo "setup: fetching ONNX 1.12.0 conformance data"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.10 \
    --platform manylinux_2_17_x86_64 -d "$tmp" onnx==1.12.0
  wheel=$(ls "$tmp"/onnx-1.12.0-*.whl)
  echo "$wheel_sha  $wheel" | sha256sum -c --quiet
  python3 - "$wheel" "$testdata" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
prefix = "onnx/backend/test/data/node/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dest = os.path.join(out, "node", name[len(prefix):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(z.read(name))
PY
  rm -rf "$tmp"
fi

# cuDNN's frontend (header-only C++; its scaled dot-product attention node builds the attention
# library calls, backend/cudnn_attention.h): the headers of NVIDIA's PyPI wheel, pinned.
frontend=third_party/cudnn-frontend
if [ ! -f "$frontend/include/cudnn_frontend.h" ]; then
  wheel_sha=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
  tmp=$(mktemp -d)
  echo "setup: fetching cudnn-frontend 1.32.0's headers"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$tmp" nvidia-cudnn-frontend==1.32.0
  wheel=$(ls "$tmp"/nvidia_cudnn_frontend-1.32.0-*.whl)
  echo "$wheel_sha  $wheel" | sha256sum -c --quiet
  python3 - "$wheel" "$frontend" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            dest = os.path.join(out, name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as f:
                f.write(z.read(name))
PY
  rm -rf "$tmp"
fi

# onnx 1.23's cases (its wheel no longer carries the files): generated from the cases' definitions
# by onnx 1.23.2 itself, installed with numpy in a virtual environment of its own; with them,
# sweeps of Cast to and from the narrow types computed by onnx's reference implementation. The
# generator's packages are pinned, and the data is made again when the pins change
# (GENERATED_BY): its Cast from floating point to the 4- and 2-bit integers, whose result the
# operator leaves undefined out of range, comes from ml_dtypes, which keeps the low bits up to
# 0.6 (as fusetune does, and as ONNX defines for integers) and gives 0 from 0.7 on.
testdata_new=third_party/onnx-testdata-1.23
generator_pins="onnx==1.23.2 ml_dtypes==0.6.0 numpy==2.4.6"
if [ ! -f "$testdata_new/node/test_abs/model.onnx" ] || [ ! -f "$testdata_new/narrow/test_sweep_cast_FLOAT_to_INT4/model.onnx" ] ||
   [ "$(cat "$testdata_new/GENERATED_BY" 2>/dev/null)" != "$generator_pins" ]; then
  venv=third_party/onnx-1.23-venv
  echo "setup: generating ONNX 1.23.2 conformance data ($generator_pins)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  # shellcheck disable=SC2086 # one argument per pin
  "$venv/bin/python" -m pip install --quiet $generator_pins
  rm -rf "$testdata_new.tmp"
  "$venv/bin/python" scripts/onnx_node_tests.py "$testdata_new.tmp"
  echo "$generator_pins" > "$testdata_new.tmp/GENERATED_BY"
  rm -rf "$testdata_new"
  mv "$testdata_new.tmp" "$testdata_new"
fi

# onnxruntime (PyPI) for the Python deployment example's oracle (examples/python/deploy_bert.py,
# test examples.python_bert): a venv of Debian's interpreter that sees Debian's packages (numpy,
# onnx), so that fusetune's module, built for that interpreter, loads there too.
ort_venv=third_party/ort-venv
ort_pin="onnxruntime==1.32.0"
if ! "$ort_venv/bin/python" -c "import onnxruntime" 2>/dev/null; then
  echo "setup: installing $ort_pin in $ort_venv"
  rm -rf "$ort_venv"
  /usr/bin/python3 -m venv --system-site-packages "$ort_venv"
  "$ort_venv/bin/python" -m pip install --quiet "$ort_pin"
fi

[ "$mode" = deps ] && exit 0

jobs=$(nproc)
# Unity builds (CMake's CMAKE_UNITY_BUILD: each target's sources compiled in batches of eight, one
# compiler run a batch): the headers each source repeats (libstdc++'s C++20 headers are 61,000
# lines a source, protobuf's and nlohmann/json's more) are parsed once a batch, and their templates
# instantiated once. Measured on CI's two cores, clean: the Release build 523 s -> 310 s.
# FUSETUNE_UNITY_BUILD=OFF builds source by source, as a developer editing one file may prefer.
unity=${FUSETUNE_UNITY_BUILD:-ON}
if [ "$mode" = sanitize ]; then
  # Debug (assertions on) at -O1, as AddressSanitizer's authors advise: the same checks, and the
  # CPU-bound tests run 2.4-3.2x faster than at -O0 (compiled.gpt2 177 s -> 64 s here). Line
  # tables only (-g1): every report's stack trace names file and line, and a source compiles in
  # about 70% of the time it takes with full debug information. The tests share the Release
  # build's cache folder (cmake/FusetuneTestCaches.cmake): the host builds of kernels are the same.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" -DFUSETUNE_SANITIZE=ON \
    -DCMAKE_UNITY_BUILD="$unity" "-DFUSETUNE_TEST_CACHE_DIR=$PWD/build/test-cache" >/dev/null
  cmake --build build-asan -j "$jobs"
elif [ "$mode" = tsan ]; then
  # ThreadSanitizer, optimized as the ASan build is (-O1, line tables), assertions on.
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1" -DFUSETUNE_TSAN=ON \
    -DCMAKE_UNITY_BUILD="$unity" "-DFUSETUNE_TEST_CACHE_DIR=$PWD/build/test-cache" >/dev/null
  cmake --build build-tsan -j "$jobs"
else
  # Release as it ships (-O3, NDEBUG), warnings as errors as for every developer build; no debug
  # information (a build with it: cmake -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo).
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSETUNE_WERROR=ON -DCMAKE_UNITY_BUILD="$unity" >/dev/null
  cmake --build build -j "$jobs"
fi
