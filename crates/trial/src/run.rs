//! Running scenarios: the source made ready, the workload committed, its ledger read
//! from the reference slot, the consumer started behind a proxy armed with the
//! scenario's faults, its cues acted on as it confirms, and what it applied graded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::grade::{grade, grade_state, Anomaly};
use crate::ledger::Ledger;
use crate::scenario::{Cue, CueAction, Scenario};
use crate::schema;
use crate::sink::Database;
use crate::source::{Source, Workload};
use crate::supervise::{Assignment, Supervised};
use crate::verdict::Verdict;
use pgoutput_client::ConnInfo;
use pgoutput_codec::Lsn;
use pgoutput_harness::judge::{Finding, Harm, Probe};
use pgoutput_harness::proxy::Proxy;

/// A trial: which source, which consumer, which scenarios.
#[derive(Debug, Clone)]
pub struct Trial {
    /// The source, as a libpq connection string (a superuser's, or one allowed to make
    /// tables, publications and slots). The consumer reaches it through the proxy,
    /// logging in as this user.
    pub upstream: String,
    /// The consumer under test: a shell command the trial starts (and restarts).
    pub consumer: String,
    pub scenarios: Vec<Scenario>,
    /// The seed of the workloads' values: the same seed, the same run.
    pub seed: u64,
    /// How long a consumer has to confirm the end of a scenario before it is `unknown`.
    pub budget: Duration,
    /// A sink of tables: the libpq connection string of a database where the consumer
    /// writes the rows it applied (a subscriber's), compared at the end with the
    /// source's. Without it, the sink is a JSON-lines file in `work_dir`.
    pub sink_database: Option<String>,
    /// Where the sinks and the consumer's logs go (one of each per scenario).
    pub work_dir: PathBuf,
    /// How to replay a scenario: the command line with `{scenario}` where its name goes.
    pub replay: String,
    /// Set (by a signal handler) to stop: the scenario under way is cleaned up (the
    /// consumer stopped, the proxy and the slots gone) and the run ends with an error.
    pub interrupt: Arc<AtomicBool>,
    /// A consumer already running, which the trial cannot start: it is attached to
    /// instead, and the scenarios that need to kill or start it are skipped.
    pub attach: Option<Attached>,
}

/// Where an attached consumer connects, what it streams and where it writes: the same
/// for every scenario. Between scenarios its connection is cut and the address closed
/// for a moment, so it must connect again on its own (as it would after a server
/// restart); the trial empties its sink in place before each scenario, so it must
/// append to it (`O_APPEND`).
#[derive(Debug, Clone)]
pub struct Attached {
    /// The proxy's address.
    pub listen: SocketAddr,
    /// The slot, made afresh for each scenario; its name starts `pgoutput_trial_`.
    pub slot: String,
    /// The JSON-lines sink (with `sink_database`, the consumer writes there instead).
    pub sink: PathBuf,
}

/// A scenario not run, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub name: String,
    pub class: String,
    pub why: String,
}

/// What a trial reports as it goes.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// A scenario starts (number from 1, of `total`).
    Started {
        number: usize,
        total: usize,
        scenario: &'a Scenario,
    },
    /// It ended.
    Finished(&'a ScenarioReport),
    /// It was not run.
    Skipped(&'a Skipped),
}

/// A finding of the judge with the harm it does.
#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    pub finding: Finding,
    pub harm: Harm,
    /// The harm in words.
    pub means: &'static str,
}

/// The consumer's process over a scenario.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Process {
    pub starts: u32,
    /// Exits on its own (not the trial's kills).
    pub exits: u32,
    /// How it last exited on its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_exit: Option<String>,
    /// The end of its output, when it did not pass.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub log_tail: String,
}

