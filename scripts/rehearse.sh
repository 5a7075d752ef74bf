#!/usr/bin/env bash
# `make rehearse`: the gpt1/full cluster topology at tiny size on local stand-in pools (scripts/rehearse.py).
# Starts the Prefect and MLflow servers if they are not up (and stops them again), or reuses running ones (a
# `make demo`'s, or the test suite's shared servers) and leaves them running.
source "$(dirname "$0")/services.sh"
cd "$ROOT"
started_servers=0
up "$PREFECT_API_URL/health" && up "$MLFLOW_TRACKING_URI/health" || started_servers=1
servers_up
status=0
"$BIN/python" scripts/rehearse.py "$@" || status=$?
if [[ $started_servers == 1 ]]; then
  stop_group mlflow-server TERM
  stop_group prefect-server TERM
fi
exit "$status"
