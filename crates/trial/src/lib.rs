//! Grades a consumer of PostgreSQL's logical replication by what it applied.
//!
//! A trial runs a consumer through the failures of the field (a cut inside a transaction,
//! a crash that sends confirmed transactions again, a message kind it did not expect, …)
//! and then asks the one question its users have: did it lose or apply twice anything the
//! source committed? This crate holds the answer's parts, each without I/O:
//!
//! - [`Ledger`]: what the source committed (each transaction's xid, commit position and
//!   row changes, in commit order) and what it rolled back;
//! - [`sink`]: what the consumer applied, read from the JSON-lines file it appends one
//!   line to per row change;
//! - [`grade`]: the anomalies Jepsen's checkers would name (lost, duplicated, reordered,
//!   partial transaction, aborted rows applied, wrong value, unexpected), each with the
//!   smallest evidence;
//! - [`Verdict`]: pass, warn (a harm that is latent: the judge's findings), fail or
//!   unknown (the consumer did not get to the end within its budget).
//!
//! ```
//! use pgoutput_codec::{Lsn, Xid};
//! use pgoutput_trial::{grade, sink, Change, Ledger, Op, Transaction, Verdict};
//!
//! let insert = |id: i64| Change::new("trial_items", Op::Insert, [("id", id.to_string())]).version(1);
//! let ledger = Ledger {
//!     transactions: vec![
//!         Transaction { xid: Xid(750), commit_lsn: Lsn(0x100), end_lsn: Lsn(0x130), changes: vec![insert(1), insert(2)] },
//!         Transaction { xid: Xid(751), commit_lsn: Lsn(0x200), end_lsn: Lsn(0x230), changes: vec![insert(3)] },
//!     ],
//!     aborted: vec![],
//! };
//! // The consumer applied the first transaction twice (a restart it did not resume
//! // from its own progress) and never the second.
//! let applied = sink::read(
//!     br#"{"table": "trial_items", "op": "insert", "key": {"id": 1}, "values": {"version": 1}}
//! {"table": "trial_items", "op": "insert", "key": {"id": 2}, "values": {"version": 1}}
//! {"table": "trial_items", "op": "insert", "key": {"id": 1}, "values": {"version": 1}}
//! "#.as_slice(),
//! )
//! .unwrap();
//! let anomalies = grade(&ledger, &applied.applied, true);
//! let kinds: Vec<_> = anomalies.iter().map(|a| a.kind()).collect();
//! assert_eq!(kinds, ["duplicated", "lost"]);
//! assert_eq!(Verdict::of(&anomalies, &[], true), Verdict::Fail);
//! ```

#![forbid(unsafe_code)]

mod change;
mod grade;
mod ledger;
pub mod reference;
mod report;
mod run;
pub mod scenario;
pub mod schema;
pub mod sink;
mod source;
pub mod supervise;
mod verdict;
pub mod workload;

pub use change::{Change, Op};
pub use grade::{grade, grade_state, Anomaly};
pub use ledger::{Ledger, Transaction};
/// What each of the judge's findings costs, which a warn states.
pub use pgoutput_harness::judge::Harm;
pub use run::{Attached, Judged, Process, Progress, Report, ScenarioReport, Skipped, Trial};
pub use scenario::{catalogue, Cue, CueAction, Scenario};
pub use sink::Applied;
pub use verdict::Verdict;
