//! A scenario's verdict.

use std::fmt;

use serde::Serialize;

use crate::grade::Anomaly;
use pgoutput_harness::judge::Finding;

/// How a consumer came out of a scenario (Maelstrom's exit codes: 0 valid, 1 invalid, 2
/// unknown, with `warn` counted as valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every committed change applied once, in order, and nothing else; no finding.
    Pass,
    /// As `pass`, with a harm that is latent: a finding of the judge (an acknowledgement
    /// that would make PostgreSQL skip a transaction if it restarted now, a slot left
    /// behind while idle).
    Warn,
    /// The consumer did not confirm the end within its budget, and nothing it applied is
    /// wrong so far.
    Unknown,
    /// An anomaly.
    Fail,
}

impl Verdict {
    /// The verdict of `anomalies` (as [`grade`](crate::grade) gives them for
    /// `finished`) and the judge's `findings`.
    #[must_use]
    pub fn of(anomalies: &[Anomaly], findings: &[Finding], finished: bool) -> Verdict {
        if anomalies.iter().any(|a| finished || !a.is_missing()) {
            Verdict::Fail
        } else if !finished {
            Verdict::Unknown
        } else if findings.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Warn
        }
    }

    /// Its name (`"pass"`, …).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Warn => "warn",
            Verdict::Unknown => "unknown",
            Verdict::Fail => "fail",
        }
    }

    /// The exit code of a run whose worst verdict this is: 0 pass or warn, 1 fail, 2
    /// unknown.
    #[must_use]
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Pass | Verdict::Warn => 0,
            Verdict::Fail => 1,
            Verdict::Unknown => 2,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::{Change, Op};
    use crate::grade::TransactionRef;
    use pgoutput_codec::{Lsn, Xid};

    fn lost() -> Anomaly {
        Anomaly::Lost {
            transaction: TransactionRef {
                number: 1,
                xid: Xid(1),
                commit_lsn: Lsn(1),
                end_lsn: Lsn(2),
                rows: 1,
            },
            first: Change::new("t", Op::Insert, [("id", "1".to_owned())]),
        }
    }

    #[test]
    fn a_loss_fails_only_once_the_consumer_says_it_has_everything() {
        assert_eq!(Verdict::of(&[lost()], &[], true), Verdict::Fail);
        assert_eq!(Verdict::of(&[lost()], &[], false), Verdict::Unknown);
        let aborted = Anomaly::AbortedApplied {
            change: Change::new("t", Op::Insert, [("id", "1".to_owned())]),
            line: 1,
        };
        assert_eq!(Verdict::of(&[aborted], &[], false), Verdict::Fail);
        assert_eq!(Verdict::of(&[], &[], false), Verdict::Unknown);
    }

    #[test]
    fn findings_warn_with_their_harm() {
        let finding = Finding::ConfirmedUnsent {
            connection: 1,
            flush: Lsn(0x200),
            sent: Lsn(0x100),
        };
        assert_eq!(
            Verdict::of(&[], std::slice::from_ref(&finding), true),
            Verdict::Warn
        );
        assert_eq!(finding.harm(), pgoutput_harness::judge::Harm::LatentLoss);
        assert_eq!(Verdict::of(&[], &[], true), Verdict::Pass);
        assert_eq!(Verdict::Fail.exit_code(), 1);
        assert_eq!(Verdict::Unknown.exit_code(), 2);
        assert_eq!(Verdict::Warn.exit_code(), 0);
    }
}
