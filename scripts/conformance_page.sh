#!/usr/bin/env bash
# docs/conformance.md's figures, made from what onnx_conformance prints for onnx 1.12's and 1.23's
# cases: the table of counts and the pass rate (between the page's `<!-- counts -->` markers) and
# the ops that keep 1.23's cases from running, each with its case count (`--refusals`, between the
# `<!-- refusals-1.23 -->` markers), wrapped at 100 columns.
# --check rewrites nothing and exits 1 if the page differs (ctest docs.conformance_page).
#   scripts/conformance_page.sh [--check] [ONNX_CONFORMANCE] (default build/onnx_conformance)
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
tool=${1:-build/onnx_conformance}
for d in third_party/onnx-testdata/node third_party/onnx-testdata-1.23/node; do
  if [ ! -d "$d" ]; then
    echo "SKIP: ONNX conformance data absent ($d); run scripts/setup.sh"
    exit 77
  fi
done
old=$("$tool" third_party/onnx-testdata/node --exclusions tests/conformance/exclusions.txt | tail -2)
new=$("$tool" third_party/onnx-testdata-1.23/node --exclusions tests/conformance/exclusions-1.23.txt --refusals | tail -3)
python3 - "$check" "$old" "$new" <<'PY'
import re, sys, textwrap
check, old, new = sys.argv[1] == "1", sys.argv[2], sys.argv[3]
path = "docs/conformance.md"
page = open(path).read()

def counts(text):
    c = re.search(r"cases: (\d+); with unsupported ops: (\d+) .*; excluded with a reason: (\d+)", text)
    p = re.search(r"(\d+) passed, (\d+) failed", text)
    return {"cases": int(c[1]), "unsupported": int(c[2]), "excluded": int(c[3]), "passed": int(p[1]), "failed": int(p[2])}

a, b = counts(old), counts(new)
refused = re.search(r"^refused: (.*)$", new, re.M)[1]
n = lambda v: f"{v:,}"
supported = b["cases"] - b["unsupported"]
table = "\n".join([
    "| | onnx 1.12.0 | onnx 1.23.2 |",
    "|---|---|---|",
    f"| cases in the data | {n(a['cases'])} | {n(b['cases'])} |",
    f"| run: **passed** | **{n(a['passed'])}** | **{n(b['passed'])}** |",
    f"| run: failed | {n(a['failed'])} | {n(b['failed'])} |",
    f"| excluded with a reason | {n(a['excluded'])} | {n(b['excluded'])} |",
    f"| use an op outside the supported set | {n(a['unsupported'])} | {n(b['unsupported'])} |",
    "",
    "\n".join(textwrap.wrap(f"Of the {n(supported)} onnx 1.23 cases whose ops are all supported, {n(b['passed'])} pass "
                            f"({100 * b['passed'] / supported:.1f}%) and {n(b['excluded'])} are excluded, each with its "
                            "reason in tests/conformance/exclusions-1.23.txt.", 100)),
])
# An op and its count stay on one line.
text = "Ops of the onnx 1.23 cases that do not run (with their case counts): " + refused.replace(" (", "\x00(") + "."
ops = "\n".join(textwrap.wrap(text, 100, break_on_hyphens=False)).replace("\x00", " ")

def put(page, name, body):
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    if begin not in page or end not in page:
        sys.exit(f"{path}: no {begin} ... {end} markers")
    return page[:page.index(begin) + len(begin)] + "\n" + body + "\n" + page[page.index(end):]

written = put(put(page, "counts", table), "refusals-1.23", ops)
if check:
    if written != page:
        sys.exit(f"{path}: its conformance figures differ from onnx_conformance's; run scripts/conformance_page.sh")
    print(f"{path}: its conformance figures match onnx_conformance's")
else:
    open(path, "w").write(written)
    print(f"{path}: conformance figures rewritten")
PY
