"""Reused worker processes: run many short jobs without paying a process start-up (and torch import) per job.

    with WorkerPool(2, preload=("torch", "gpt1.finetune.stage")) as pool:
        pool.run(job, log_line)        # job: a picklable callable returning an exit code; blocks until done

The fine-tune fan-out runs its tasks here: a fine-tune of the smoke preset computes for a few seconds, while a fresh
`gpt1 finetune` process spends several importing torch, MLflow and scikit-learn. Each worker is started on its
first job (spawn, not fork: the caller has threads), imports `preload` once, sets its torch threads to its share
of the cores (`threads`, else the user's OMP_NUM_THREADS, else `threads_per_process(workers)`), and exits when
the process that started it dies. `run` waits for an idle worker, streams the job's output lines (logging and
prints) to its `log_line` while it runs, and raises `JobFailed` when the job returns a non-zero code or
`WorkerDied` when its process ends abruptly; that worker alone is then replaced. `start()` starts every worker
now, in the background, so their imports overlap the caller's own work. Thread-safe; `shutdown()` ends all workers
at once, terminating any still running a job (a flow run that is failing or cancelled).

Design choices:
- One single-process `ProcessPoolExecutor` per worker, not one executor with N processes: a process dying
  abruptly breaks its whole executor (CPython fails every pending and running future and stops the other
  workers), so with one executor per worker only the job that was on the dead process fails, and only that
  worker is rebuilt. Jobs wait for an idle worker in the calling thread, never inside an executor.
- Each worker sends its output through a pipe of its own (the parent closes its copy of the writing end): a
  worker killed mid-write then ends its own pipe with EOF instead of leaving a lock shared by all workers held
  (as a shared multiprocessing.Queue would), and its reader thread ends with it.
- Workers poll their parent pid (1 s) and exit when it changes, like `gpt1.runtime.processes.exit_with_parent`,
  but exit the worker only: pool workers share the caller's process group. Not PR_SET_PDEATHSIG: it fires when
  the *thread* that spawned the worker exits, and fan-out threads come and go.
- A worker leaves without the interpreter's teardown (its last exit handler calls `os._exit`): its jobs have sent
  their output and drained their MLflow calls by then, and unloading torch, MLflow and scikit-learn takes
  seconds, which the end of every flow run would wait for.
"""

from __future__ import annotations

import atexit
import importlib
import io
import itertools
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from gpt1.runtime.processes import PARENT_PID_ENV, alive, threads_per_process

log = logging.getLogger(__name__)

Job = Callable[[], int]
STOP_SECONDS = 30.0  # how long `shutdown` waits for a worker to exit before killing it


class WorkerDied(RuntimeError):
    """A worker process ended abruptly (killed, out of memory) while running a job."""


class JobFailed(RuntimeError):
    """A job returned a non-zero exit code."""

    def __init__(self, code: int, pid: int | None, job: Job):
        self.code = code
        super().__init__(f"{_describe(job)} failed with exit code {code} (worker process {pid})")


def _describe(job: Job) -> str:
    return getattr(job, "label", None) or type(job).__name__


