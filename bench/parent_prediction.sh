#!/usr/bin/env bash
# The README's main command on a machine without a profile, stopped after the parent's preflight,
# then the parent's predictions from the profile it calibrated (issue 12: "predictions for the
# parent within 10% of its measured costs"). Usage, from a clone with its venv:
#
#     ACC_MEASURE_NICE=-10 bench/parent_prediction.sh EMPTY_HOME_DIR > parent.log
#
# EMPTY_HOME_DIR is made empty first (no profile, no cache): the build calibrates (acc profile
# --quick, ~10 min here), measures the parent on the contract, and is stopped there.
set -u
cd "$(dirname "$0")/.."
home=$1; rm -rf "$home"; mkdir -p "$home"; export HOME=$home
log=$home/build.log
echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD)"
.venv/bin/acc build examples/cpu-vllm.acspec --baseline uniform --work "$home/work" > "$log" 2>&1 &
pid=$!
until grep -qa "misses it\|meets every bound" "$log" || ! kill -0 $pid 2>/dev/null; do sleep 5; done
sleep 2; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
tr '\r' '\n' < "$log" | grep -E "held-out|measured .* (meets|misses)"
.venv/bin/acc check examples/cpu-vllm.acspec --format json --out "$home/check.json" > /dev/null
.venv/bin/python - "$home/check.json" <<'PY'
import json, sys
pc = json.load(open(sys.argv[1]))["parent_costs"]
for w in pc["workloads"]:
    print(f"predicted {w['name']}: ttft {w['ttft_s']:.3f} s, tpot {w['tpot_s'] * 1e3:.1f} ms, e2e {w['e2e_s']:.2f} s")
print(f"predicted memory: {pc['memory']['total'] / 2**20:,.0f} MiB")
PY
