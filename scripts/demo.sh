#!/usr/bin/env bash
# `make demo`: the offline gpt1/smoke pipeline through local Prefect + MLflow servers, end to end.
# A second invocation reuses running services; `make down` stops them (data in .demo/ is kept).
source "$(dirname "$0")/services.sh"
cd "$ROOT"
services_up
deploy_local
write_env_file
started=$(date +%s)
# GPT1_DEMO_OVERRIDES (a JSON list of key=value strings) shrinks the run further, e.g. for the CI test.
params="{}"
[[ -n ${GPT1_DEMO_OVERRIDES:-} ]] && params="{\"overrides\": ${GPT1_DEMO_OVERRIDES}}"
echo "running gpt1/smoke (worker log: $STATE/logs/worker.log)"
"$BIN/python" scripts/watch_run.py gpt1/smoke --params "$params" | tee "$STATE/logs/last-run.log"
status=${PIPESTATUS[0]}
echo
echo "smoke pipeline finished in $(( $(date +%s) - started )) s (exit $status)"
report=$(ls -t "$GPT1_WORK_DIR"/report/*/results.md 2>/dev/null | head -1 || true)
[[ -n $report ]] && cat "$report"
exp_id=$("$BIN/python" - <<'PY'
from mlflow.tracking import MlflowClient
exp = MlflowClient().get_experiment_by_name("gpt1-smoke")
print(exp.experiment_id if exp else "0")
PY
)
cat <<NEXT
MLflow runs:  $MLFLOW_TRACKING_URI/#/experiments/$exp_id/runs
Prefect UI:   http://$HOST:$PREFECT_PORT/runs

Next, in any shell (the servers keep running until \`make down\`):
  source $STATE/env                      # PREFECT_API_URL, MLFLOW_TRACKING_URI, PATH with gpt1
  prefect deployment ls
  gpt1 --help
  python -c "import mlflow, pandas; m = mlflow.pyfunc.load_model('models:/gpt1-smoke-sst2@champion'); print(m.predict(pandas.DataFrame([{'sentence': 'a delightful, moving film'}])))"
  prefect deployment run gpt1/smoke --param overrides='["finetune.lr=1e-4"]' --watch   # redoes only what the change touches
NEXT
exit "$status"
