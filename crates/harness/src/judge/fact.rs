//! What happened on a slot, without blame: the positions its clients asked for, how each
//! connection ended, crashes, transactions sent again. A consumer that recovers correctly
//! from every fault has facts and no findings.

use std::fmt;

use serde::Serialize;

use pgoutput_codec::Lsn;

/// One thing that happened on a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Fact {
    /// START_REPLICATION: the position `requested` (0/0: the slot's), what the slot's
    /// consumer had confirmed so far, and whether the request was `behind` it (the
    /// consumer asks again for what it said it had; a server that lost the confirmation,
    /// as after a crash, sends it again).
    Started {
        connection: u64,
        requested: Lsn,
        confirmed: Lsn,
        behind: bool,
    },
    /// A streaming connection ended, and how.
    Ended { connection: u64, how: Ending },
    /// The server crashed (the proxy's crash: every connection cut) with the slot's
    /// consumer having confirmed `confirmed`.
    Crash { confirmed: Lsn },
    /// The consumer ended its stream with the slot at `confirmed`, behind transactions
    /// it had been sent (up to `transaction_end`): it stopped before applying them, or
    /// lags. They are sent again when it resumes; no finding unless it then skips or
    /// repeats one.
    StoppedBehind {
        connection: u64,
        confirmed: Lsn,
        transaction_end: Lsn,
    },
    /// Transactions the consumer had confirmed were sent again (after a crash, or after
    /// a START_REPLICATION behind what it had confirmed): a correct consumer skips them.
    Resent(Resent),
}

/// Transactions sent again on one connection that the slot's consumer had confirmed
/// before it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Resent {
    pub connection: u64,
    /// How many.
    pub count: u64,
    /// The end of the first and of the last of them.
    pub first: Lsn,
    pub last: Lsn,
    /// What the consumer had confirmed when the connection started.
    pub confirmed_before: Lsn,
}

/// How a streaming connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Ending {
    /// The consumer ended it: CopyDone, Terminate, or its socket closed.
    Client,
    /// A fault rule cut it (close, reset, a FATAL, an ERROR).
    Fault,
    /// A crash cut it.
    Crash,
    /// The walsender dropped it for `wal_sender_timeout`.
    Timeout,
    /// The server ended it otherwise (its shutdown, an error of its own, the upstream
    /// closing).
    Server,
}

impl Ending {
    /// Whether the consumer chose to end there (only then does an idle period it left
    /// unconfirmed count against it).
    pub(crate) fn by_client(self) -> bool {
        matches!(self, Ending::Client)
    }
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fact::Started {
                connection,
                requested,
                confirmed,
                behind,
            } => {
                write!(f, "connection {connection} started streaming at {requested}")?;
                if *behind {
                    write!(f, ", behind the {confirmed} its consumer had confirmed")?;
                }
                Ok(())
            }
            Fact::Ended { connection, how } => {
                let how = match how {
                    Ending::Client => "the consumer ended it",
                    Ending::Fault => "a fault rule cut it",
                    Ending::Crash => "a crash cut it",
                    Ending::Timeout => "wal_sender_timeout dropped it",
                    Ending::Server => "the server ended it",
                };
                write!(f, "connection {connection}'s stream ended: {how}")
            }
            Fact::StoppedBehind {
                connection,
                confirmed,
                transaction_end,
            } => write!(
                f,
                "connection {connection}'s consumer stopped with its slot at {confirmed}, behind transactions it had been sent up to {transaction_end}: they are sent again when it resumes"
            ),
            Fact::Crash { confirmed } => {
                write!(f, "a crash, with the consumer having confirmed {confirmed}")
            }
            Fact::Resent(r) => write!(
                f,
                "connection {} was sent {} transaction(s) again (ending {} to {}) that its consumer had confirmed (up to {})",
                r.connection, r.count, r.first, r.last, r.confirmed_before
            ),
        }
    }
}
