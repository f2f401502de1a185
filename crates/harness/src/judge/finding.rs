//! What a consumer did wrong: each kind a bug of the field's reports, with the positions
//! that show it.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use pgoutput_codec::Lsn;

/// One thing a consumer did that a correct one does not, on the slot it is reported for.
/// `connection` is the client's number on the server (the proxy's connection number).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "finding", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Finding {
    /// It confirmed `flush` while a transaction whose commit (or prepare) record starts
    /// before `flush` had not been sent whole (`sent`: the highest position it had been
    /// sent then): PostgreSQL, starting the slot's next stream at `flush`, skips that
    /// transaction, so a consumer that stops before applying it loses it. Such as a
    /// transaction's commit position + 1 taken from its Begin before the rest arrived
    /// (jackc/pglogrepl#40, debezium/debezium#7531), or a Commit's end + 1 when the next
    /// transaction's commit record starts right at that end. Confirming past what was sent
    /// where nothing commits in between loses nothing, and is not a finding.
    ConfirmedUnsent {
        connection: u64,
        /// The position it confirmed.
        flush: Lsn,
        /// The highest position it had been sent.
        sent: Lsn,
    },
    /// A keepalive asked for a reply and none came before the walsender dropped the
    /// connection (`wal_sender_timeout`).
    NoTimelyReply {
        connection: u64,
        /// How long the request went unanswered.
        #[serde(rename = "waited_ms", serialize_with = "millis")]
        waited: Duration,
    },
    /// Its slot's clients were sent transactions (up to `sent`, the last one's end), none
    /// streams now, and none of them was ever confirmed, though the consumer answered a
    /// reply request made after it had one whole (or was dropped by `wal_sender_timeout`
    /// for not answering it): the slot keeps all their WAL, and every
    /// restart sends them again. (A consumer stopped before anyone asked, as
    /// pg_recvlogical is within its 10 s status interval, is a stopping consumer:
    /// [`Fact::StoppedBehind`](super::Fact::StoppedBehind).)
    NeverConfirmed {
        /// The end of the last transaction sent.
        sent: Lsn,
    },
    /// While nothing was left to send and the WAL end stood at `wal_end`, it answered
    /// two reply requests there and still left the slot at `confirmed` 10 s after the
    /// first (a consumer that stops sooner is a stopping one): a consumer that confirms only
    /// the transactions it gets keeps the server's WAL for good while nothing is
    /// published (supabase/etl#429, debezium/debezium#6881, epgsql/epgsql#306). A consumer
    /// confirms the WAL end of a keepalive that comes between transactions.
    NotAdvancedWhileIdle {
        connection: u64,
        /// Where the slot stood.
        confirmed: Lsn,
        /// The WAL end the keepalives reported.
        wal_end: Lsn,
    },
    /// While nothing was left to send, the slot stood at `confirmed`, inside a transaction
    /// it had been sent whole (ending at `transaction_end`) and not past where its commit
    /// record starts (past it, up to the end, PostgreSQL skips the transaction on a
    /// restart, as after pg-logical-replication's commit LSN + 1), and the consumer answered
    /// two reply requests there without confirming the transaction's end and left it so
    /// 10 s (as for [`Finding::NotAdvancedWhileIdle`]: a consumer still applying its last
    /// transaction answers with where it stood before): the transaction will be sent again
    /// after any restart, and its WAL is kept meanwhile.
    StuckInsideTransaction {
        connection: u64,
        /// Where the slot stood.
        confirmed: Lsn,
        /// The end of the transaction the position is inside.
        transaction_end: Lsn,
    },
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Finding {
    /// The connection that showed it (`None` for a finding of the slot as a whole).
    #[must_use]
    pub fn connection(&self) -> Option<u64> {
        match *self {
            Finding::ConfirmedUnsent { connection, .. }
            | Finding::NoTimelyReply { connection, .. }
            | Finding::NotAdvancedWhileIdle { connection, .. }
            | Finding::StuckInsideTransaction { connection, .. } => Some(connection),
            Finding::NeverConfirmed { .. } => None,
        }
    }

    /// Whether it says the slot was left behind short of a position no later than
    /// `confirmed` (an idle finding, which a later confirmation past it withdraws).
    pub(crate) fn left_behind_up_to(&self, confirmed: Lsn) -> bool {
        match *self {
            Finding::NotAdvancedWhileIdle { wal_end, .. } => wal_end <= confirmed,
            Finding::StuckInsideTransaction {
                transaction_end, ..
            } => transaction_end <= confirmed,
            _ => false,
        }
    }

    /// What it costs (see each kind above).
    #[must_use]
    pub fn harm(&self) -> Harm {
        match self {
            Finding::ConfirmedUnsent { .. } => Harm::LatentLoss,
            Finding::NotAdvancedWhileIdle { .. } | Finding::NeverConfirmed { .. } => Harm::WalKept,
            Finding::StuckInsideTransaction { .. } => Harm::Resent,
            Finding::NoTimelyReply { .. } => Harm::Dropped,
        }
    }

    /// Its kind, as JSON names it (`"confirmed_unsent"`, …).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::ConfirmedUnsent { .. } => "confirmed_unsent",
            Finding::NoTimelyReply { .. } => "no_timely_reply",
            Finding::NeverConfirmed { .. } => "never_confirmed",
            Finding::NotAdvancedWhileIdle { .. } => "not_advanced_while_idle",
            Finding::StuckInsideTransaction { .. } => "stuck_inside_transaction",
        }
    }
}

/// What a finding costs if nothing else goes wrong, and when it costs data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Harm {
    /// Data is lost if PostgreSQL starts the slot's next stream where it was confirmed
    /// (a restart, a reconnect, a failover) before the consumer applied what it had.
    LatentLoss,
    /// The server keeps WAL it need not (the disk fills while nothing is published).
    WalKept,
    /// Transactions already applied are sent again after any restart (harmless to a
    /// consumer that skips what it applied).
    Resent,
    /// The walsender drops the connection (`wal_sender_timeout`); each reconnect costs a
    /// resend of what was not confirmed.
    Dropped,
}

impl Harm {
    /// In words.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Harm::LatentLoss => "latent loss: a restart of the slot's stream now skips a transaction the consumer had not applied",
            Harm::WalKept => "WAL kept: the server cannot remove WAL the consumer has no use for",
            Harm::Resent => "resent: every restart sends again what the consumer applied",
            Harm::Dropped => "dropped: the walsender ends the connection, and what was not confirmed is sent again",
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::ConfirmedUnsent { flush, sent, .. } => write!(
                f,
                "confirmed a flush position of {flush} after being sent up to {sent} only, past the commit of a transaction it had not received whole: a restart there skips that transaction"
            ),
            Finding::NoTimelyReply { waited, .. } => write!(
                f,
                "did not answer a keepalive's reply request within wal_sender_timeout (waited {} ms)",
                waited.as_millis()
            ),
            Finding::NeverConfirmed { sent } => write!(
                f,
                "was sent transactions up to {sent} and never confirmed any of them"
            ),
            Finding::NotAdvancedWhileIdle {
                confirmed, wal_end, ..
            } => write!(
                f,
                "left its slot at {confirmed} while idle although the WAL end was {wal_end} and it answered reply requests there: the server keeps the WAL in between for as long as nothing is published"
            ),
            Finding::StuckInsideTransaction {
                confirmed,
                transaction_end,
                ..
            } => write!(
                f,
                "left its slot at {confirmed}, inside a transaction it had been sent whole (ending at {transaction_end}), while idle and after answering reply requests: that transaction is sent again after any restart"
            ),
        }
    }
}
