"""Whether this shell reaches its Prefect API: one line naming the server and the setting to fix, or None.

The server's `/api/health` answers without credentials, so a health check alone passes with a wrong or missing
PREFECT_API_AUTH_STRING and the first real call fails with Prefect's own traceback (`PrefectHTTPStatusError ...
401`). Preflight, scripts/watch_run.py and scripts/schedule.py ask here first. Imports Prefect only. Also the words
the pipeline's flow run writes for its follower (scripts/watch_run.py) to read.
"""

from __future__ import annotations

from typing import Any

# A step's log line when an earlier run's output served it: "<step>: reused, up to date (<its folder>)".
REUSED = "reused, up to date"
# The key of the flow run's results markdown: this, then the preset's slug.
RESULTS_ARTIFACT = "results-"


def api_problem(client: Any) -> str | None:
    """`client`: Prefect's sync client (`get_client(sync_client=True)`)."""
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.settings import PREFECT_API_AUTH_STRING

    url = str(client.api_url).rstrip("/")
    if (down := client.api_healthcheck()) is not None:
        return f"no Prefect server answers at {url} ({type(down).__name__}): check PREFECT_API_URL"
    try:
        client.hello()  # the cheapest call the API's auth guards
    except PrefectHTTPStatusError as err:
        status = err.response.status_code
        if status in (401, 403):
            sent = "a value it refused" if PREFECT_API_AUTH_STRING.value() else "none"
            return (
                f"the Prefect server at {url} refused this shell's credentials (HTTP {status}; "
                f"PREFECT_API_AUTH_STRING: {sent}): set PREFECT_API_AUTH_STRING to the server's user:password"
            )
        return f"the Prefect server at {url} answered HTTP {status} ({err.response.reason_phrase})"
    return None