/// One scenario's result, with its evidence.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub name: String,
    pub class: String,
    pub verdict: Verdict,
    /// Why, in a line.
    pub summary: String,
    pub anomalies: Vec<Anomaly>,
    pub findings: Vec<Judged>,
    /// What went wrong in running it (the consumer would not start, a crash loop).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Committed transactions and rows, and rows rolled back.
    pub transactions: usize,
    pub rows: usize,
    pub aborted_rows: usize,
    /// Where a consumer that applied everything confirms to, and where it confirmed.
    pub end: Option<Lsn>,
    pub confirmed: Option<Lsn>,
    pub finished: bool,
    /// The sink's lines of changes (its rows, for a sink of tables), and a torn last line.
    pub sink_lines: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torn_line: Option<usize>,
    /// The JSON-lines file, or the sink's tables in words.
    pub sink: String,
    pub consumer: Process,
    pub elapsed_ms: u128,
    /// The one command that runs this scenario again, the same way.
    pub replay: String,
}

/// A trial's report card.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub consumer: String,
    pub scenarios: Vec<ScenarioReport>,
    /// The scenarios not run: those that kill or start a consumer the trial attached to.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

impl Report {
    /// The worst verdict (pass when there are no scenarios).
    #[must_use]
    pub fn verdict(&self) -> Verdict {
        self.scenarios
            .iter()
            .map(|s| s.verdict)
            .max()
            .unwrap_or(Verdict::Pass)
    }
}

/// The advisory lock a trial holds on its source's database while it runs (the bytes of
/// "pgtrial").
const TRIAL_LOCK: i64 = 0x0070_6774_7269_616c;

/// How many times a consumer may exit on its own in one scenario before it is in a
/// crash loop.
const CRASH_LOOP: u32 = 5;

