"""Secrets never leave the setting that holds them: `redact` is what every URI, config dump, log line and MLflow
call goes through before the project writes it anywhere (MLflow params, tags and artifacts, work-folder files,
spool files, log lines, Prefect parameters and logs, error lines).

Three forms of secret are replaced by `REDACTED`:

- a URI's userinfo, `scheme://user:password@host` (and a bare token as the user, `https://TOKEN@host`): all of it,
  since either part may be the secret;
- the value of a query parameter whose name says it is one (`?token=`, `access_token`, `password`, `secret`,
  `key`, `sig`, `X-Amz-Credential`, ...);
- the value of an environment variable whose name says it is one (MLFLOW_TRACKING_PASSWORD, MLFLOW_TRACKING_TOKEN,
  PREFECT_API_KEY, AWS_SECRET_ACCESS_KEY, PGPASSWORD, ...) wherever it appears in text. Values shorter than
  `MIN_ENV_SECRET` characters are not searched for: they would match ordinary words and paths.

A redacted URI still says which server it names, and redacting twice changes nothing. A process that needs the
full URI back takes it from its own environment (gpt1.tracking.logger.tracking_uri), never from a file.
"""

from __future__ import annotations

import os
import re
from typing import TypeVar, cast

REDACTED = "***"
MIN_ENV_SECRET = 6

# userinfo ends at the last `@` before the authority's end (`/`, `?`, `#`): an unescaped `@` in a password is
# part of the secret
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s'\"<>]+@")
# a parameter named by one of these words, alone or as a `_`, `-` or `.` separated part of its name (access_token,
# X-Amz-Signature, client_secret); a word inside another (viewStateShareKey) is no secret
_SECRET_WORDS = r"token|passw(?:or)?d|pwd|secret|key|apikey|sig(?:nature)?|credentials?|auth"
_QUERY_SECRET = re.compile(
    rf"(?P<name>[?&;](?:[A-Za-z0-9]+[_.-])*(?:{_SECRET_WORDS})(?:[_.-][A-Za-z0-9]+)*=)[^&#\s'\"<>]+",
    re.IGNORECASE,
)
# whole words of a variable's name: TOKENIZERS_PARALLELISM is no token, PWD is the working directory
_SECRET_ENV = re.compile(
    r"(?:^|_)(?:PG)?(?:TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIALS?|API_KEY|AUTH_STRING)(?:_|$)"
)

T = TypeVar("T")


def redact(value: T) -> T:
    """`value` with every secret replaced by `REDACTED`: a string, or the strings inside a JSON-like structure
    (dict values, list and tuple items; keys are names and stay); anything else is returned as it is."""
    if isinstance(value, str):
        return cast(T, _redact_text(value))
    if isinstance(value, dict):
        return cast(T, {key: redact(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return cast(T, type(value)(redact(item) for item in value))
    return value


def _redact_text(text: str) -> str:
    text = _USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)
    text = _QUERY_SECRET.sub(rf"\g<name>{REDACTED}", text)
    for secret in _environment_secrets():
        text = text.replace(secret, REDACTED)
    return text


def _environment_secrets() -> list[str]:
    """The values of this process's secret-named environment variables, longest first (a secret containing
    another is replaced whole)."""
    found = {
        value
        for name, value in os.environ.items()
        if _SECRET_ENV.search(name.upper()) and len(value) >= MIN_ENV_SECRET
    }
    return sorted(found, key=len, reverse=True)
