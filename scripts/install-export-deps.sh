#!/usr/bin/env bash
# Installs the Debian packages needed by scripts/export_models.py.
# They are installed for the system interpreter /usr/bin/python3 (a pyenv
# `python3` on PATH will not see them). Idempotent: installs only what is missing.
set -euo pipefail

PKGS=(python3-torch python3-torchvision python3-onnx python3-numpy)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi

if ((${#missing[@]} > 0)); then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
else
  echo "all export dependencies already installed"
fi

/usr/bin/python3 -c 'import torch, torchvision, onnx, numpy; print("torch", torch.__version__, "torchvision", torchvision.__version__, "onnx", onnx.__version__, "numpy", numpy.__version__)'