impl Trial {
    /// Runs every scenario, in order, telling `progress` as it goes.
    ///
    /// # Errors
    ///
    /// What stops the whole trial: the source cannot be reached or refuses the trial's
    /// objects, the work directory cannot be made. A scenario's own troubles are in its
    /// report.
    pub fn run(&self, mut progress: impl FnMut(Progress<'_>)) -> Result<Report, String> {
        std::fs::create_dir_all(&self.work_dir)
            .map_err(|e| format!("{}: {e}", self.work_dir.display()))?;
        let info = ConnInfo::parse(Some(&self.upstream), |name| std::env::var(name).ok())
            .map_err(|e| format!("--upstream: {e}"))?;
        if let Some(sink) = &self.sink_database {
            let sink = ConnInfo::parse(Some(sink), |name| std::env::var(name).ok())
                .map_err(|e| format!("--sink-database: {e}"))?;
            if (&sink.host, sink.port, &sink.dbname) == (&info.host, info.port, &info.dbname) {
                return Err(format!(
                    "--sink-database: {} is the source's database, whose tables the sink's \
                     would replace; give another",
                    sink.dbname
                ));
            }
        }
        // One trial at a time on a source: each scenario drops and makes the same
        // objects. The lock lives as long as this connection.
        let mut guard = Source::connect(&info)?;
        let taken = guard.run(&format!("SELECT pg_try_advisory_lock({TRIAL_LOCK})"))?;
        if taken
            .first()
            .and_then(|row| row.first().cloned().flatten())
            .as_deref()
            != Some("t")
        {
            return Err(format!(
                "another trial is running on this source (it holds the advisory lock \
                 {TRIAL_LOCK}): its scenarios and this one's would drop each other's \
                 tables and slots; wait for it, or give another database"
            ));
        }
        let mut reports = Vec::new();
        let mut skipped = Vec::new();
        let total = self.scenarios.len();
        for (i, scenario) in self.scenarios.iter().enumerate() {
            if let (Some(_), Some(why)) = (&self.attach, scenario.needs_its_process()) {
                let skip = Skipped {
                    name: scenario.name.clone(),
                    class: scenario.class.clone(),
                    why: format!("the consumer is attached, not started by the trial: {why}"),
                };
                progress(Progress::Skipped(&skip));
                skipped.push(skip);
                continue;
            }
            progress(Progress::Started {
                number: i + 1,
                total,
                scenario,
            });
            let report = self.scenario(&info, i + 1, scenario)?;
            progress(Progress::Finished(&report));
            reports.push(report);
        }
        Ok(Report {
            seed: self.seed,
            consumer: self.consumer.clone(),
            scenarios: reports,
            skipped,
        })
    }

    /// One scenario: made ready, driven, judged.
    fn scenario(
        &self,
        info: &ConnInfo,
        number: usize,
        scenario: &Scenario,
    ) -> Result<ScenarioReport, String> {
        let mut stage = self.stage(info, number, scenario)?;
        let course = stage.drive()?;
        stage.conclude(course)
    }

    /// The scenario made ready: the source's (and a sink's) tables afresh, the slots,
    /// the workload committed and read into the ledger, the sink emptied, the proxy
    /// armed, the consumer started.
    fn stage<'t>(
        &'t self,
        info: &'t ConnInfo,
        number: usize,
        scenario: &'t Scenario,
    ) -> Result<Stage<'t>, String> {
        let started = Instant::now();
        let slot = self
            .attach
            .as_ref()
            .map_or_else(|| schema::consumer_slot(number), |a| a.slot.clone());
        let mut source = Source::connect(info)?;
        source.prepare()?;
        let mut tables = match &self.sink_database {
            Some(conninfo) => {
                let mut tables = Database::connect(conninfo)?;
                tables.prepare()?;
                Some(tables)
            }
            None => None,
        };
        source.run(&format!(
            "SELECT pg_create_logical_replication_slot('{}', 'pgoutput'); \
             SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')",
            schema::REFERENCE_SLOT
        ))?;
        let seed = self.seed ^ (number as u64).wrapping_mul(0x9E37_79B9);
        let mut workload = Workload::new(info, seed);
        let mut ledger = Ledger::default();
        workload
            .commit(
                &scenario.workload,
                &mut source,
                &mut ledger,
                tables.as_mut(),
            )
            .map_err(|e| format!("{}: workload: {e}", scenario.name))?;
        let log = self
            .work_dir
            .join(format!("{number:02}-{}.log", scenario.name));
        let sink = match &self.attach {
            // Emptied in place: the consumer has it open.
            Some(attached) => {
                std::fs::File::create(&attached.sink)
                    .map_err(|e| format!("{}: {e}", attached.sink.display()))?;
                attached.sink.clone()
            }
            None => {
                let sink = self
                    .work_dir
                    .join(format!("{number:02}-{}.jsonl", scenario.name));
                // What an earlier run in this directory left: the sink, the log, and the
                // consumer's own state kept beside the sink (named after it: offsets,
                // marks).
                forget(&self.work_dir, &sink)?;
                std::fs::write(&sink, b"").map_err(|e| format!("{}: {e}", sink.display()))?;
                let _ = std::fs::remove_file(&log);
                sink
            }
        };
        let proxy = self.proxy(scenario, &slot)?;
        let consumer = match &self.attach {
            Some(_) => Supervised::attached(),
            None => {
                let assignment = Assignment {
                    host: proxy.addr().ip().to_string(),
                    port: proxy.addr().port(),
                    user: info.user.clone(),
                    password: info.password.clone(),
                    dbname: info.dbname.clone(),
                    slot: slot.clone(),
                    publication: schema::PUBLICATION.into(),
                    sink: sink.clone(),
                    sink_database: self.sink_database.clone(),
                    scenario: scenario.name.clone(),
                };
                Supervised::start(&self.consumer, assignment, &log)
                    .map_err(|e| format!("the consumer command: {e}"))?
            }
        };
        let budget = scenario
            .budget_ms
            .map_or(self.budget, |ms| self.budget.max(Duration::from_millis(ms)));
        let mut cues: Vec<&Cue> = scenario.cues.iter().collect();
        cues.sort_by_key(|cue| cue.confirmed);
        Ok(Stage {
            trial: self,
            scenario,
            started,
            budget,
            slot,
            sink,
            source,
            tables,
            workload,
            ledger,
            proxy,
            consumer,
            cues,
        })
    }

    fn proxy(&self, scenario: &Scenario, slot: &str) -> Result<Proxy, String> {
        let mut builder = Proxy::builder(&self.upstream)
            .map_err(|e| e.to_string())?
            .probe(Probe::every(1));
        if let Some(attached) = &self.attach {
            builder = builder.listen(attached.listen);
        }
        for fault in &scenario.faults {
            let mut fault = fault.clone();
            fault.slot.get_or_insert_with(|| slot.to_owned());
            builder = builder.fault(fault);
        }
        if let Some(ms) = scenario.checkpoint_interval_ms {
            builder = builder.checkpoint_interval(Duration::from_millis(ms));
        }
        builder.start().map_err(|e| format!("the proxy: {e}"))
    }
}

