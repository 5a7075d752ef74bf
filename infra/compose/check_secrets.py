"""Refuse to start the compose stack while a secret is still env.example's placeholder, or too weak to keep.

    python check_secrets.py ENV_EXAMPLE NAME...

Run by the `check-secrets` service; every other service waits for it to exit 0. Each NAME is an environment
variable holding a secret (for `user:password` values, the part after the last ':'). Every problem is reported at
once, one line each, and the exit status is 1. Secrets go into connection URLs (Postgres, MinIO), hence the
URL-safe alphabet; `openssl rand -hex 24` makes a good one.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

MIN_LENGTH = 12  # MLflow's own minimum for passwords
URL_SAFE = re.compile(r"^[A-Za-z0-9._~-]+$")


def placeholders(env_example: Path) -> dict[str, str]:
    values = {}
    for line in env_example.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            values[name.strip()] = value.strip()
    return values


def problems(names: list[str], environ: dict[str, str], example: dict[str, str]) -> list[str]:
    found = []
    for name in names:
        value = environ.get(name, "")
        secret = value.rpartition(":")[2]
        if not value:
            found.append(f"{name} is not set: copy env.example to .env beside docker-compose.yaml and set it")
        elif value == example.get(name) or "change-me" in value:
            found.append(f"{name} still has env.example's placeholder value: set a secret of your own in .env")
        elif len(secret) < MIN_LENGTH:
            found.append(f"{name} is {len(secret)} characters long; use at least {MIN_LENGTH}")
        elif not URL_SAFE.match(secret):
            found.append(f"{name} has characters outside A-Z a-z 0-9 . _ ~ - (it goes into connection URLs)")
    return found


def main(argv: list[str], environ: dict[str, str]) -> int:
    if len(argv) < 2:
        print("usage: check_secrets.py ENV_EXAMPLE NAME...", file=sys.stderr)
        return 2
    found = problems(argv[1:], environ, placeholders(Path(argv[0])))
    for line in found:
        print(f"check-secrets: {line}", file=sys.stderr)
    if not found:
        print(f"check-secrets: {len(argv) - 1} secrets set")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], dict(os.environ)))
