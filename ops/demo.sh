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

launch() {  # launch FILE: submit and follow it until it runs or ends
  echo
  echo "== corral launch $1 --wait"
  "$CORRAL" launch "$1" --wait --timeout 90 || echo "(exit $?)"
}
launch examples/workload/hello-job.yaml
launch examples/workload/web-service.yaml
launch examples/workload/two-node-job.yaml
launch examples/workload/train-a100.yaml

echo
echo "== waiting for the jobs to finish"
for _ in $(seq 1 60); do
  if ! "$CORRAL" status --json | grep -q '"state": "\(PENDING\|PROVISIONING\)"'; then
    running_jobs=$("$CORRAL" status --json | grep -c '"state": "RUNNING"' || true)
    [ "$running_jobs" -le 1 ] && break
  fi
  sleep 1
done
echo
echo "== corral status"
"$CORRAL" status
echo
echo "== corral instances"
"$CORRAL" instances
job=$("$CORRAL" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); rows=d["requests"] if isinstance(d,dict) else d; print(next(r["id"] for r in rows if r.get("name")=="hello-job" or "hello" in json.dumps(r)))' 2>/dev/null || true)
if [ -n "$job" ]; then
  echo
  echo "== corral logs $job"
  "$CORRAL" logs "$job"
fi
