"""The exceptions: each carries what the program or its control API said."""

from __future__ import annotations

from typing import Any, Dict, List


class PgoutputError(Exception):
    """The base of every error of this package."""


class StartError(PgoutputError):
    """The program did not start: it exited, or did not listen within the start-up timeout.
    ``log`` is everything it wrote to standard error."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(f"{message}\n--- its log ---\n{log}" if log else message)
        self.log = log


class ControlError(PgoutputError):
    """The control API refused a request: ``status`` is the HTTP status, ``reason`` the
    server's own words (its ``{"error": ...}``)."""

    def __init__(self, method: str, path: str, status: int, reason: str, body: Any = None) -> None:
        super().__init__(f"{method} {path}: {status}: {reason}")
        self.method = method
        self.path = path
        self.status = status
        self.reason = reason
        self.body = body


class WaitTimeout(ControlError, TimeoutError):
    """``wait_for_flush`` timed out (the control API's 408): the slot was not confirmed
    there in time. ``confirmed_flush_lsn`` is where it stood."""

    @property
    def confirmed_flush_lsn(self) -> Any:
        return self.body.get("confirmed_flush_lsn") if isinstance(self.body, dict) else None


class FindingsError(AssertionError, PgoutputError):
    """``assert_no_findings`` failed: the judge found the consumer doing something wrong.
    The message is the server's account, one finding a line; ``findings`` the findings as
    the control API gives them."""

    def __init__(self, findings: List[Dict[str, Any]], where: str) -> None:
        lines = [f"{len(findings)} finding{'s' if len(findings) != 1 else ''} of {where}:"]
        for finding in findings:
            lines.append(f"- {finding.get('finding')} (slot {finding.get('slot')}): {finding.get('text')}")
        super().__init__("\n".join(lines))
        self.findings = findings
