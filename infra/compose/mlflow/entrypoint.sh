#!/bin/sh
# `mlflow server --app-name basic-auth "$@"`, with the basic-auth users kept in MLFLOW_AUTH_DATABASE_URI (MLflow
# reads that location only from its auth config file, which this writes). The admin account comes from
# MLFLOW_AUTH_ADMIN_USERNAME / MLFLOW_AUTH_ADMIN_PASSWORD, the session key from MLFLOW_FLASK_SERVER_SECRET_KEY and
# the backend store from MLFLOW_BACKEND_STORE_URI, all read by MLflow itself: no secret is on the command line.
# The config file outlives this script (every server worker reads it), so it must hold no secret: the database
# password comes from PGPASSWORD (libpq's own variable), and a URI that carries one is refused.
# MLflow checks a password against its stored hash on every request unless its auth cache is on (a check costs tens
# of milliseconds of CPU by design: a logging run makes thousands of requests); the cache keeps a successful check
# for MLFLOW_AUTH_CACHE_TTL_SECONDS (0 turns it off), so a changed or removed password may pass for that long.
set -eu
: "${MLFLOW_AUTH_DATABASE_URI:?set MLFLOW_AUTH_DATABASE_URI, the database of MLflow's users and permissions}"
: "${MLFLOW_AUTH_ADMIN_PASSWORD:?set MLFLOW_AUTH_ADMIN_PASSWORD}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?set MLFLOW_FLASK_SERVER_SECRET_KEY}"
case $MLFLOW_AUTH_DATABASE_URI in
  *://*:*@*)
    echo "mlflow-auth-server: MLFLOW_AUTH_DATABASE_URI carries a password, which would be written to the auth" \
      "config file: remove it from the URI and set PGPASSWORD instead" >&2
    exit 2 ;;
esac
config=$(mktemp)
# configparser interpolates '%': a URL-encoded character in the database URI must be written as '%%'.
cat >"$config" <<INI
[mlflow]
default_permission = ${MLFLOW_AUTH_DEFAULT_PERMISSION:-READ}
database_uri = $(printf '%s' "$MLFLOW_AUTH_DATABASE_URI" | sed 's/%/%%/g')
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
auth_cache_ttl_seconds = ${MLFLOW_AUTH_CACHE_TTL_SECONDS:-60}
INI
export MLFLOW_AUTH_CONFIG_PATH="$config"
exec mlflow server --app-name basic-auth "$@"
