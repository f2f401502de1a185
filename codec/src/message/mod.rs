//! pgoutput messages, one file per family, and the enum that dispatches over them. All are
//! also at the crate root; this module is the way to name `Message` and `Type` when those
//! names are taken.

mod dml;
mod logical;
mod relation;
mod stream;
mod transaction;
mod tuple;
mod two_phase;

pub use dml::{Delete, Insert, Truncate, TruncateOptions, Update};
pub use logical::{Message, MessageFlags};
pub use relation::{Relation, RelationColumn, ReplicaIdentity, Type};
pub use stream::{StreamAbort, StreamCommit, StreamStart, StreamStop};
pub use transaction::{Begin, Commit, Origin};
pub use tuple::{ColumnValue, OldTuple, TupleData};
pub use two_phase::{BeginPrepare, CommitPrepared, Prepare, RollbackPrepared, StreamPrepare};

/// Any pgoutput message, chosen by its tag byte.
///
/// Decodes every known tag whatever the protocol version (PostgreSQL 18 sends Stream Abort
/// on protocol 1, and a two-phase slot sends two-phase messages on protocol 1); rejects
/// unknown tags with [`DecodeErrorKind::UnknownTag`](crate::DecodeErrorKind::UnknownTag).
/// To read a stream with Stream Start/Stop blocks, use the session
/// [`Decoder`](crate::Decoder), which keeps the context up to date.
///
/// Non-exhaustive: a later PostgreSQL may add a message type, and adding it here is then
/// not a breaking change; match with a `_` arm.
#[non_exhaustive]
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "type", rename_all = "snake_case"))]
pub enum PgOutputMessage<'a> {
    /// `'B'`
    Begin(Begin),
    /// `'M'`
    Message(Message<'a>),
    /// `'C'`
    Commit(Commit),
    /// `'O'`
    Origin(Origin<'a>),
    /// `'R'`
    Relation(Relation<'a>),
    /// `'Y'`
    Type(Type<'a>),
    /// `'I'`
    Insert(Insert<'a>),
    /// `'U'`
    Update(Update<'a>),
    /// `'D'`
    Delete(Delete<'a>),
    /// `'T'`
    Truncate(Truncate<'a>),
    /// `'S'`
    StreamStart(StreamStart),
    /// `'E'`
    StreamStop(StreamStop),
    /// `'c'`
    StreamCommit(StreamCommit),
    /// `'A'`
    StreamAbort(StreamAbort),
    /// `'b'`
    BeginPrepare(BeginPrepare<'a>),
    /// `'P'`
    Prepare(Prepare<'a>),
    /// `'K'`
    CommitPrepared(CommitPrepared<'a>),
    /// `'r'`
    RollbackPrepared(RollbackPrepared<'a>),
    /// `'p'`
    StreamPrepare(StreamPrepare<'a>),
}

/// [`Tagged`](crate::Tagged)'s positions, callable without importing it.
impl PgOutputMessage<'_> {
    /// For a message that ends a transaction (Commit, Stream Commit, Prepare, Stream
    /// Prepare, Commit Prepared, Rollback Prepared): the end LSN a client reports as flushed
    /// in its standby status update once it has the whole transaction, so the slot advances
    /// past it. `None` for every other message.
    #[must_use]
    pub fn transaction_end_lsn(&self) -> Option<crate::Lsn> {
        crate::Tagged::transaction_end_lsn(self)
    }

    /// Where the record that decides the transaction starts (its commit, or its
    /// prepare), for the messages that tell it: Begin's final LSN, Begin Prepare's,
    /// Prepare's and Stream Prepare's prepare LSN, the commit LSN of Commit, Stream Commit
    /// and Commit Prepared. A slot's stream that starts at a confirmed position skips every
    /// transaction whose record starts before it (PostgreSQL's `SnapBuildXactNeedsSkip`):
    /// confirming past this position before the transaction is applied can lose it.
    /// `None` for every other message.
    #[must_use]
    pub fn decision_lsn(&self) -> Option<crate::Lsn> {
        crate::Tagged::decision_lsn(self)
    }
}