/// A scenario under way: what it runs on (the source, a sink of tables, the proxy, the
/// consumer), its ledger, and the cues still to come.
struct Stage<'t> {
    trial: &'t Trial,
    scenario: &'t Scenario,
    started: Instant,
    budget: Duration,
    slot: String,
    sink: PathBuf,
    source: Source,
    tables: Option<Database>,
    workload: Workload<'t>,
    ledger: Ledger,
    proxy: Proxy,
    consumer: Supervised,
    /// In the order they come, the first next.
    cues: Vec<&'t Cue>,
}

/// What came of driving a scenario.
#[derive(Debug, Default)]
struct Course {
    /// The consumer confirmed the end of what was committed.
    finished: bool,
    /// Where it last confirmed.
    confirmed: Option<Lsn>,
    /// Where the WAL stood after the `then` steps, when there are (the idle end).
    idle_end: Option<Lsn>,
    /// The slot dropped or invalidated: how often the consumer had exited then.
    dropped: Option<u32>,
    invalidated: bool,
    /// It made its slot again after it was gone, and went on.
    went_on: bool,
    then_done: bool,
    interrupted: bool,
    /// A `stall` rule held its connection (and the slot's hold after it is armed).
    stalled: bool,
    problems: Vec<String>,
}

impl Stage<'_> {
    /// Waits on what the consumer confirms, acting on each cue as its transaction is
    /// confirmed, until the end is confirmed (and the idle end after `then`), the budget
    /// runs out, the consumer fails loudly once its slot is gone, or it crash-loops.
    fn drive(&mut self) -> Result<Course, String> {
        let deadline = self.started + self.budget;
        let mut course = Course {
            finished: self.ledger.end().is_none(),
            ..Course::default()
        };
        loop {
            if self.trial.interrupt.load(Ordering::SeqCst) {
                course.interrupted = true;
                break;
            }
            if let Some(exits) = course.dropped {
                if !course.went_on && !course.invalidated && self.source.slot_exists(&self.slot)? {
                    course.went_on = true;
                    course.problems.push(
                        "made its slot again after it was dropped, and went on: what was \
                         committed meanwhile was never sent to it"
                            .to_owned(),
                    );
                }
                // Failed loudly: it exited, and again when started again.
                if !course.went_on && self.consumer.exits >= exits + 2 {
                    break;
                }
            } else if self.consumer.exits > CRASH_LOOP {
                course.problems.push(format!(
                    "crash loop: the consumer exited {} times ({})",
                    self.consumer.exits,
                    self.consumer
                        .last_exit
                        .map_or_else(String::new, |status| status.to_string())
                ));
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            self.consumer
                .restart_if_exited()
                .map_err(|e| format!("restarting the consumer: {e}"))?;
            // The next thing to wait for: a cue's transaction, the end, the idle end.
            let (target, cue) = match self.cues.first() {
                Some(cue) => {
                    let at = match cue.confirmed {
                        0 => Lsn(1),
                        k => self
                            .ledger
                            .transactions
                            .get(k - 1)
                            .map_or(Lsn(u64::MAX), |t| t.end_lsn),
                    };
                    (at, true)
                }
                None if !course.finished => (self.ledger.end().unwrap_or_default(), false),
                None => match course.idle_end {
                    Some(idle_end) => (idle_end, false),
                    None => break,
                },
            };
            match self.proxy.wait_for_confirmed_flush(
                &self.slot,
                target,
                Duration::from_millis(100),
            ) {
                Ok(at) => {
                    course.confirmed = Some(at);
                    if cue {
                        let cue = self.cues.remove(0);
                        self.cue(cue, &mut course)?;
                    } else if course.dropped.is_some() && !course.went_on {
                        // Confirmed before the drop: what counts is how it fails now.
                        std::thread::sleep(Duration::from_millis(20));
                    } else if !course.finished {
                        course.finished = true;
                        if self.scenario.then.is_empty() || course.then_done {
                            break;
                        }
                        course.then_done = true;
                        course.idle_end = Some(self.then()?);
                    } else {
                        break;
                    }
                }
                Err(timeout) => {
                    course.confirmed = timeout.confirmed_flush_lsn.or(course.confirmed);
                }
            }
            if course.idle_end.is_some() && self.idle_finding() {
                break;
            }
            if let Some(ms) = self.scenario.hold_after_stall_ms {
                if !course.stalled && self.on_a_stalled_connection() {
                    course.stalled = true;
                    // Held from when the stalled connection ends.
                    self.proxy.hold_slot(&self.slot, Duration::from_millis(ms));
                }
            }
        }
        // Still on a connection a rule stalled for good (nothing either way, its socket
        // open) when the budget ran out: it has no timeout of its own, and would sit
        // there for ever, as on a half-open connection.
        if !course.finished && !course.interrupted && self.on_a_stalled_connection() {
            course.problems.push(format!(
                "still on the connection that fell silent when the budget of {} s ran out: \
                 it never gave it up (PostgreSQL's walreceiver asks for a reply at half of \
                 wal_receiver_timeout, 60 s by default, and gives up at all of it)",
                self.budget.as_secs()
            ));
        }
        Ok(course)
    }

    /// Does what `cue` asks, its transaction confirmed.
    fn cue(&mut self, cue: &Cue, course: &mut Course) -> Result<(), String> {
        match cue.action {
            CueAction::KillConsumer => self
                .consumer
                .kill_and_restart()
                .map_err(|e| format!("restarting the consumer: {e}"))?,
            CueAction::Crash => self.proxy.crash(),
            CueAction::HoldSlot => {
                let ms = cue.ms.unwrap_or(3000);
                self.proxy.hold_slot(&self.slot, Duration::from_millis(ms));
                self.source.end_walsender(&self.slot)?;
            }
            CueAction::DropSlot | CueAction::InvalidateSlot => {
                if cue.action == CueAction::DropSlot {
                    self.source.drop_slot(&self.slot)?;
                } else {
                    // PostgreSQL ends the walsender of a slot it invalidates.
                    self.proxy.invalidate_slot(&self.slot);
                    self.source.end_walsender(&self.slot)?;
                    course.invalidated = true;
                }
                course.dropped = Some(self.consumer.exits);
                // Committed while the slot is gone.
                course.then_done = true;
                self.then()?;
            }
        }
        Ok(())
    }

    /// The `then` steps committed: the WAL end after them.
    fn then(&mut self) -> Result<Lsn, String> {
        self.workload
            .commit(
                &self.scenario.then,
                &mut self.source,
                &mut self.ledger,
                self.tables.as_mut(),
            )
            .map_err(|e| format!("{}: then: {e}", self.scenario.name))
    }

    /// Whether the judge says the slot was left behind while idle (it says so once it
    /// has waited as long as it waits).
    fn idle_finding(&self) -> bool {
        self.proxy
            .findings()
            .iter()
            .any(|(s, f)| *s == self.slot && matches!(f, Finding::NotAdvancedWhileIdle { .. }))
    }

    /// Whether the consumer is on a connection of its slot that a `stall` rule holds.
    fn on_a_stalled_connection(&self) -> bool {
        self.proxy.connection_records().iter().any(|c| {
            c.slot.as_deref() == Some(self.slot.as_str()) && c.ended.is_none() && c.stalled
        })
    }

    /// The scenario ended: the sink given its moment to hold what was confirmed, the
    /// consumer stopped, the proxy's account read and it stopped, the slots dropped; what
    /// the sink holds graded, with the judge's findings, into the report.
    fn conclude(mut self, course: Course) -> Result<ScenarioReport, String> {
        let Course {
            finished,
            confirmed,
            dropped,
            invalidated,
            went_on,
            interrupted,
            mut problems,
            ..
        } = course;
        if finished {
            settle(|| {
                held(self.tables.as_mut(), &self.sink, &self.ledger, true)
                    .is_ok_and(|held| !held.anomalies.iter().any(Anomaly::is_missing))
            });
        }
        self.consumer.stop(Duration::from_secs(10));
        if let Some(tables) = self.tables.as_mut() {
            // A subscription its consumer was killed before it dropped.
            tables.drop_subscriptions()?;
        }
        self.workload.close();
        // A scenario none of whose faults fired did not happen: it says nothing either
        // way. (Its faults are alternatives: the forms one point of a stream takes, a
        // Commit or a Stream Commit, as the consumer asked for streaming or not.)
        let faults = self.proxy.faults();
        let mut unmet: Vec<String> = Vec::new();
        if !faults.is_empty() && faults.iter().all(|(_, fired)| *fired == 0) {
            let rules: Vec<String> = faults
                .iter()
                .map(|(fault, _)| serde_json::to_string(fault).unwrap_or_default())
                .collect();
            unmet.push(format!(
                "no fault fired ({}): the stream did not go as the scenario expects",
                rules.join(", ")
            ));
        }
        unmet.extend(self.cues.iter().map(|cue| {
            format!(
                "the cue {:?} at transaction {} was never reached",
                cue.action, cue.confirmed
            )
        }));
        let findings: Vec<Judged> = self
            .proxy
            .findings()
            .into_iter()
            .filter(|(s, _)| *s == self.slot)
            .map(|(_, finding)| Judged {
                harm: finding.harm(),
                means: finding.harm().describe(),
                finding,
            })
            .collect();
        self.proxy.stop();
        self.source.drop_slots()?;
        let scenario = self.scenario;
        if interrupted {
            return Err(format!("interrupted in scenario {}", scenario.name));
        }
        // Failed loudly once its slot was gone (it exited, and again when started
        // again): what it missed since is not lost (it said so), and nothing it applied
        // may be wrong. One that neither stopped nor went on is stalled: unknown.
        let gone = if invalidated {
            "invalidated"
        } else {
            "dropped"
        };
        let consumer = &self.consumer;
        let exits_since = dropped.map(|exits| consumer.exits - exits);
        let loud = !went_on && exits_since.is_some_and(|n| n >= 2);
        let stalled = !went_on && !loud && exits_since.is_some();
        let ledger = &self.ledger;
        let Held {
            anomalies,
            changes: sink_lines,
            torn: torn_line,
        } = held(self.tables.as_mut(), &self.sink, ledger, finished && !loud).unwrap_or_else(
            |err| {
                problems.push(err);
                Held::default()
            },
        );
        let only: Vec<Finding> = findings.iter().map(|j| j.finding.clone()).collect();
        let mut verdict = if loud && anomalies.is_empty() {
            Verdict::Pass
        } else {
            Verdict::of(&anomalies, &only, finished)
        };
        if !problems.is_empty() {
            verdict = Verdict::Fail;
        } else if !unmet.is_empty() && verdict != Verdict::Fail {
            verdict = Verdict::Unknown;
            problems = unmet;
        }
        let process = Process {
            starts: consumer.starts,
            exits: consumer.exits,
            last_exit: consumer.last_exit.map(|status| status.to_string()),
            log_tail: if verdict == Verdict::Pass {
                String::new()
            } else {
                consumer.log_tail(20)
            },
        };
        let mut summary = summary(verdict, &anomalies, &findings, &problems, ledger, confirmed);
        if loud && verdict == Verdict::Pass {
            summary = format!(
                "failed loudly once its slot was {gone} (exited {} times since), and nothing it applied is wrong",
                exits_since.unwrap_or_default()
            );
        } else if stalled && verdict == Verdict::Unknown {
            summary = format!(
                "its slot was {gone}, and within the budget it neither stopped (it exited {} times since) nor went on: a consumer that tries again for ever is stalled, silently to all but its logs",
                exits_since.unwrap_or_default()
            );
        }
        Ok(ScenarioReport {
            name: scenario.name.clone(),
            class: scenario.class.clone(),
            verdict,
            summary,
            anomalies,
            findings,
            problems,
            transactions: ledger.transactions.len(),
            rows: ledger.transactions.iter().map(|t| t.changes.len()).sum(),
            aborted_rows: ledger.aborted.len(),
            end: ledger.end(),
            confirmed,
            finished,
            sink_lines,
            torn_line,
            sink: self
                .tables
                .as_ref()
                .map_or_else(|| self.sink.display().to_string(), |t| t.name().to_owned()),
            consumer: process,
            elapsed_ms: self.started.elapsed().as_millis(),
            replay: self.trial.replay.replace("{scenario}", &scenario.name),
        })
    }
}

