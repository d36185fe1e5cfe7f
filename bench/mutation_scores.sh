#!/usr/bin/env bash
# The mutation score of the host executor's checks on every small test model (the table in
# docs/simt.md): every barrier of every candidate the coordinator would measure deleted in turn.
#   bench/mutation_scores.sh [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
seed=${1:-1}
[ -x build/barrier_mutations ] || scripts/setup.sh
echo "| model | tasks | candidates | barriers | needed | caught | by a check | redundant for the candidate |"
echo "|---|---|---|---|---|---|---|---|"
for dir in tests/data/models/*/; do
  model=$(basename "$dir")
  shape=()
  [ "$model" = bert ] && shape=(--shape input_ids=1x16 --shape attention_mask=1x16)
  line=$(build/barrier_mutations "$dir/model.onnx" "${shape[@]}" --seed "$seed" | tail -1)
  # mutation score: C of N needed barriers caught (K by a check, W by a wrong result); B barriers in all over
  # M candidates of T tasks, R redundant for their candidate (ordered nothing), U never reached; ...
  python3 - "$model" "$line" <<'PY'
import re, sys
model, line = sys.argv[1], sys.argv[2]
m = re.search(r"(\d+) of (\d+) needed barriers caught \((\d+) by a check, (\d+) by a wrong result\); (\d+) barriers in all "
              r"over (\d+) candidates of (\d+) tasks, (\d+) redundant", line)
if not m:
    sys.exit(f"{model}: unexpected output: {line}")
caught, needed, by_check, _, barriers, candidates, tasks, redundant = m.groups()
print(f"| {model} | {tasks} | {candidates} | {barriers} | {needed} | {caught} | {by_check} | {redundant} |")
PY
done
