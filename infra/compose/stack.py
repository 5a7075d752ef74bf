"""The compose stack of docker-compose.yaml, run natively on one machine with no Docker engine: the same services in
the same order, each with the environment, command, health check, lock and entrypoint of its image, all on 127.0.0.1.

    python infra/compose/stack.py up            # make stack: start what is not running, wait until each is healthy
    python infra/compose/stack.py down          # make stack-down: stop everything, keep the data
    python infra/compose/stack.py status | stop SERVICE | start SERVICE

Docker Compose renders the file (`config`, which needs no engine), so interpolation, defaults and the start order
are Compose's own. Each image is played by its own parts: PostgreSQL's server binaries (run as an unprivileged user
when this runs as root, as postgres insists), the MLflow image's lock, entrypoint and health check, the Prefect and
gpt1 images' pins (requirements/cpu.lock, which gpu.lock repeats unchanged), and for MinIO, which cannot be
installed here, moto's S3 server from infra/compose/s3-standin.lock, its requests recorded to disk and replayed at
start so the bucket keeps its objects across a restart. Container addresses (`postgres:5432`, `mlflow:5000`...)
become 127.0.0.1 and a port per service: GPT1_STACK_<SERVICE>_PORT (e.g. GPT1_STACK_PREFECT_SERVER_PORT), default
the port the container listens on.

Secrets: the env file Compose reads (infra/compose/.env, or --env-file); `up` writes one with new random secrets
when there is none. State: --state (default .stack/): volumes/, logs/, pids/ and `env`, the variables a shell needs
to use the stack (`source .stack/env`). docs/cluster.md walks through it; what differs from the real images:
docs/failure-behaviour.md and docs/cluster.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

COMPOSE_DIR = Path(__file__).resolve().parent
REPO = COMPOSE_DIR.parents[1]
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yaml"
S3_STANDIN_LOCK = COMPOSE_DIR / "s3-standin.lock"
HOST = "127.0.0.1"
# Variables of the calling shell that would point a service at other servers or credentials than its own.
NOT_INHERITED = re.compile(
    r"^(PREFECT_(API_URL|API_KEY|API_AUTH_STRING|PROFILE|HOME)|MLFLOW_TRACKING_\w+|AWS_\w+|PG\w+|GPT1_WORK_DIR|"
    r"VIRTUAL_ENV)$"
)


class StackError(Exception):
    """A problem the user fixes: printed as one line, exit 2."""


# -- rendering ------------------------------------------------------------------------------------------------------
def compose_tool() -> list[str]:
    venv_tool = Path(sys.executable).parent / "docker-compose"
    if venv_tool.exists():
        return [str(venv_tool)]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    ):
        return [docker, "compose"]
    raise StackError(
        "Docker Compose v2 renders the stack's file: `make venv` installs it on x86_64 Linux"
    )


def render(env_file: Path) -> dict:
    """docker-compose.yaml as Compose resolves it with `env_file` as its .env (nothing from this shell)."""
    clean = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/root"),
    }
    done = subprocess.run(
        [
            *compose_tool(),
            "-f",
            str(COMPOSE_FILE),
            "--env-file",
            str(env_file),
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=clean,
        cwd=COMPOSE_DIR,
    )
    if done.returncode != 0:
        raise StackError(f"{env_file}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout)


def write_env_file(path: Path) -> None:
    """env.example with a new random secret for every placeholder (mode 600)."""
    lines = []
    for line in (COMPOSE_DIR / "env.example").read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#") and "change-me" in value:
            secret = secrets.token_hex(16)
            value = f"{value.split(':')[0]}:{secret}" if ":" in value else secret
        lines.append(f"{name}{sep}{value}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"stack: wrote {path} with new random secrets (mode 600); keep it out of version control")


def dockerfile(path: Path) -> dict:
    """The final stage of a Dockerfile: its ENV values, WORKDIR and COPY destinations ({in-image path: source})."""
    text = re.sub(r"\\\n", " ", path.read_text())
    stage: dict = {"env": {}, "copies": {}, "workdir": None, "entrypoint": None}
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            stage = {"env": {}, "copies": {}, "workdir": None, "entrypoint": None}
        elif word == "ENV":
            stage["env"].update(part.split("=", 1) for part in shlex.split(rest))
        elif word == "WORKDIR":
            stage["workdir"] = rest.strip()
        elif word == "COPY" and not rest.startswith("--"):
            *sources, dest = rest.split()
            if len(sources) == 1:
                stage["copies"][dest] = path.parent / sources[0]
        elif word == "ENTRYPOINT":
            stage["entrypoint"] = json.loads(rest)
    return stage


# -- the services ---------------------------------------------------------------------------------------------------
@dataclass
class Service:
    """One compose service and what plays its image here."""

    name: str
    spec: dict
    stack: Stack
    container_port: int | None = None
    venv: Path = field(default_factory=lambda: Path(sys.prefix))

    # what each kind of image changes
    def prepare(self) -> None: ...

    def image_env(self) -> dict[str, str]:
        return {}

    def after_healthy(self) -> None: ...

    def run_as(self) -> list[str]:
        return []

    def stop_signal(self) -> signal.Signals:
        return signal.SIGTERM

    # shared
    @property
    def long_running(self) -> bool:
        return self.spec.get("restart", "no") != "no"

    @property
    def port(self) -> int | None:
        if self.container_port is None:
            return None
        key = f"GPT1_STACK_{self.name.upper().replace('-', '_')}_PORT"
        return int(os.environ.get(key, self.container_port))

    def local(self, text: str) -> str:
        """A value as this service sees it in compose, as it reads here: container addresses -> 127.0.0.1:port,
        in-image paths of mounted volumes -> their folders, Compose's `$$` -> `$`."""
        for other in self.stack.services.values():
            if other.container_port is not None:
                address = rf"(?<![\w.-]){re.escape(other.name)}:{other.container_port}\b"
                text = re.sub(address, f"{HOST}:{other.port}", text)
        if self.container_port is not None:
            text = re.sub(
                rf"\b(127\.0\.0\.1|localhost):{self.container_port}\b", rf"\1:{self.port}", text
            )
        for target, source in self.mounts().items():
            text = re.sub(rf"(?<![\w/]){re.escape(target)}(?=/|$|\s)", str(source), text)
        return text.replace("$$", "$")

    def mounts(self) -> dict[str, Path]:
        found = {}
        for volume in self.spec.get("volumes", []):
            source = volume["source"]
            found[volume["target"]] = (
                Path(source) if volume["type"] == "bind" else self.stack.state / "volumes" / source
            )
        return found

    def env(self) -> dict[str, str]:
        """This shell's environment (less what points at other servers), the image's ENV, then compose's."""
        declared = {**self.image_env(), "PREFECT_HOME": str(self.stack.state / "home" / self.name)}
        declared.update(
            {
                k: "" if v is None else str(v)
                for k, v in (self.spec.get("environment") or {}).items()
            }
        )
        env = {k: v for k, v in os.environ.items() if not NOT_INHERITED.match(k)}
        env.update({k: self.local(v) for k, v in declared.items()})
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def entrypoint(self) -> list[str]:
        return []

    def command(self) -> list[str]:
        args = [self.local(str(a)) for a in (self.spec.get("command") or [])]
        if "--host" in args:  # containers listen on every interface; here only loopback
            args[args.index("--host") + 1] = HOST
        if "--port" in args and self.port is not None:
            args[args.index("--port") + 1] = str(self.port)
        return self.resolve([*self.entrypoint(), *args])

    def resolve(self, argv: list[str]) -> list[str]:
        """argv[0] as this image would run it: a file the image copied in, or a program of its venv."""
        copied = self.copies().get(argv[0])
        if copied is not None:
            interpreter = copied.read_text().splitlines()[0]
            runner = "sh" if interpreter.endswith("sh") else str(self.venv / "bin" / "python")
            return [runner, str(copied), *argv[1:]]
        program = self.venv / "bin" / argv[0]
        return [str(program) if program.exists() else argv[0], *argv[1:]]

    def copies(self) -> dict[str, Path]:
        return {}

    def cwd(self) -> Path:
        return self.stack.state / "home" / self.name

    def healthcheck(self) -> list[str] | None:
        test = (self.spec.get("healthcheck") or {}).get("test")
        if not test:
            return None
        if test[0] == "CMD-SHELL":
            return ["sh", "-c", self.local(test[1])]
        return self.resolve([self.local(str(a)) for a in test[1:]])

    def healthy(self) -> bool:
        check = self.healthcheck()
        if check is None:
            return self.running()
        done = subprocess.run(
            check, env=self.env(), cwd=self.cwd(), capture_output=True, timeout=30
        )
        return done.returncode == 0

    # processes
    def pid_file(self) -> Path:
        return self.stack.state / "pids" / f"{self.name}.pid"

    def log_file(self) -> Path:
        return self.stack.state / "logs" / f"{self.name}.log"

    def running(self) -> bool:
        try:
            os.killpg(int(self.pid_file().read_text()), 0)
            return True
        except (FileNotFoundError, ProcessLookupError, ValueError, PermissionError):
            return False

    def start(self) -> None:
        self.cwd().mkdir(parents=True, exist_ok=True)
        self.prepare()
        self.log_file().parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file(), "ab") as log:
            proc = subprocess.Popen(
                [*self.run_as(), *self.command()],
                env=self.env(),
                cwd=self.cwd(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if not self.long_running:
            if (code := proc.wait(timeout=600)) != 0:
                raise StackError(f"{self.name} exited {code}: {self.tail()}")
            return
        self.pid_file().parent.mkdir(parents=True, exist_ok=True)
        self.pid_file().write_text(str(proc.pid))
        self.wait_healthy(proc)
        self.after_healthy()

    def wait_healthy(self, proc: subprocess.Popen) -> None:
        check = self.spec.get("healthcheck") or {}
        limit = seconds(check.get("start_period", "30s")) + seconds(
            check.get("interval", "10s")
        ) * check.get("retries", 3)
        deadline = time.monotonic() + limit
        while not self.healthy():
            if proc.poll() is not None:
                raise StackError(
                    f"{self.name} stopped (exit {proc.returncode}) before it was healthy: {self.tail()}"
                )
            if time.monotonic() > deadline:
                raise StackError(f"{self.name} was not healthy within {limit:.0f} s: {self.tail()}")
            time.sleep(1)

    def stop(self) -> bool:
        if not self.running():
            return False
        group = int(self.pid_file().read_text())
        for sig in (self.stop_signal(), signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            for _ in range(60):
                if not self.running():
                    break
                time.sleep(0.5)
            else:
                continue
            break
        self.pid_file().unlink(missing_ok=True)
        return True

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_file().read_text(errors="replace").strip().splitlines()
        except FileNotFoundError:
            return "(no log)"
        return " | ".join(text[-lines:]) + f" (log: {self.log_file()})"


def seconds(value: str | int) -> float:
    text = str(value)
    return float(text[:-1]) * {"s": 1, "m": 60}[text[-1]] if text[-1] in "sm" else float(text)


class Postgres(Service):
    """postgres:16 played by this machine's PostgreSQL server: initialised as the image's entrypoint does
    (POSTGRES_USER with POSTGRES_PASSWORD, POSTGRES_DB, then the mounted initdb/*.sql), listening on loopback."""

    def binaries(self) -> Path:
        found = shutil.which("initdb")
        candidates = [Path(found).resolve().parent] if found else []
        candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
        for folder in candidates:
            if (folder / "postgres").exists():
                return folder
        raise StackError(
            "PostgreSQL's server binaries (initdb, postgres) are not installed: "
            "apt-get install postgresql"
        )

    def user(self) -> str | None:
        """The unprivileged account postgres runs as when this runs as root (it refuses root)."""
        if os.geteuid() != 0:
            return None
        name = os.environ.get("GPT1_STACK_PG_USER", "postgres")
        try:
            pwd.getpwnam(name)
        except KeyError:
            name = "nobody"
        return name

    def root(self) -> Path:
        """The `pgdata` volume: the cluster (cluster/), its socket and its initialisation marker."""
        wanted = self.mounts()["/var/lib/postgresql/data"]
        if self.user() is None or reachable_by_others(wanted.parent):
            return wanted
        # the state folder is private to root (pytest's temp folders are): keep the cluster where its user reaches
        digest = hashlib.sha256(str(wanted).encode()).hexdigest()[:12]
        return Path("/var/tmp") / f"gpt1-stack-{digest}"

    def run_as(self) -> list[str]:
        user = self.user()
        return ["runuser", "-u", user, "--"] if user else []

    def image_env(self) -> dict[str, str]:
        # pg_isready and psql inside the image reach the server on its defaults; here on this port
        return {
            "PGHOST": HOST,
            "PGPORT": str(self.port),
            "PATH": f"{self.binaries()}:{os.environ['PATH']}",
        }

    def command(self) -> list[str]:
        return [
            str(self.binaries() / "postgres"),
            "-D",
            str(self.root() / "cluster"),
            "-c",
            f"listen_addresses={HOST}",
            "-p",
            str(self.port),
            "-c",
            f"unix_socket_directories={self.root()}",
        ]

    def stop_signal(self) -> signal.Signals:
        return signal.SIGINT  # postgres's fast shutdown: SIGTERM waits for every client to leave

    def prepare(self) -> None:
        root, env = self.root(), self.env()
        volume = self.mounts()["/var/lib/postgresql/data"]
        if root != volume:
            # a cluster kept outside the state folder belongs to it only while the volume says so: a new state
            # folder at a path used before (its secrets new) must not meet the old cluster and its old password
            pointer = volume / "cluster-at"
            if not pointer.exists():
                shutil.rmtree(root, ignore_errors=True)
                volume.mkdir(parents=True, exist_ok=True)
                pointer.write_text(f"{root}\n")
        if (root / "cluster" / "PG_VERSION").exists():
            return
        root.mkdir(parents=True, exist_ok=True)
        password_file = root / "initdb.pw"
        password_file.write_text(env["POSTGRES_PASSWORD"])
        password_file.chmod(0o600)
        if user := self.user():
            for path in (root, password_file):
                shutil.chown(path, user)
        try:
            done = subprocess.run(
                [
                    *self.run_as(),
                    str(self.binaries() / "initdb"),
                    "-D",
                    str(root / "cluster"),
                    "-U",
                    env["POSTGRES_USER"],
                    f"--pwfile={password_file}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ],
                env=env,
                capture_output=True,
                text=True,
            )
        finally:
            password_file.unlink(missing_ok=True)
        if done.returncode != 0:
            raise StackError(f"initdb failed: {done.stderr.strip()}")

    def after_healthy(self) -> None:
        """The image's first start: POSTGRES_DB, then every mounted initdb/*.sql, once."""
        marker = self.root() / "initdb.done"
        if marker.exists():
            return
        env = {**self.env(), "PGPASSWORD": self.env()["POSTGRES_PASSWORD"]}
        psql = ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-U", env["POSTGRES_USER"]]
        steps = [[*psql, "-d", "postgres", "-c", f'CREATE DATABASE "{env["POSTGRES_DB"]}"']]
        steps += [
            [*psql, "-d", env["POSTGRES_DB"], "-f", str(sql)]
            for sql in sorted(self.mounts()["/docker-entrypoint-initdb.d"].glob("*.sql"))
        ]
        for step in steps:
            done = subprocess.run(step, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise StackError(
                    f"postgres initialisation ({' '.join(step[-2:])}): {done.stderr.strip()}"
                )
        marker.write_text("")


def reachable_by_others(folder: Path) -> bool:
    """Whether an unprivileged user can reach `folder` (every ancestor searchable by others)."""
    return all(p.stat().st_mode & 0o001 for p in [folder, *folder.parents] if p.exists())


class S3StandIn(Service):
    """MinIO's S3 API played by moto's server (infra/compose/s3-standin.lock). moto keeps objects in memory: its
    requests are recorded to the `minio` volume and replayed when it starts, so a restart keeps the bucket."""

    def prepare(self) -> None:
        self.venv = self.stack.venv("s3-standin", S3_STANDIN_LOCK)

    def recording(self) -> Path:
        return self.mounts()["/data"] / "recording.jsonl"

    def image_env(self) -> dict[str, str]:
        return {"MOTO_ENABLE_RECORDING": "1", "MOTO_RECORDER_FILEPATH": str(self.recording())}

    def command(self) -> list[str]:
        self.recording().parent.mkdir(parents=True, exist_ok=True)
        return [str(self.venv / "bin" / "moto_server"), "-H", HOST, "-p", str(self.port)]

    def healthcheck(self) -> list[str]:  # compose runs `mc ready local`; here an S3 ListBuckets
        probe = "import sys, urllib.request as r; r.urlopen(sys.argv[1], timeout=4)"
        return [sys.executable, "-c", probe, f"http://{HOST}:{self.port}/"]

    def after_healthy(self) -> None:
        if self.recording().exists() and self.recording().stat().st_size:
            request = urllib.request.Request(
                f"http://{HOST}:{self.port}/moto-api/recorder/replay-recording", method="POST"
            )
            urllib.request.urlopen(request, timeout=600).close()


class CreateBucket(Service):
    """`mc mb --ignore-existing ALIAS/BUCKET` played by boto3 against the S3 server of MC_HOST_<ALIAS>."""

    def prepare(self) -> None:
        self.venv = self.stack.venv("s3-standin", S3_STANDIN_LOCK)

    def command(self) -> list[str]:
        args = self.spec["command"]
        assert args[:2] == ["mb", "--ignore-existing"], args
        alias, bucket = args[2].split("/", 1)
        script = (
            "import os, sys, urllib.parse, boto3\n"
            "url = urllib.parse.urlsplit(os.environ['MC_HOST_' + sys.argv[1]])\n"
            "s3 = boto3.client('s3', endpoint_url=f'{url.scheme}://{url.hostname}:{url.port}',"
            " aws_access_key_id=url.username, aws_secret_access_key=url.password, region_name='us-east-1')\n"
            "if sys.argv[2] not in [b['Name'] for b in s3.list_buckets()['Buckets']]:\n"
            "    s3.create_bucket(Bucket=sys.argv[2])\n"
            "print('bucket', sys.argv[2], 'ready')\n"
        )
        return [str(self.venv / "bin" / "python"), "-c", script, alias, bucket]


class BuiltImage(Service):
    """An image built from a Dockerfile of this repository: its ENV, WORKDIR and copied scripts."""

    def built(self) -> dict:
        build = self.spec["build"]
        return dockerfile(Path(build["context"]) / build.get("dockerfile", "Dockerfile"))

    def image_env(self) -> dict[str, str]:
        return dict(self.built()["env"])

    def copies(self) -> dict[str, Path]:
        return {
            Path(dest).name: src for dest, src in self.built()["copies"].items() if "/bin/" in dest
        }

    def entrypoint(self) -> list[str]:
        return self.built()["entrypoint"] or []


class MlflowImage(BuiltImage):
    """gpt1-mlflow (infra/compose/mlflow): its lock, installed with hash checking, its entrypoint and health check."""

    def prepare(self) -> None:
        self.venv = self.stack.venv(
            "mlflow", Path(self.spec["build"]["context"]) / "requirements.lock"
        )


class Gpt1Image(Service):
    """gpt1 (infra/Dockerfile) played by this checkout's venv (requirements/cpu.lock, whose pins gpu.lock keeps):
    the image's ENV, its work and cache folders on the compose volumes."""

    def image_env(self) -> dict[str, str]:
        env = dict(dockerfile(REPO / "infra" / "Dockerfile")["env"])
        # each container has its own 8080; here each worker needs a port of its own
        if self.container_port is not None:
            env["PREFECT_WORKER_WEBSERVER_PORT"] = str(self.port)
        return env

    def mounts(self) -> dict[str, Path]:
        # the gpt1 image's folders on the named volumes, for the worker and for a service run from the same image
        return {
            "/data": self.stack.state / "volumes" / "data",
            "/cache": self.stack.state / "volumes" / "cache",
            **super().mounts(),
        }

    def prepare(self) -> None:
        for folder in self.mounts().values():
            folder.mkdir(parents=True, exist_ok=True)

    def cwd(self) -> Path:
        return REPO  # the image's WORKDIR, /opt/gpt1, holds this checkout's pipelines.yaml


class PrefectImage(Service):
    """prefecthq/prefect:<version>: Prefect of this checkout's venv, which must be that version."""

    def prepare(self) -> None:
        from importlib.metadata import version

        wanted = self.spec["image"].split(":")[1].split("-")[0]
        if version("prefect") != wanted:
            raise StackError(
                f"{self.name}: compose runs Prefect {wanted}, this venv has {version('prefect')}"
            )


class PythonImage(Service):
    """python:<version>: this venv's interpreter."""


def image_kind(spec: dict) -> type[Service]:
    """What plays a compose service's image here; every service of docker-compose.yaml must have one."""
    image = spec.get("image", "")
    build = spec.get("build") or {}
    if (
        build.get("dockerfile", "Dockerfile") == "Dockerfile"
        and Path(build.get("context", "/")).name == "mlflow"
    ):
        return MlflowImage
    kinds = {
        "postgres:": Postgres,
        "minio/minio": S3StandIn,
        "minio/mc": CreateBucket,
        "gpt1:": Gpt1Image,
        "prefecthq/prefect:": PrefectImage,
        "python:": PythonImage,
    }
    for prefix, kind in kinds.items():
        if image.startswith(prefix) or f"/{prefix}" in image:
            return kind
    raise StackError(f"no native stand-in for image {image!r}: add one to infra/compose/stack.py")


# The images' own ports; the servers name theirs with --port, a worker's health server listens on 8080.
CONTAINER_PORTS = {Postgres: 5432, S3StandIn: 9000}


def venv_folder(name: str, lock: Path) -> Path:
    """Where the venv of `lock` lives: keyed by the lock's bytes, so a changed lock gets a venv of its own."""
    return REPO / ".cache" / "stack" / f"{name}-{hashlib.sha256(lock.read_bytes()).hexdigest()[:12]}"


# -- the stack ------------------------------------------------------------------------------------------------------
class Stack:
    def __init__(self, state: Path, env_file: Path) -> None:
        self.state = state.resolve()
        self.env_file = env_file
        self.rendered = render(env_file)
        self.services: dict[str, Service] = {}
        for name, spec in self.rendered["services"].items():
            kind = image_kind(spec)
            command = [str(a) for a in (spec.get("command") or [])]
            port = CONTAINER_PORTS.get(kind)
            if "--port" in command:
                port = int(command[command.index("--port") + 1])
            elif "--with-healthcheck" in command:
                port = 8080  # a Prefect worker's health server
            self.services[name] = kind(name, spec, self, port)

    def order(self) -> list[str]:
        """Services in an order that starts each after what it depends on (Compose's depends_on)."""
        done: list[str] = []

        def visit(name: str) -> None:
            if name not in done:
                for dep in self.services[name].spec.get("depends_on") or {}:
                    visit(dep)
                done.append(name)

        for name in sorted(self.services):
            visit(name)
        return done

    def venv(self, name: str, lock: Path) -> Path:
        """A venv of `lock` alone, installed with hash checking (as the image's Dockerfile does), cached by the
        lock's content under .cache/stack/."""
        venv = venv_folder(name, lock)
        if (venv / ".installed").exists():
            return venv
        print(f"stack: installing {lock.relative_to(REPO)} into {venv.relative_to(REPO)} (once)")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        uv = Path(sys.executable).parent / "uv"
        installer = (
            [str(uv), "pip", "install", "--python", str(venv / "bin" / "python")]
            if uv.exists()
            else [str(venv / "bin" / "python"), "-m", "pip", "install"]
        )
        done = subprocess.run(
            [*installer, "-q", "--require-hashes", "--no-deps", "-r", str(lock)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise StackError(f"installing {lock.name} failed: {done.stderr.strip()[-800:]}")
        (venv / ".installed").write_text("")
        return venv

    def check_ports(self, names: list[str]) -> None:
        import socket

        busy = []
        for name in names:
            service = self.services[name]
            if service.port is None or not service.long_running or service.running():
                continue
            with socket.socket() as sock:
                if sock.connect_ex((HOST, service.port)) == 0:
                    key = f"GPT1_STACK_{name.upper().replace('-', '_')}_PORT"
                    busy.append(f"{name}: {HOST}:{service.port} is in use (free it, or set {key})")
        if busy:
            raise StackError("; ".join(busy))

    def up(self, only: list[str] | None = None) -> None:
        names = only or self.order()
        self.check_ports(names)
        for name in names:
            service = self.services[name]
            if service.long_running and service.running():
                if service.healthy():
                    print(f"stack: {name} is running")
                    continue
                service.stop()
            began = time.monotonic()
            service.start()
            state = "healthy" if service.long_running else "done"
            where = f" on {HOST}:{service.port}" if service.long_running and service.port else ""
            print(f"stack: {name} {state}{where} ({time.monotonic() - began:.0f} s)")
        self.write_client_env()

    def down(self, only: list[str] | None = None) -> None:
        for name in only or list(reversed(self.order())):
            if self.services[name].stop():
                print(f"stack: stopped {name}")

    def status(self) -> dict[str, str]:
        found = {}
        for name in self.order():
            service = self.services[name]
            if not service.long_running:
                continue
            found[name] = (
                ("healthy" if service.healthy() else "unhealthy")
                if service.running()
                else "stopped"
            )
        return found

    def client_env(self) -> dict[str, str]:
        """What a shell on this machine needs to use the stack, as the worker uses it."""
        worker = self.services["worker"]
        env = worker.env()
        keys = (
            "PREFECT_API_URL",
            "PREFECT_API_AUTH_STRING",
            "MLFLOW_TRACKING_URI",
            "MLFLOW_TRACKING_USERNAME",
            "MLFLOW_TRACKING_PASSWORD",
            "GPT1_WORK_DIR",
        )
        return {k: env[k] for k in keys if k in env}

    def write_client_env(self) -> None:
        path = self.state / "env"
        lines = [
            f"# source {path}   (written by infra/compose/stack.py up; holds the stack's credentials)"
        ]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.client_env().items()]
        # scripts/services.sh (make rehearse, make watch) finds the servers by these ports
        ports = {"GPT1_PREFECT_PORT": "prefect-server", "GPT1_MLFLOW_PORT": "mlflow"}
        lines += [f"export {key}={self.services[name].port}" for key, name in ports.items()]
        lines += [
            f"export GPT1_STACK_STATE={shlex.quote(str(self.state))}",
            f"export PATH={shlex.quote(str(Path(sys.prefix) / 'bin'))}:$PATH",
        ]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["up", "down", "status", "start", "stop"])
    parser.add_argument("services", nargs="*", help="for start/stop: the services (default: all)")
    parser.add_argument(
        "--state", type=Path, default=Path(os.environ.get("GPT1_STACK_STATE", REPO / ".stack"))
    )
    parser.add_argument(
        "--env-file",
        type=Path,
        default=Path(os.environ.get("GPT1_STACK_ENV_FILE", COMPOSE_DIR / ".env")),
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "up" and not args.env_file.exists():
            write_env_file(args.env_file)
        elif not args.env_file.exists():
            raise StackError(f"{args.env_file} does not exist (`stack.py up` writes one)")
        stack = Stack(args.state, args.env_file)
        unknown = sorted(set(args.services) - set(stack.services))
        if unknown:
            raise StackError(
                f"no service {', '.join(unknown)} in {COMPOSE_FILE.name}: {', '.join(stack.order())}"
            )
        wanted = [n for n in stack.order() if n in args.services] or None
        if args.action in ("up", "start"):
            stack.up(wanted)
            if args.action == "up":
                print(f"stack: up; in a shell: source {stack.state / 'env'}")
        elif args.action in ("down", "stop"):
            stack.down(list(reversed(wanted)) if wanted else None)
        else:
            for name, state in stack.status().items():
                print(f"{name}: {state}")
    except StackError as err:
        print(f"stack: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