class WorkerPool:
    """`workers` reused processes, one job per process at a time (see the module docstring)."""

    def __init__(self, workers: int, threads: str | None = None, *, preload: Iterable[str] = ()):
        if workers < 1:
            raise ValueError(f"WorkerPool: workers must be >= 1, got {workers}")
        self.threads = threads or os.environ.get("OMP_NUM_THREADS") or threads_per_process(workers)
        self._workers = [_Worker(i, self.threads, tuple(preload)) for i in range(workers)]
        self._idle: queue.Queue[_Worker] = queue.Queue()
        for worker in self._workers:
            self._idle.put(worker)
        self._closed = False

    def run(self, job: Job, log_line: Callable[[str], None] = print) -> None:
        """Run `job()` in an idle worker (waiting for one), forwarding its output lines to `log_line`."""
        if self._closed:
            raise RuntimeError("WorkerPool: shut down")
        worker = self._idle.get()
        try:
            if self._closed:
                raise RuntimeError("WorkerPool: shut down")
            code, pid = worker.run(job, log_line)
        finally:
            self._idle.put(worker)
        if code != 0:
            raise JobFailed(code, pid, job)

    def start(self) -> None:
        """Start every worker process now, each from a thread of its own; `run` waits for a start in progress. A
        start that fails here is tried again (and its error raised) by the first job of that worker."""
        for worker in self._workers:
            threading.Thread(
                target=worker.start_quietly, name=f"worker-{worker.index}-start", daemon=True
            ).start()

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers started so far and still in use."""
        return [w.pid for w in self._workers if w.pid is not None]

    def shutdown(self) -> None:
        """End every worker: all are told to stop first, then waited for together (not one after the other)."""
        self._closed = True
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            worker.wait_stopped()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


class _Worker:
    """One worker process (a one-process ProcessPoolExecutor) and the thread forwarding its output."""

    _job_ids = itertools.count(1)

    def __init__(self, index: int, threads: str, preload: tuple[str, ...]):
        self.index, self.threads, self.preload = index, threads, preload
        self.pid: int | None = None
        self._executor: ProcessPoolExecutor | None = None
        # one start at a time: `start_quietly` in the background, or `run`
        self._starting = threading.Lock()
        # guards the current job's routing (the reader thread reads it)
        self._lock = threading.Lock()
        self._job: int | None = None
        self._sink: Callable[[str], None] | None = None
        self._job_output_done = threading.Event()

    def _ensure_started(self) -> None:
        with self._starting:
            if self._executor is None:
                self._start()

    def start_quietly(self) -> None:
        """Start the process if it is not running; a failure is left for the first job to meet and report."""
        try:
            self._ensure_started()
        except WorkerDied as err:
            log.debug("worker %d: %s", self.index, err)

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        reader, writer = context.Pipe(duplex=False)
        executor = ProcessPoolExecutor(
            1,
            mp_context=context,
            initializer=_worker_main,
            initargs=(writer, os.getpid(), self.threads, self.preload),
        )
        try:
            # starts the process; the imports happen here, once
            self.pid = executor.submit(os.getpid).result()
        except BrokenProcessPool:
            executor.shutdown(wait=False)
            raise WorkerDied(
                "a worker process died while starting (its imports failed or it was killed); see the "
                "log lines before this error"
            ) from None
        finally:
            writer.close()  # the worker holds the only writing end now: its exit ends the reader below
        self._executor = executor
        threading.Thread(
            target=self._forward, args=(reader,), name=f"worker-{self.index}-output", daemon=True
        ).start()

    def _forward(self, reader) -> None:
        """Route the worker's lines to the current job's sink (other lines, e.g. start-up, to this module's log)."""
        while True:
            try:
                job, line = reader.recv()
            except (EOFError, OSError):  # the worker exited (or was killed mid-line)
                break
            with self._lock:
                sink = self._sink if job is not None and job == self._job else None
            if line is None:
                if sink is not None:
                    self._job_output_done.set()
                continue
            try:
                (sink or (lambda text: log.info("worker %s: %s", self.pid, text)))(line)
            except Exception:  # noqa: BLE001 - a failing log sink must not stop the forwarding of later lines
                log.exception("worker %s: could not forward a log line", self.pid)
        reader.close()

    def run(self, job: Job, log_line: Callable[[str], None]) -> tuple[int, int | None]:
        """(exit code, worker pid) of one job; raises WorkerDied if the process ends abruptly meanwhile."""
        self._ensure_started()
        job_id = next(self._job_ids)
        with self._lock:
            self._job, self._sink = job_id, log_line
            self._job_output_done.clear()
        pid = self.pid
        try:
            assert self._executor is not None  # started above
            code = self._executor.submit(_run_job, job_id, job).result()
            # The job's last lines may still be in the pipe: they precede its end-of-output record.
            self._job_output_done.wait(timeout=60)
            return code, pid
        except BrokenProcessPool:
            self._discard()
            raise WorkerDied(
                f"the worker process {pid} running {_describe(job)} ended abruptly (killed by a "
                "signal, e.g. out of memory); the worker is replaced for the jobs after it"
            ) from None
        finally:
            with self._lock:
                self._job, self._sink = None, None

    def _discard(self) -> None:
        executor, self._executor, self.pid = self._executor, None, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Tell the worker process to end; one still running a job (a flow that is failing or cancelled) is
        terminated. `wait_stopped` waits for it."""
        with self._starting:  # a start in progress finishes first, so its process is stopped too
            executor = self._executor
        if executor is None:
            return
        with self._lock:
            busy = self._job is not None
        if busy and self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        executor.shutdown(wait=False, cancel_futures=True)

    def wait_stopped(self, timeout: float = STOP_SECONDS) -> None:
        """Wait until the process `stop` ended has gone (killed when it takes longer than `timeout`)."""
        pid, self._executor, self.pid = self.pid, None, None
        if pid is None:
            return
        deadline = time.monotonic() + timeout
        while alive(pid):
            if time.monotonic() > deadline:
                log.warning("worker %s did not stop within %.0f s: killing it", pid, timeout)
                os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.05)


# -- inside a worker process ----------------------------------------------------------------------------------
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # as `gpt1 <command>` configures it
_current_job: int | None = None


class _JobOutput(io.TextIOBase):
    """sys.stdout/sys.stderr of a worker: complete lines go to the parent, tagged with the running job's id."""

    encoding, errors = "utf-8", "replace"

    def __init__(self, writer, lock: threading.Lock):
        # One pipe and lock for both streams: every thread of the worker writes (logging, prints, the job).
        self._writer, self._lock, self._partial = writer, lock, ""

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in lines:
                self._writer.send((_current_job, line.rstrip("\r")))
        return len(text)

    def end_of_job(self, last: bool) -> None:
        """Send what is left of a partial line; `last`: then the record that ends the job's output."""
        with self._lock:
            if self._partial:
                self._writer.send((_current_job, self._partial))
                self._partial = ""
            if last:
                self._writer.send((_current_job, None))

    def flush(self) -> None:  # lines are sent as they complete; a partial line waits for its end
        pass

    def isatty(
        self,
    ) -> bool:  # progress bars (tqdm, disable=None) stay off, as in a piped subprocess
        return False

    def writable(self) -> bool:
        return True


def _worker_main(writer, parent_pid: int, threads: str, preload: tuple[str, ...]) -> None:
    """Initializer of a worker process: output to the parent, exit with it, thread share, imports done once."""
    os.environ.pop(PARENT_PID_ENV, None)  # its watcher would stop the caller's whole process group
    os.environ["OMP_NUM_THREADS"] = threads  # before torch is imported
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    lock = threading.Lock()
    sys.stdout, sys.stderr = _JobOutput(writer, lock), _JobOutput(writer, lock)
    logging.basicConfig(level=logging.INFO, format=_LOG_FORMAT, stream=sys.stderr, force=True)

    def exit_with_parent() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)  # now, mid-job if need be: nothing may go on writing into the stage directories

    threading.Thread(target=exit_with_parent, name="exit-with-parent", daemon=True).start()
    for module in preload:
        importlib.import_module(module)
    # registered after the imports, so it runs before their exit handlers
    atexit.register(os._exit, 0)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.set_num_threads(int(threads))
        # torch.optim.Optimizer.__init__ imports torch._dynamo on first use (seconds): pay it here, once.
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])


def _run_job(job_id: int, job: Job) -> int:
    """One job in this worker; returns its exit code (an exception escaping the job is a bug: traceback, 1)."""
    global _current_job
    _current_job = job_id
    try:
        code = job()
    except BaseException:  # noqa: BLE001 - reported like an uncaught exception ends a process
        traceback.print_exc()
        code = 1
    for stream, last in ((sys.stdout, False), (sys.stderr, True)):
        if isinstance(stream, _JobOutput):
            stream.end_of_job(last)
    _current_job = None
    return code
