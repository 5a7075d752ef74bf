"""Turn a deployment's schedules on or off, or show them: the one command for `gpt1/full`'s weekly re-run.

    python scripts/schedule.py gpt1/full on      # every schedule of the deployment active; prints the next runs
    python scripts/schedule.py gpt1/full off     # paused (Prefect drops the runs it had scheduled ahead)
    python scripts/schedule.py gpt1/full         # what is scheduled, and when it fires next

pipelines.yaml ships `full`'s schedule inactive, so deploying it to a cluster that is not ready yet starts nothing.
Prefect's own `prefect deployment schedule resume` needs each schedule's id (or resumes every deployment's); this
takes the deployment's name. A firing while the deployment's last run still runs is cancelled
(`concurrency_limit` with `collision_strategy: CANCEL_NEW` in pipelines.yaml), and a fired run reuses every stage
already finished. Exit 2 with one line when there is no server, the credentials are refused or the deployment
does not exist.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deployment", help="flow/deployment, e.g. gpt1/full")
    parser.add_argument("switch", nargs="?", choices=["on", "off"], help="turn its schedules on or off")
    args = parser.parse_args()

    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    from flows.prefect_api import api_problem

    with get_client(sync_client=True) as client:
        if (problem := api_problem(client)) is not None:
            print(f"schedule: {problem}", file=sys.stderr)
            return 2
        try:
            deployment = client.read_deployment_by_name(args.deployment)
        except ObjectNotFound:
            print(f"schedule: no deployment {args.deployment} on {client.api_url} (prefect deploy --prefect-file "
                  "pipelines.yaml -n NAME)", file=sys.stderr)
            return 2
        schedules = client.read_deployment_schedules(deployment.id)
        if not schedules:
            print(f"schedule: {args.deployment} has no schedule (pipelines.yaml `schedules:`)", file=sys.stderr)
            return 2
        if args.switch:
            for schedule in schedules:
                client.update_deployment_schedule(deployment.id, schedule.id, active=args.switch == "on")
            schedules = client.read_deployment_schedules(deployment.id)
        for schedule in schedules:
            print(f"{args.deployment}: {describe(schedule.schedule)} {'on' if schedule.active else 'off'}")
        upcoming = client.get_scheduled_flow_runs_for_deployments([deployment.id], limit=3)
        for run in sorted(upcoming, key=lambda r: r.next_scheduled_start_time or datetime.now(timezone.utc)):
            print(f"  next: {run.name} at {run.next_scheduled_start_time:%Y-%m-%d %H:%M:%S %Z}")
    return 0


def describe(schedule) -> str:
    if getattr(schedule, "cron", None):
        return f"cron {schedule.cron!r} ({schedule.timezone or 'UTC'})"
    if getattr(schedule, "interval", None):
        return f"every {schedule.interval.total_seconds():.0f} s"
    return str(schedule)


if __name__ == "__main__":
    sys.exit(main())
