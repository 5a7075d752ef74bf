#!/usr/bin/env python3
"""Health of the MLflow server as a team relies on it: `mlflow-healthcheck URL` exits 0 when the server answers
`/health` and also reads its database (an authenticated experiment lookup), 1 otherwise, naming which failed.

MLflow's `/health` answers 200 while the backend store is down (every API call then fails with 503), so a check
of `/health` alone reports a stack healthy whose runs cannot be logged. The admin account comes from the server's
own MLFLOW_AUTH_ADMIN_USERNAME / MLFLOW_AUTH_ADMIN_PASSWORD. Used by compose's healthcheck and the Kubernetes
probes (infra/k8s/mlflow.yaml).
"""

from __future__ import annotations

import base64
import os
import sys
import urllib.error
import urllib.request


def get(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=4) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def main(base: str) -> int:
    base = base.rstrip("/")
    if (status := get(f"{base}/health")) != 200:
        print(f"mlflow-healthcheck: {base}/health answered {status or 'nothing'}", file=sys.stderr)
        return 1
    user = os.environ.get("MLFLOW_AUTH_ADMIN_USERNAME", "admin")
    auth = (
        f"{user}:{os.environ['MLFLOW_AUTH_ADMIN_PASSWORD']}"
        if "MLFLOW_AUTH_ADMIN_PASSWORD" in os.environ
        else None
    )
    # experiment 0 (Default) exists in every store: any answer but 200 means the database is not serving
    if (status := get(f"{base}/api/2.0/mlflow/experiments/get?experiment_id=0", auth)) != 200:
        print(
            f"mlflow-healthcheck: the backend store does not answer ({status or 'no reply'})",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:5000"))
