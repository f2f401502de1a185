"""What the test server and the proxy share: the process (started, waited for, always
stopped, its log kept) and the control API endpoints both have."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from types import TracebackType
from typing import Any, Dict, Iterable, List, Optional, Pattern, Sequence, Type, TypeVar, Union, cast

from ._binary import find_binary
from .errors import ControlError, FindingsError, PgoutputError, StartError, WaitTimeout
from .lsn import lsn_to_text

Json = Any
Rule = Dict[str, Any]
Lsn = Union[str, int]
Found = List[Dict[str, Any]]
ServiceT = TypeVar("ServiceT", bound="_Service")

#: How long ``stop()`` waits for the program to exit after SIGINT before it kills it.
STOP_GRACE_SECONDS = 10.0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the program gets SIGKILL when the test process dies, however it dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _kill(process: "subprocess.Popen[bytes]") -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


class _Service:
    """A ``pgoutput`` subcommand run as a child process, with its control API."""

    #: The subcommand, as in its log lines ("serve", "proxy").
    kind: str = ""
    #: The line with the address it listens on; group 1 is the address.
    _listening: Pattern[str]

    def __init__(self, *, binary: Optional[str], startup_timeout: float, env: Optional[Dict[str, str]]) -> None:
        self._binary = binary
        self._startup_timeout = startup_timeout
        self._env = env
        self._dir: Optional[str] = None
        self._process: Optional["subprocess.Popen[bytes]"] = None
        self._log_path: Optional[str] = None
        self._final_log: Optional[str] = None
        self.host = ""
        self.port = 0
        self.control_url = ""

    # -- the process ------------------------------------------------------------------

    def _arguments(self, directory: str) -> List[str]:
        """The subcommand's arguments, files written to ``directory``."""
        raise NotImplementedError

    def _started(self, match: "re.Match[str]") -> None:
        """Reads what the listening line says."""

    def start(self: ServiceT) -> ServiceT:
        """Starts the program on free loopback ports and waits until it accepts
        connections and control requests. Raises ``StartError`` with its log if it exits
        or does not listen within the start-up timeout. Returns ``self``."""
        if self._process is not None:
            raise PgoutputError(f"pgoutput {self.kind} was started already")
        self._dir = tempfile.mkdtemp(prefix=f"pgoutput-{self.kind}-")
        try:
            command = [find_binary(self._binary), self.kind, "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0"]
            command += self._arguments(self._dir)
            self._log_path = os.path.join(self._dir, f"{self.kind}.log")
            env = dict(os.environ, **(self._env or {}))
            with open(self._log_path, "wb") as log:
                self._process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                )
            weakref.finalize(self, _kill, self._process)
            self._wait_until_listening()
            probe = getattr(self, "_probe", None)
            if isinstance(probe, dict):
                self.set_probe(**probe)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_listening(self) -> None:
        control = re.compile(rf"^pgoutput {self.kind}: control API on (http://[^/\s]+)/$", re.M)
        deadline = time.monotonic() + self._startup_timeout
        while True:
            log = self.log
            listening, control_at = self._listening.search(log), control.search(log)
            if listening and control_at:
                self.host, _, port = listening.group(1).rpartition(":")
                self.port = int(port)
                self.control_url = control_at.group(1)
                self._started(listening)
                return
            code = self._process.poll() if self._process else None
            if code is not None:
                raise StartError(f"pgoutput {self.kind} exited with status {code} before it listened", self.log)
            if time.monotonic() > deadline:
                raise StartError(
                    f"pgoutput {self.kind} did not listen within {self._startup_timeout:g} s", self.log
                )
            time.sleep(0.01)

    def stop(self) -> None:
        """Stops the program (SIGINT, then SIGKILL after a grace period) and removes its
        files; its log stays readable. Safe to call more than once, and after it ended."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._final_log is None and self._log_path is not None:
            self._final_log = self._read_log()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if process is not None:
            self._returncode = process.returncode

    close = stop

    @property
    def running(self) -> bool:
        """Whether the program is still running."""
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> Optional[int]:
        """The program's exit status once it ended, else ``None``."""
        if self._process is not None:
            return self._process.poll()
        return getattr(self, "_returncode", None)

    def _read_log(self) -> str:
        if self._log_path is None:
            return ""
        try:
            with open(self._log_path, "rb") as log:
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    @property
    def log(self) -> str:
        """Everything the program wrote so far (after ``stop()``, all it wrote)."""
        return self._final_log if self._final_log is not None else self._read_log()

    def __enter__(self: ServiceT) -> ServiceT:
        if self._process is None:
            self.start()
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], traceback: Optional[TracebackType]
    ) -> None:
        self.stop()
        if error is not None and hasattr(error, "add_note"):
            error.add_note(f"--- pgoutput {self.kind} log ---\n{self.log}")

    def __repr__(self) -> str:
        state = f"{self.host}:{self.port}" if self.running else "stopped"
        return f"<{type(self).__name__} {state}>"

    # -- the control API ---------------------------------------------------------------

    def _request(self, method: str, path: str, body: Json = None, *, lines: Optional[Iterable[Json]] = None,
                 timeout: float = 60.0) -> Json:
        if not self.control_url:
            raise PgoutputError(f"pgoutput {self.kind} is not started")
        data = None
        if lines is not None:
            data = "".join(line if isinstance(line, str) else json.dumps(line) + "\n" for line in lines).encode()
        elif body is not None:
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.control_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                answer_body = json.loads(text or b"{}")
            except ValueError:
                answer_body = text.decode("utf-8", "replace")
            reason = answer_body.get("error", str(answer_body)) if isinstance(answer_body, dict) else answer_body
            error = WaitTimeout if e.code == 408 else ControlError
            raise error(method, path, e.code, reason, answer_body) from None
        except (urllib.error.URLError, OSError) as e:
            code = self.returncode
            if code is not None:
                raise PgoutputError(
                    f"{method} {path}: pgoutput {self.kind} has exited (status {code})\n--- its log ---\n{self.log}"
                ) from e
            raise PgoutputError(f"{method} {path}: {e}") from e
        return json.loads(text) if text else None

    def add_faults(self, *rules: Union[Rule, Sequence[Rule]]) -> int:
        """Arms fault rules (each a rule as JSON, or a list of them; see ``pgoutput serve
        --help``); returns how many were armed."""
        flat: List[Rule] = []
        for rule in rules:
            flat.extend([rule] if isinstance(rule, dict) else rule)
        return int(self._request("POST", "/faults", flat)["armed"])

    def faults(self) -> List[Dict[str, Any]]:
        """The rules armed, each ``{"rule": ..., "fired": N}``."""
        return cast(Found, self._request("GET", "/faults"))

    def clear_faults(self) -> None:
        """Disarms every rule."""
        self._request("DELETE", "/faults")

    def slots(self) -> List[Dict[str, Any]]:
        """Each slot: its positions, what its clients were sent, its state."""
        return cast(Found, self._request("GET", "/slots"))

    def slot(self, name: str) -> Dict[str, Any]:
        """One slot of ``slots()``; ``KeyError`` if there is none of that name."""
        for slot in self.slots():
            if slot.get("name") == name:
                return slot
        raise KeyError(f"no slot {name!r}")

    def findings(self, slot: Optional[str] = None) -> List[Dict[str, Any]]:
        """What the judge found the consumer doing wrong (of one slot, or all), each with
        ``"finding"``, ``"slot"``, its fields and ``"text"``."""
        found: Found = self._request("GET", "/findings")
        return [f for f in found if slot is None or f.get("slot") == slot]

    def facts(self, slot: Optional[str] = None) -> List[Dict[str, Any]]:
        """What happened on each slot (streams started and ended, crashes, transactions
        sent again), each with ``"fact"``, ``"slot"``, its fields and ``"text"``."""
        known: Found = self._request("GET", "/facts")
        return [f for f in known if slot is None or f.get("slot") == slot]

    def assert_no_findings(self, slot: Optional[str] = None) -> None:
        """Raises ``FindingsError`` (an ``AssertionError``) with the server's account of
        every finding (of one slot, or all), so a test fails saying what the consumer did."""
        found = self.findings(slot)
        if found:
            raise FindingsError(found, f"pgoutput {self.kind}" + (f", slot {slot}" if slot else ""))

    def probe(self) -> Optional[Dict[str, Any]]:
        """The judge's probe, or ``None`` when it is not armed."""
        return cast(Optional[Dict[str, Any]], self._request("GET", "/probe"))

    def set_probe(self, every: int = 1, after: Optional[int] = None, wait_ms: Optional[int] = None) -> Dict[str, Any]:
        """Arms the judge's probe: one transaction in ``every`` is held after its first
        ``after`` change(s) with a reply request, so a consumer that confirms what it has
        not received is caught."""
        body: Dict[str, Any] = {"every": every}
        if after is not None:
            body["after"] = after
        if wait_ms is not None:
            body["wait_ms"] = wait_ms
        return cast(Dict[str, Any], self._request("POST", "/probe", body))

    def clear_probe(self) -> None:
        """Disarms the probe."""
        self._request("DELETE", "/probe")

    def wait_for_flush(self, slot: str, lsn: Optional[Lsn] = None, timeout: float = 30.0) -> str:
        """Waits until the consumer confirmed ``slot`` at ``lsn`` (by default, all it can
        be sent) and returns the confirmed position; ``WaitTimeout`` (a ``TimeoutError``)
        with where it stood if it did not within ``timeout`` seconds."""
        body: Dict[str, Any] = {"slot": slot, "timeout_ms": int(timeout * 1000)}
        if lsn is not None:
            body["lsn"] = lsn_to_text(lsn)
        return str(self._request("POST", "/wait", body, timeout=timeout + 30)["confirmed_flush_lsn"])

    def checkpoint(self) -> None:
        """Persists every slot's position now: a crash takes slots back to here."""
        self._request("POST", "/checkpoint")

    def crash(self) -> None:
        """Drops every connection and takes each slot back to its last checkpoint, as a
        crash of PostgreSQL does."""
        self._request("POST", "/crash")

    def invalidate_slot(self, name: str) -> None:
        """Invalidates a slot: its next START_REPLICATION gets ERROR 55000."""
        self._request("POST", f"/slots/{name}/invalidate")

    def hold_slot(self, name: str, ms: int) -> None:
        """Keeps a slot active for ``ms`` after its client leaves (55006 meanwhile)."""
        self._request("POST", f"/slots/{name}/hold", {"ms": ms})

    def drop_slot(self, name: str) -> None:
        """Drops a slot: its next START_REPLICATION gets ERROR 42704."""
        self._request("DELETE", f"/slots/{name}")


def _probe_arguments(probe: Union[None, int, Dict[str, Any]]) -> List[str]:
    """``--probe N`` for a probe given as a number; a dict (``{"every": 1, "after": 2,
    "wait_ms": 500}``) is armed through the control API once the program listens."""
    if probe is None or isinstance(probe, dict):
        return []
    return ["--probe", str(int(probe))]


def _fault_arguments(faults: Iterable[Union[Rule, str]]) -> List[str]:
    arguments: List[str] = []
    for rule in faults:
        arguments += ["--fault", rule if isinstance(rule, str) else json.dumps(rule)]
    return arguments
