#!/usr/bin/env bash
# The main job, end to end on one machine: bring Corral up on the local cloud, run a sample
# workload through it (a job that runs and ends, a service that stays up, a two-node job, a
# GPU job that fails over), show the result, and stop everything.
#
#   bash ops/demo.sh            (make run does this)
#   CORRAL_HOME=DIR bash ops/demo.sh   to keep the state and logs somewhere you choose
set -euo pipefail
cd "$(dirname "$0")/.."
CORRAL=${CORRAL:-.venv/bin/corral}
export CORRAL_HOME=${CORRAL_HOME:-$(mktemp -d -t corral-demo.XXXXXX)}
unset CORRAL_REDIS_URL CORRAL_API_URL CORRAL_API_TOKEN

echo "== corral up (home: $CORRAL_HOME)"
"$CORRAL" up >"$CORRAL_HOME/up.out" 2>&1 &
up_pid=$!
stop() {
  if kill -0 "$up_pid" 2>/dev/null; then
    echo "== stopping corral up"
    kill -TERM "$up_pid"
    wait "$up_pid" || true
    tail -n 2 "$CORRAL_HOME/up.out"
  fi
}
trap stop EXIT
for _ in $(seq 1 150); do
  if [ -f "$CORRAL_HOME/api-url" ] && "$CORRAL" status --json >/dev/null 2>&1; then break; fi
  sleep 0.2
done
sed -n '1,7p' "$CORRAL_HOME/up.out"

JOBS=()
launch() {  # launch FILE [job]: submit and follow it until it runs or ends
  echo
  echo "== corral launch $1 --wait"
  local out code=0
  out=$("$CORRAL" launch "$1" --wait --timeout 90 2>&1) || code=$?
  echo "$out"
  [ "$code" = 0 ] || echo "(exit $code)"
  if [ "${2:-}" = job ]; then JOBS+=("$(echo "$out" | head -n 1)"); fi
}
launch examples/workload/hello-job.yaml job
launch examples/workload/web-service.yaml
launch examples/workload/two-node-job.yaml job
launch examples/workload/train-a100.yaml job

state_of() { "$CORRAL" status "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
echo
echo "== waiting for the jobs to finish: ${JOBS[*]}"
for job in "${JOBS[@]}"; do
  for _ in $(seq 1 60); do
    case "$(state_of "$job")" in SUCCEEDED|FAILED|CANCELLED|TERMINATED) break ;; esac
    sleep 1
  done
done
echo
echo "== corral status"
"$CORRAL" status
echo
echo "== corral status ${JOBS[2]}   (the A100 job: sold out, over quota, then the next region)"
"$CORRAL" status "${JOBS[2]}"
echo
echo "== corral instances"
"$CORRAL" instances
echo
echo "== corral logs ${JOBS[0]}"
"$CORRAL" logs "${JOBS[0]}"

echo
echo "== corral pools apply examples/pools/machine-pool.yaml --name demo-machine-pool"
"$CORRAL" pools apply examples/pools/machine-pool.yaml --name demo-machine-pool
POOLED=()
for i in 1 2 3 4; do  # the seed's compute config: reserved first, then spot, then on-demand
  POOLED+=("$("$CORRAL" launch examples/pools/train-a.yaml --detach 2>/dev/null | head -n 1)")
done
echo "launched 4 workloads of 2 nodes on a pool of 3 machine types x 2: ${POOLED[*]}"
for _ in $(seq 1 60); do
  running=0
  for id in "${POOLED[@]:0:3}"; do [ "$(state_of "$id")" = RUNNING ] && running=$((running + 1)); done
  [ "$running" = 3 ] && break
  sleep 0.5
done
echo
echo "== corral pools list"
"$CORRAL" pools list
echo
echo "== corral why ${POOLED[3]}   (the fourth finds every partition full)"
"$CORRAL" why "${POOLED[3]}"
echo
echo "== corral status ${POOLED[0]}"
"$CORRAL" status "${POOLED[0]}"
