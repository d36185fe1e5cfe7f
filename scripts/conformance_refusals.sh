#!/usr/bin/env bash
# docs/conformance.md's list of the ops that keep onnx 1.23's conformance cases from running, made
# from what `onnx_conformance --refusals` prints (each op with its case count, in name order) and
# written between the page's `<!-- refusals-1.23 -->` markers, wrapped at 100 columns.
# --check rewrites nothing and exits 1 if the page's list differs (ctest docs.conformance_refusals).
#   scripts/conformance_refusals.sh [--check] [ONNX_CONFORMANCE] (default build/onnx_conformance)
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
tool=${1:-build/onnx_conformance}
data=third_party/onnx-testdata-1.23/node
if [ ! -d "$data" ]; then
  echo "SKIP: ONNX 1.23 conformance data absent; run scripts/setup.sh"
  exit 77
fi
list=$("$tool" "$data" --exclusions tests/conformance/exclusions-1.23.txt --refusals | sed -n 's/^refused: //p')
python3 - "$check" "$list" <<'PY'
import re, sys, textwrap
check, refused = sys.argv[1] == "1", sys.argv[2]
path = "docs/conformance.md"
page = open(path).read()
begin, end = "<!-- refusals-1.23 -->", "<!-- /refusals-1.23 -->"
if begin not in page or end not in page:
    sys.exit(f"{path}: no {begin} ... {end} markers")
# An op and its count stay on one line.
text = "Ops of the onnx 1.23 cases that do not run (with their case counts): " + refused.replace(" (", "\x00(") + "."
body = "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False)).replace("\x00", " ")
new = page[:page.index(begin) + len(begin)] + "\n" + body + "\n" + page[page.index(end):]
if check:
    if new != page:
        sys.exit(f"{path}: the list of refused ops differs from onnx_conformance's; run scripts/conformance_refusals.sh")
    print(f"{path}: the list of refused ops matches onnx_conformance's ({refused.count('(')} ops)")
else:
    open(path, "w").write(new)
    print(f"{path}: the list of refused ops rewritten ({refused.count('(')} ops)")
PY
