#!/usr/bin/env bash
# `make demo`: the offline gpt1/smoke pipeline through local Prefect + MLflow servers, end to end.
# A second invocation reuses running services; `make down` stops them (data in .demo/ is kept).
# The servers start as soon as they are installed, while the rest of the venv installs; the deployments go up once
# Prefect answers, while MLflow may still be starting. Each phase's line says the seconds since the start.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
began=$(date +%s)
say() { echo "demo [$(($(date +%s) - began)) s]: $*"; }

[[ -n ${GPT1_VENV:-} ]] || make -s --no-print-directory -C "$ROOT" venv-servers
source "$ROOT/scripts/services.sh"
cd "$ROOT"
servers_start
if [[ -z ${GPT1_VENV:-} ]]; then
  make -s --no-print-directory -C "$ROOT" venv-demo
  say "venv ready"
fi
servers_wait prefect-server
worker_up "$POOL" worker
deploy_local
say "deployed ${LOCAL_DEPLOYMENTS[*]} on pool $POOL"
servers_wait mlflow-server
write_env_file
say "servers up"

# GPT1_DEMO_OVERRIDES (a JSON list of key=value strings) shrinks the run further, e.g. for the CI test.
params="{}"
[[ -n ${GPT1_DEMO_OVERRIDES:-} ]] && params="{\"overrides\": ${GPT1_DEMO_OVERRIDES}}"
say "running gpt1/smoke (worker log: $STATE/logs/worker.log)"
started=$(date +%s)
status=0
"$BIN/python" scripts/watch_run.py gpt1/smoke --params "$params" | tee "$STATE/logs/last-run.log" || status=$?
echo
say "smoke pipeline finished in $(( $(date +%s) - started )) s (exit $status)"
# The experiment's saved runs view (gpt1.tracking.runs), read over MLflow's REST API: no mlflow import to wait for.
view=$(curl -fsS -m 10 "$MLFLOW_TRACKING_URI/api/2.0/mlflow/experiments/get-by-name?experiment_name=gpt1-smoke" \
  | python3 -c '
import json, sys
experiment = json.load(sys.stdin)["experiment"]
views = [(json.loads(t["value"]).get("updatedAt", 0), t["key"].rsplit(".", 1)[1]) for t in experiment.get("tags", [])
         if t["key"].startswith("mlflow.sharedViewState.")]
key = f"?viewStateShareKey={max(views)[1]}" if views else ""
print("#/experiments/" + experiment["experiment_id"] + "/runs" + key)' 2>/dev/null || echo "")
cat <<NEXT
MLflow runs:  $MLFLOW_TRACKING_URI/$view
Prefect UI:   http://$HOST:$PREFECT_PORT/runs

Next, in any shell (the servers keep running until \`make down\`):
  source $STATE/env                      # PREFECT_API_URL, MLFLOW_TRACKING_URI, PATH with gpt1
  prefect deployment ls
  gpt1 --help
  python -c "import mlflow, pandas; m = mlflow.pyfunc.load_model('models:/gpt1-smoke-sst2@champion'); print(m.predict(pandas.DataFrame([{'sentence': 'what a delightful film !'}])))"
  python $ROOT/scripts/watch_run.py gpt1/smoke --params '{"overrides": ["finetune.tasks=[sst2,rte]", "finetune.lr=1e-4"]}'   # redoes only what the change touches
NEXT
say "done"
exit "$status"
