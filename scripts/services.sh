# Local services for the offline demo and the end-to-end test: Prefect server, MLflow server, process worker.
# Sourced by demo.sh / down.sh. All bind 127.0.0.1; state lives in $GPT1_STATE (default .demo/), data stays on down.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${GPT1_VENV:-$ROOT/.venv}/bin
export GPT1_STATE=${GPT1_STATE:-$ROOT/.demo}
STATE=$GPT1_STATE
PREFECT_PORT=${GPT1_PREFECT_PORT:-4200}
MLFLOW_PORT=${GPT1_MLFLOW_PORT:-5000}
HOST=${GPT1_HOST:-127.0.0.1}
POOL=gpt1-local
# The deployments of pipelines.yaml on the local pool; the cluster ones (gpt1/full, ablations, GPU pools) are not
# deployed here, where no worker could ever run them (`make rehearse` runs that topology on stand-in pools).
LOCAL_DEPLOYMENTS=(smoke mini local smoke-from-checkpoint)  # `prefect deploy -n` takes their own (unique) names

export PREFECT_HOME=$STATE/prefect
export PREFECT_API_URL=http://$HOST:$PREFECT_PORT/api
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_RESULTS_PERSIST_BY_DEFAULT=true
export MLFLOW_TRACKING_URI=http://$HOST:$MLFLOW_PORT
export MLFLOW_DISABLE_TELEMETRY=true
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
export DS_ACCELERATOR=cpu
export PREFECT_LOGGING_EXTRA_LOGGERS=gpt1  # the stages' own log lines reach the Prefect UI
export GPT1_WORK_DIR=${GPT1_WORK_DIR:-$STATE/work}
mkdir -p "$STATE/pids" "$STATE/logs" "$PREFECT_HOME" "$STATE/mlflow" "$GPT1_WORK_DIR"

up() { curl -fsS -m 2 "$1" >/dev/null 2>&1; }

wait_for() {  # url name seconds
  for _ in $(seq "$3"); do up "$1" && return 0; sleep 1; done
  echo "$2 did not come up; see $STATE/logs/$2.log" >&2; tail -20 "$STATE/logs/$2.log" >&2; return 1
}

start() {  # name cmd...: own session => own process group, so down.sh can stop the whole tree
  local name=$1; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$STATE/pids/$name.pgid"
}

alive() { [[ -f $STATE/pids/$1.pgid ]] && kill -0 -- "-$(cat "$STATE/pids/$1.pgid")" 2>/dev/null; }

servers_up() {  # the Prefect and MLflow servers (reused when already up, e.g. started by another script)
  local waiting=()
  if up "$PREFECT_API_URL/health"; then echo "prefect server: reusing $PREFECT_API_URL"
  else
    echo "prefect server: starting on $PREFECT_API_URL (log: $STATE/logs/prefect-server.log)"
    start prefect-server "$BIN/prefect" server start --host "$HOST" --port "$PREFECT_PORT"
    waiting+=(prefect)
  fi
  if up "$MLFLOW_TRACKING_URI/health"; then echo "mlflow server: reusing $MLFLOW_TRACKING_URI"
  else
    echo "mlflow server: starting on $MLFLOW_TRACKING_URI (log: $STATE/logs/mlflow-server.log)"
    start mlflow-server "$BIN/mlflow" server --host "$HOST" --port "$MLFLOW_PORT" --workers 1 \
      --backend-store-uri "sqlite:///$STATE/mlflow/mlflow.db" --artifacts-destination "$STATE/mlflow/artifacts"
    waiting+=(mlflow)
  fi
  [[ ${#waiting[@]} -gt 0 ]] && echo "waiting for ${waiting[*]} to come up (both start at once; ~20-40 s)"
  [[ " ${waiting[*]} " == *" prefect "* ]] && wait_for "$PREFECT_API_URL/health" prefect-server 180
  [[ " ${waiting[*]} " == *" mlflow "* ]] && wait_for "$MLFLOW_TRACKING_URI/health" mlflow-server 180
  return 0
}

write_env_file() {  # $STATE/env: what a new shell needs to talk to these servers and run gpt1
  cat >"$STATE/env" <<ENV
# source $STATE/env   (written by make demo)
export PREFECT_API_URL=$PREFECT_API_URL
export MLFLOW_TRACKING_URI=$MLFLOW_TRACKING_URI
export GPT1_WORK_DIR=$GPT1_WORK_DIR
export PATH=$BIN:\$PATH
export MLFLOW_DISABLE_TELEMETRY=true PREFECT_SERVER_ANALYTICS_ENABLED=false DS_ACCELERATOR=cpu
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false   # a model load prints one line, not a bar per file
ENV
}

worker_up() {  # pool [name]: a process pool (created if missing) and a worker for it, as process group `name`
  local pool=$1 name=${2:-worker}
  "$BIN/prefect" work-pool inspect "$pool" >/dev/null 2>&1 \
    || "$BIN/prefect" work-pool create "$pool" --type process >/dev/null
  if alive "$name"; then echo "$name: reusing"
  else
    # Polls every 2 s instead of Prefect's 10: a run waits on average 1 s, not 5, to be picked up (local server).
    (cd "$ROOT" && PREFECT_WORKER_QUERY_SECONDS=${PREFECT_WORKER_QUERY_SECONDS:-2} \
      start "$name" "$BIN/prefect" worker start --pool "$pool" --type process)
  fi
}

services_up() {
  servers_up
  worker_up "$POOL" worker
}

stop_group() {  # name signal... : signal the process group, wait for it to go
  local name=$1; shift
  alive "$name" || { rm -f "$STATE/pids/$name.pgid"; return 0; }
  local pgid; pgid=$(cat "$STATE/pids/$name.pgid")
  for sig in "$@"; do
    kill "-$sig" -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 20); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.5; done
    kill -0 -- "-$pgid" 2>/dev/null || break
  done
  kill -KILL -- "-$pgid" 2>/dev/null || true
  rm -f "$STATE/pids/$name.pgid"
  echo "stopped $name"
}

deploy_local() {  # the local pool's deployments (names from LOCAL_DEPLOYMENTS)
  local names=() name
  for name in "${LOCAL_DEPLOYMENTS[@]}"; do names+=(-n "$name"); done
  (cd "$ROOT" && "$BIN/prefect" --no-prompt deploy --prefect-file pipelines.yaml "${names[@]}") \
    >"$STATE/logs/deploy.log" 2>&1 || { tail -30 "$STATE/logs/deploy.log"; return 1; }
}

stop_flow_runs_of() {  # name: the flow runs the worker `name` started, each in a session of its own
  alive "$1" || return 0
  local run runs
  runs=$(pgrep -P "$(cat "$STATE/pids/$1.pgid")" || true)
  for run in $runs; do kill -TERM -- "-$run" 2>/dev/null || true; done
  for run in $runs; do  # Prefect's engine may outlive TERM while it reports the crash: give it 10 s
    for _ in $(seq 20); do kill -0 "$run" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$run" 2>/dev/null || true
    echo "stopped flow run process $run"
  done
}

worker_down() {  # name: its flow runs first (their stage processes follow them), then the worker itself
  stop_flow_runs_of "$1"
  stop_group "$1" TERM INT
}

services_down() {  # GPT1_KEEP_SERVERS=1: only the worker (servers shared with other scripts, e.g. in CI)
  worker_down worker
  [[ ${GPT1_KEEP_SERVERS:-} == 1 ]] && return 0
  stop_group mlflow-server TERM
  stop_group prefect-server TERM
}
