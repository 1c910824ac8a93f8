"""Extraction under a time budget, in a child process, with third-party messages captured.

One long-lived child per process, started on first use, runs `extract.extract` on each file
sent to it: about 0.3 s to start (with the parsers' imports), then about 0.1 ms a file on top
of the extraction itself. A file that takes longer than `Limits.seconds` has its child killed,
and the next file gets a fresh child (each page OCR'd sends a byte on a pipe of its own, which
starts the time again, unless the caller set one `Budget` for the whole file, as the server
does for uploads); a child that dies (out of memory, a crash in a C parser) fails that file
only. Children are named: the server's uploads have one of their own, so that they never wait
for an index job's file nor it for them. A child's address space is capped
(`Limits.memory_mb`), and it exits once its parent is gone (killed). Time cannot be taken from
a parser stuck inside one process, and a parser's memory is given back only when its process
ends: that is why the parsers run over there.

Warnings and log records emitted while one file is extracted become that file's warnings, so
they carry its name instead of reaching the terminal without it.
`Limits.seconds == 0` extracts in this process instead: no time limit, same messages.
Not here: what the limits are (`extract.Limits`), what is done with a result (`pipeline`).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import logging.handlers
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from docsearch.errors import ExtractionError
from docsearch.indexer.extract import MB, Document, Limits, describe, extract
from docsearch.indexer.ocr import set_heartbeat

log = logging.getLogger(__name__)

MAX_MESSAGES = 3  # per file; a broken PDF can log the same complaint thousands of times


# ---------------------------------------------------------------------------------------------
# Messages from third-party code


@contextlib.contextmanager
def captured_messages() -> Iterator[list[str]]:
    """Warnings, WARNING+ log records and stray prints while the block runs, as short lines.

    Process-wide (the warnings filters and the root logger are global): the child runs one
    file at a time; in-process extraction accepts that a thread extracting alongside may
    have its messages counted here too.
    """
    messages: list[str] = []
    handler = logging.handlers.BufferingHandler(sys.maxsize)  # never flushes: it keeps them all
    handler.setLevel(logging.WARNING)
    root = logging.getLogger()
    printed = io.StringIO()
    root.addHandler(handler)
    try:
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
        ):
            warnings.simplefilter("always")
            yield messages
    finally:
        root.removeHandler(handler)
        messages.extend(f"{r.name.split('.')[0]}: {r.getMessage()}" for r in handler.buffer)
        messages.extend(str(w.message) for w in caught)
        messages.extend(line for line in printed.getvalue().splitlines() if line.strip())
        messages[:] = summarise(messages)


def summarise(messages: list[str]) -> list[str]:
    """Distinct messages in order, at most MAX_MESSAGES, then how many more there were."""
    distinct = list(dict.fromkeys(" ".join(m.split())[:300] for m in messages if m.strip()))
    if len(distinct) <= MAX_MESSAGES:
        return distinct
    return [*distinct[:MAX_MESSAGES], f"and {len(distinct) - MAX_MESSAGES} more warnings"]


def extract_capturing(
    path: Path, data: bytes | None, display_path: str, limits: Limits, spool: str | None = None
) -> Document:
    """`extract`, with the messages emitted meanwhile added to the document's warnings (or to
    the error's, for a file that fails)."""
    try:
        with captured_messages() as messages:
            doc = extract(path, data, display_path=display_path, limits=limits, spool=spool)
    except ExtractionError as exc:
        exc.warnings.extend(messages)
        raise
    doc.warnings.extend(messages)
    return doc


# ---------------------------------------------------------------------------------------------
# Messages on the pipes are pickles. Pickle writes a large bytes object straight to the pipe and
# reads it straight into one, so a file's bytes are not copied on the way.
_GONE = (OSError, EOFError, pickle.UnpicklingError)  # the other side closed its end or died


def _send(out: IO[bytes], message: object) -> None:
    pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def _receive(inp: IO[bytes]) -> Any:
    return pickle.load(inp)  # noqa: S301 - messages come from our own process pair


# ---------------------------------------------------------------------------------------------
# The child