/// Removes what is named after `sink` in `dir` (the sink itself, and files or
/// directories a consumer keeps beside it: `NN-scenario.jsonl.offsets`, say).
fn forget(dir: &std::path::Path, sink: &std::path::Path) -> Result<(), String> {
    let Some(name) = sink.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(name))
        {
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// How long a consumer that confirmed the end has to make the sink hold all it
/// confirmed, before it is stopped: a consumer that acknowledges first and writes a
/// moment later fails the scenario that kills it then, not every other one.
const SETTLE: Duration = Duration::from_secs(2);

/// Waits (up to [`SETTLE`]) for `complete` (the sink holding every committed change).
fn settle(mut complete: impl FnMut() -> bool) {
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        if complete() {
            return;
        }
        // A file being written, a subscriber applying: no event to wait on; a short poll.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the sink holds, graded.
#[derive(Debug, Default)]
struct Held {
    anomalies: Vec<Anomaly>,
    /// Its changes (lines), or its rows for a sink of tables.
    changes: usize,
    /// A torn last line.
    torn: Option<usize>,
}

/// Reads the sink (the tables, when there are, else the JSON-lines file) and grades it
/// against `ledger`; `finished` as [`grade`] takes it. An error is a sink that does not
/// read, in words.
fn held(
    tables: Option<&mut Database>,
    lines: &std::path::Path,
    ledger: &Ledger,
    finished: bool,
) -> Result<Held, String> {
    if let Some(tables) = tables {
        let rows = tables.rows()?;
        let mut anomalies = grade_state(ledger, &rows);
        if !finished {
            anomalies.retain(|a| !a.is_missing());
        }
        return Ok(Held {
            anomalies,
            changes: rows.len(),
            torn: None,
        });
    }
    let bytes = std::fs::read(lines).map_err(|e| format!("{}: {e}", lines.display()))?;
    let read = crate::sink::read(&bytes).map_err(|err| format!("the sink does not read: {err}"))?;
    Ok(Held {
        anomalies: grade(ledger, &read.applied, finished),
        changes: read.applied.len(),
        torn: read.torn,
    })
}

/// A scenario's verdict in a line.
fn summary(
    verdict: Verdict,
    anomalies: &[Anomaly],
    findings: &[Judged],
    problems: &[String],
    ledger: &Ledger,
    confirmed: Option<Lsn>,
) -> String {
    if let Some(problem) = problems.first() {
        return problem.clone();
    }
    let rows: usize = ledger.transactions.iter().map(|t| t.changes.len()).sum();
    match verdict {
        Verdict::Pass => format!(
            "{} transactions ({rows} rows) applied once each, in order",
            ledger.transactions.len()
        ),
        Verdict::Warn => findings
            .first()
            .map(|j| format!("{} ({})", j.finding, j.means))
            .unwrap_or_default(),
        Verdict::Unknown => format!(
            "not confirmed to {} within the budget (confirmed: {})",
            ledger.end().unwrap_or_default(),
            confirmed.map_or_else(|| "nothing".into(), |lsn| lsn.to_string())
        ),
        Verdict::Fail => {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for anomaly in anomalies {
                *counts.entry(anomaly.kind()).or_default() += 1;
            }
            let counts: Vec<String> = counts.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let first = anomalies
                .first()
                .map(ToString::to_string)
                .unwrap_or_default();
            format!("{}: {first}", counts.join(", "))
        }
    }
}
