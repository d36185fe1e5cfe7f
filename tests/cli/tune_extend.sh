#!/bin/sh
# A job asking for more candidates than the database's tasks measured extends those tasks instead
# of reusing them as they were: `tune --candidates 1`, then `--candidates 3` on the same database
# measures the candidates the first left out (and only those: every candidate once), and a third
# run with 3 is answered by the database alone. Each plan is verified against PyTorch's outputs.
# Measurements of a group's two leaders taken again, interleaved (search/decision.h), are counted
# apart: each candidate is measured once alone.
# usage: tune_extend.sh FUSETUNE MODEL_DIR WORK_DIR
set -eu
fusetune=$1 model_dir=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
count() {  # count FIELD: a number from `db stats`, e.g. "candidates" or "measurements"
  "$fusetune" db stats --db "$work/search.db" | tr ',:' '\n\n' | sed -n "s/^ *\([0-9][0-9]*\) $1.*/\1/p" | head -n 1
}
tune() {  # tune N OUT
  "$fusetune" tune "$model_dir/model.onnx" --device host --db "$work/search.db" --out "$work/$2" --candidates "$1" \
    > "$work/$2.txt"
  cat "$work/$2.txt"
  "$fusetune" run "$work/$2" --inputs "$model_dir/test_data_set_0"
}
tune 1 plan1
first=$(count measurements)
tune 3 plan3
second=$(count measurements)
interleaved=$(count interleaved)
tune 3 plan3again
third=$(count measurements)
candidates=$(count candidates)
echo "measurements after --candidates 1: $first; after --candidates 3: $second ($interleaved interleaved); again: $third; candidates: $candidates"
[ "$first" -gt 0 ] || { echo "FAIL: the first tune measured nothing"; exit 1; }
[ "$second" -gt "$first" ] || { echo "FAIL: --candidates 3 measured nothing more than --candidates 1"; exit 1; }
[ "$third" = "$second" ] || { echo "FAIL: the third tune measured $((third - second)) candidates again"; exit 1; }
[ "$((second - interleaved))" = "$candidates" ] || { echo "FAIL: $((second - interleaved)) measurements alone of $candidates candidates: some measured twice"; exit 1; }
grep -q '^candidates measured  *0$' "$work/plan3again.txt" || { echo "FAIL: the third tune was not answered by the database"; exit 1; }
# gc and vacuum keep what answers: a fourth tune after them is answered by the database too.
"$fusetune" db gc --db "$work/search.db"
"$fusetune" db vacuum --db "$work/search.db"
[ "$(count measurements)" = "$third" ] || { echo "FAIL: gc or vacuum dropped measurements"; exit 1; }
tune 3 plan3gc
grep -q '^candidates measured  *0$' "$work/plan3gc.txt" || { echo "FAIL: after gc, the tune was not answered by the database"; exit 1; }
echo "PASS: --candidates 3 extended the tasks of --candidates 1, every candidate measured once"
