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
LOCAL_DEPLOYMENTS=(smoke mini mini-books local smoke-from-checkpoint)  # `prefect deploy -n` takes their own (unique) names

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

health_url() {  # name: the URL that answers once the server is up
  case $1 in prefect-server) echo "$PREFECT_API_URL/health" ;; mlflow-server) echo "$MLFLOW_TRACKING_URI/health" ;; esac
}

start() {  # name cmd...: own session => own process group, so down.sh can stop the whole tree
  local name=$1; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! >"$STATE/pids/$name.pgid"
  date +%s >"$STATE/pids/$name.started"
}

alive() { [[ -f $STATE/pids/$1.pgid ]] && kill -0 -- "-$(cat "$STATE/pids/$1.pgid")" 2>/dev/null; }

servers_start() {  # start the Prefect and MLflow servers that are not up (reused when up, e.g. another script's)
  if up "$PREFECT_API_URL/health"; then echo "prefect server: reusing $PREFECT_API_URL"
  elif alive prefect-server; then echo "prefect server: already starting (log: $STATE/logs/prefect-server.log)"
  else
    echo "prefect server: starting on $PREFECT_API_URL (log: $STATE/logs/prefect-server.log)"
    start prefect-server "$BIN/prefect" server start --host "$HOST" --port "$PREFECT_PORT"
  fi
  if up "$MLFLOW_TRACKING_URI/health"; then echo "mlflow server: reusing $MLFLOW_TRACKING_URI"
  elif alive mlflow-server; then echo "mlflow server: already starting (log: $STATE/logs/mlflow-server.log)"
  else
    echo "mlflow server: starting on $MLFLOW_TRACKING_URI (log: $STATE/logs/mlflow-server.log)"
    start mlflow-server "$BIN/mlflow" server --host "$HOST" --port "$MLFLOW_PORT" --workers 1 \
      --backend-store-uri "sqlite:///$STATE/mlflow/mlflow.db" --artifacts-destination "$STATE/mlflow/artifacts"
  fi
}

servers_wait() {  # name...: wait until each answers, saying every 5 s which are still starting and for how long; a
  # server whose process ended, or that does not answer within SERVER_START_SECONDS, fails with its log's last lines
  local pending=("$@") left=() said=0 name now since why limit=${SERVER_START_SECONDS:-300}
  while ((${#pending[@]})); do
    left=()
    for name in "${pending[@]}"; do
      now=$(date +%s)
      since=$(cat "$STATE/pids/$name.started" 2>/dev/null || echo "$now")
      if up "$(health_url "$name")"; then
        alive "$name" && echo "${name/-/ }: up after $((now - since)) s"
      elif ! alive "$name" || ((now - since > limit)); then
        alive "$name" && why="did not answer within $limit s" || why="stopped before answering"
        echo "${name/-/ }: $why; the last lines of $STATE/logs/$name.log:" >&2
        tail -20 "$STATE/logs/$name.log" >&2
        return 1
      else left+=("${name/-/ } ($((now - since)) s)")
      fi
    done
    ((${#left[@]})) || return 0
    if (($(date +%s) - said >= 5)); then
      ((said)) && why="" || why=": a first start creates their databases, 20-40 s on 2 idle cores"
      said=$(date +%s)
      echo "waiting for $(IFS=,; echo "${left[*]}" | sed 's/,/, /g')$why"
    fi
    pending=("${left[@]%% (*}")
    pending=("${pending[@]// /-}")
    sleep 1
  done
}

servers_up() {  # start the servers that are not up, and wait for them
  servers_start
  servers_wait prefect-server mlflow-server
}

write_env_file() {  # $STATE/env: what a new shell needs to talk to these servers and run gpt1
  cat >"$STATE/env" <<ENV
# source $STATE/env   (written by make demo)
export PREFECT_API_URL=$PREFECT_API_URL
export MLFLOW_TRACKING_URI=$MLFLOW_TRACKING_URI
export GPT1_WORK_DIR=$GPT1_WORK_DIR
export GPT1_STATE=$STATE GPT1_PREFECT_PORT=$PREFECT_PORT GPT1_MLFLOW_PORT=$MLFLOW_PORT  # make rehearse, make down
export PATH=$BIN:\$PATH
export MLFLOW_DISABLE_TELEMETRY=true PREFECT_SERVER_ANALYTICS_ENABLED=false DS_ACCELERATOR=cpu
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false   # a model load prints one line, not a bar per file
ENV
}

worker_up() {  # pool [name]: a process pool (created if missing) and a worker for it, as process group `name`
  local pool=$1 name=${2:-worker} code
  # Created over the REST API (a `prefect` command costs seconds of imports); the worker fills in the pool's job
  # template when it connects. 409: it exists already. A server with API auth (the team stack) takes
  # PREFECT_API_AUTH_STRING as basic auth.
  code=$(curl -sS -o /dev/null -w '%{http_code}' -m 30 -X POST -H 'Content-Type: application/json' \
    ${PREFECT_API_AUTH_STRING:+-u "$PREFECT_API_AUTH_STRING"} \
    -d "{\"name\": \"$pool\", \"type\": \"process\"}" "$PREFECT_API_URL/work_pools/") || true
  [[ $code == 201 || $code == 409 ]] || { echo "could not create the work pool $pool (HTTP ${code:-none})" >&2; return 1; }
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
  alive worker || alive mlflow-server || alive prefect-server \
    || echo "nothing of $STATE is running (make demo starts its servers and worker)"
  worker_down worker
  [[ ${GPT1_KEEP_SERVERS:-} == 1 ]] && return 0
  stop_group mlflow-server TERM
  stop_group prefect-server TERM
}