@contextlib.contextmanager
def _memory_capped(limits: Limits) -> Iterator[None]:
    """While one file is extracted, this process's address space (and that of the programs it
    starts) is capped; lifted after, so that the next request is always read."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = int(limits.memory_mb * MB) if limits.memory_mb else soft
    if hard != resource.RLIM_INFINITY:  # (which is -1)
        cap = hard if cap == resource.RLIM_INFINITY else min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _child_reply(
    path: str, display_path: str, limits: Limits, data: bytes | None, spool: str | None
) -> tuple[Any, ...]:
    try:
        with _memory_capped(limits):
            return ("ok", extract_capturing(Path(path), data, display_path, limits, spool))
    except ExtractionError as exc:
        return ("failed", str(exc), exc.warnings)
    except MemoryError:  # this process holds one file: its memory ran out, not the parent's
        return ("failed", "ran out of memory while extracting", [])
    except Exception as exc:  # noqa: BLE001 - a bug of ours must still fail only this file
        return ("failed", f"internal error while extracting ({describe(exc)})", [])


def _exit_with_parent(parent: int, every: float = 0.5) -> None:
    """Exit once the parent is gone: a killed parent closes no pipe in time (this child may be
    busy for minutes inside a parser), and an orphan would OCR on for nobody."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def child_main() -> None:
    """Serve extraction requests on stdin/stdout until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent to handle
    _exit_with_parent(int(os.environ.get("DOCSEARCH_PARENT_PID", os.getppid())))
    beats = int(os.environ["DOCSEARCH_BEAT_FD"])
    set_heartbeat(lambda: os.write(beats, b"."))
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever a C library writes to stdout must not land in the replies
    while True:
        try:
            request = _receive(sys.stdin.buffer)
        except _GONE:
            return
        _send(replies, _child_reply(*request))


# ---------------------------------------------------------------------------------------------
# The parent side


def _died(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        hint = " (out of memory?)" if -returncode == getattr(signal, "SIGKILL", 9) else ""
        return f"the extraction process was killed by {name}{hint}"
    return f"the extraction process exited with status {returncode}"


class ExtractionProcess:
    """A child process that extracts one file at a time; restarted after a timeout or a death.

    Thread-safe: requests from several threads take turns. POSIX: the wait is a select() on
    the reply pipe.
    """

    def __init__(self, name: str = "files") -> None:
        self.name = name  # on the child's command line, so that `ps` tells them apart
        self._child: subprocess.Popen[bytes] | None = None
        self._beats = -1  # the read end of the child's heartbeat pipe
        self._lock = threading.Lock()

    def extract(
        self,
        path: Path,
        data: bytes | None,
        display_path: str,
        limits: Limits,
        spool: str | None = None,
        budget: Budget | None = None,
    ) -> Document:
        """See `extract_guarded`."""
        request = (str(path), display_path, limits, data, spool)
        with self._lock:
            child = self._running()
            try:
                reply = self._ask(child, request, limits.seconds, budget)
            except BaseException:  # no reply, or Ctrl-C mid-exchange: its next one would be stale
                self._forget(child)
                raise
        if reply[0] == "ok":
            return reply[1]
        raise ExtractionError(reply[1], warnings=reply[2])

    def _forget(self, child: subprocess.Popen[bytes]) -> None:
        """A child that stopped answering: reap it; the next request starts another."""
        self._child = None
        child.kill()
        child.wait()
        self._close_beats()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def _ask(
        self,
        child: subprocess.Popen[bytes],
        request: object,
        seconds: float,
        budget: Budget | None = None,
    ) -> Any:
        """The child's reply; ExtractionError if none comes within `seconds` (restarted by each
        page OCR'd) or `budget`, if the budget is cancelled, or if the child dies."""
        assert child.stdin is not None and child.stdout is not None
        try:
            _send(child.stdin, request)
            # A select, not a timer thread: a thread per file cost as much as the rest together.
            replies = child.stdout.fileno()
            quiet_until = time.monotonic() + seconds  # moved on by each page OCR'd
            while True:
                wait = quiet_until - time.monotonic()
                if budget is not None:
                    budget.check()
                    wait = min(wait, budget.left(), budget.poll_s)
                ready = select.select([replies, self._beats], [], [], max(0.0, wait))[0]
                if replies in ready:
                    return _receive(child.stdout)
                if self._beats in ready:
                    os.read(self._beats, 4096)  # pages OCR'd: the time starts again
                    quiet_until = time.monotonic() + seconds
                elif time.monotonic() >= quiet_until:
                    raise ExtractionError(
                        f"extracting took longer than {seconds:g} s; "
                        "set DOCSEARCH_EXTRACT_SECONDS higher to index it"
                    )
        except _GONE:
            self._forget(child)  # reaped first, so that its exit status is known
            raise ExtractionError(_died(child.returncode)) from None

    def _running(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self._close_beats()
            self._beats, beat_end = os.pipe()
            try:
                self._child = _start_child(beat_end, self.name)
            finally:
                os.close(beat_end)  # the child has its copy
        return self._child

    def _close_beats(self) -> None:
        if self._beats >= 0:
            os.close(self._beats)
            self._beats = -1

    def kill(self) -> None:
        """Kill the child now; whoever waits on it gets an ExtractionError (it died)."""
        child = self._child
        if child is not None:
            with contextlib.suppress(OSError):
                child.kill()

    def close(self) -> None:
        """Let the child finish and go (it exits when its input closes)."""
        child, self._child = self._child, None
        if child is None:
            return
        with contextlib.suppress(OSError):
            assert child.stdin is not None
            child.stdin.close()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        self._close_beats()


def _start_child(beat_end: int, name: str) -> subprocess.Popen[bytes]:
    # The child must import this very docsearch, wherever it was imported from here.
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["DOCSEARCH_BEAT_FD"] = str(beat_end)
    env["DOCSEARCH_PARENT_PID"] = str(os.getpid())
    return subprocess.Popen(
        [sys.executable, "-m", "docsearch.indexer.extract_process", name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        pass_fds=(beat_end,),
    )


class Budget:
    """One wall-clock budget for a whole extraction, whatever it does meanwhile (OCR'd pages do
    not renew it), and a way to stop it early: `cancelled` is set when its caller gave up."""

    poll_s = 0.25  # how soon a cancellation is seen

    def __init__(self, seconds: float, cancelled: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.cancelled = cancelled or threading.Event()

    def left(self) -> float:
        return self.ends - time.monotonic()

    def check(self) -> None:
        if self.cancelled.is_set():
            raise ExtractionError("stopped: its request was cancelled")
        if self.left() <= 0:
            raise ExtractionError(f"extracting took longer than its {self.seconds:g} s")


_shared: dict[str, tuple[int, ExtractionProcess]] = {}  # name -> (pid that started it, process)
_shared_lock = threading.Lock()
_no_child = False  # set once starting a child failed: extract in this process from then on


def _shared_process(name: str = "files") -> ExtractionProcess:
    """This process's extraction child of that name (a forked copy starts its own)."""
    with _shared_lock:
        held = _shared.get(name)
        if held is None or held[0] != os.getpid():
            held = _shared[name] = (os.getpid(), ExtractionProcess(name))
            atexit.register(held[1].close)
        return held[1]


def stop_child(name: str) -> None:
    """Kill this process's extraction child of that name now (a server stopping: an upload
    waiting on it fails at once instead of holding the shutdown for the rest of its file)."""
    with _shared_lock:
        held = [proc for key, (pid, proc) in _shared.items() if key == name and pid == os.getpid()]
    for proc in held:
        proc.kill()


def extract_guarded(
    path: Path,
    data: bytes | None,
    display_path: str,
    limits: Limits,
    spool: bool = False,
    budget: Budget | None = None,
    child: str = "files",
) -> Document:
    """Extract one file within `limits` (time included); ExtractionError on any failure.

    `data`: the file's bytes, or None for the extraction to read the file itself (a text file
    then a block at a time). `spool`: a long document comes spooled (see `extract.Document`),
    in a folder of this process's that goes when it exits (with what a killed child left).
    `budget`: one time limit for the whole file, and its cancellation (a child's extraction
    only). `child`: which of this process's extraction children runs it."""
    global _no_child
    folder = spool_folder() if spool else None
    if limits.seconds > 0 and not _no_child:
        try:
            proc = _shared_process(child)
            return proc.extract(path, data, display_path, limits, folder, budget)
        except OSError as exc:  # no interpreter to start (a frozen application, say)
            log.warning("extracting in this process, without a time limit: %s", exc)
            _no_child = True
    return extract_capturing(path, data, display_path, limits, folder)


_spool: tuple[int, str] | None = None  # (pid that made it, the folder)


def spool_folder() -> str:
    """This process's folder for spooled documents, made on first use."""
    global _spool
    with _shared_lock:
        if _spool is None or _spool[0] != os.getpid():
            import shutil
            import tempfile

            _sweep_spool_folders()
            _spool = (os.getpid(), tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-"))
            atexit.register(shutil.rmtree, _spool[1], ignore_errors=True)
        return _spool[1]


SPOOL_PREFIX = "docsearch-spool-"


def _sweep_spool_folders() -> None:
    """Remove the spool folders of processes that are gone (killed: no exit handler ran)."""
    import shutil
    import tempfile

    for folder in Path(tempfile.gettempdir()).glob(f"{SPOOL_PREFIX}*-*"):
        pid = folder.name[len(SPOOL_PREFIX) :].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


if __name__ == "__main__":
    child_main()
