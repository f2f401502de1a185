//! Whole transactions: the frames of each transaction held until its end arrives, then
//! handed out once, in commit order, with the position to confirm after applying it.
//!
//! A transaction sent whole (Begin … Commit) is held from its Begin; a streamed one from
//! its first Stream Start to its Stream Commit or Stream Prepare, its blocks gathered by
//! xid while other transactions go by between them. A Stream Abort drops what it names
//! (a subtransaction's changes, or the whole transaction); a connection lost drops what
//! is held, since the server sends those transactions again in full; a transaction that
//! ends at or before one already handed out (a crashed server sending again what it had
//! sent) is not handed out again. Tables are learnt as the transaction carrying their
//! Relation message is replayed, as PostgreSQL's apply worker learns them, so a
//! transaction's changes are read with the columns they were sent with.

use std::collections::HashMap;

use bytes::Bytes;

use super::{replay, Event, Relations};
use crate::ClientError;
use pgoutput_codec::{Decoder, Lsn, PgOutputMessage, StreamRole, Tagged, TransactionRole, Xid};

/// How a [`WholeTransaction`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransactionKind {
    /// Committed: Begin … Commit, or a streamed transaction's Stream Commit.
    Committed,
    /// Prepared for two-phase commit: Begin Prepare … Prepare, or Stream Prepare. Its
    /// Commit Prepared or Rollback Prepared comes later, as a transaction of its own.
    Prepared,
    /// A prepared transaction's Commit Prepared.
    CommitPrepared,
    /// A prepared transaction's Rollback Prepared.
    RollbackPrepared,
    /// A logical message outside any transaction (`pg_logical_emit_message(false, …)`).
    Message,
}

/// What the stream's summary of a transaction says, from its first and last messages.
#[derive(Debug, Clone, Copy)]
struct Summary {
    kind: TransactionKind,
    xid: Option<Xid>,
    end_lsn: Option<Lsn>,
    streamed: bool,
}

/// A transaction handed out: its frames and how far its events have been read.
#[derive(Debug)]
pub(crate) struct Ready {
    frames: Vec<Bytes>,
    next: usize,
    decoder: Decoder,
    summary: Summary,
}

impl Ready {
    /// Replays what was not read, so that the tables it carries are learnt.
    fn finish(&mut self, relations: &mut Relations) {
        while let Some(frame) = self.frames.get(self.next) {
            self.next += 1;
            // It decoded when it arrived, with the decoder in the same state: it does again.
            let _ = replay(&mut self.decoder, relations, frame);
        }
    }
}

/// A frame held for a streamed transaction, with the xid of the change it carries.
#[derive(Debug)]
struct Held {
    frame: Bytes,
    change_of: Option<Xid>,
}

/// What the gathering needs to know of a message, taken before its frame is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed {
    stream: StreamRole,
    role: TransactionRole,
    xid: Option<Xid>,
    /// The subtransaction a Stream Abort drops, or the one a change was made in.
    subtransaction: Option<Xid>,
    kind: TransactionKind,
    end_lsn: Option<Lsn>,
    wal_start: Lsn,
}

impl Placed {
    pub(crate) fn of(event: &Event<'_>) -> Placed {
        let message = &event.message;
        let kind = match message {
            PgOutputMessage::Prepare(_) | PgOutputMessage::StreamPrepare(_) => {
                TransactionKind::Prepared
            }
            PgOutputMessage::CommitPrepared(_) => TransactionKind::CommitPrepared,
            PgOutputMessage::RollbackPrepared(_) => TransactionKind::RollbackPrepared,
            PgOutputMessage::Message(_) => TransactionKind::Message,
            _ => TransactionKind::Committed,
        };
        Placed {
            stream: message.stream_role(),
            role: message.transaction_role(),
            xid: message.xid(),
            subtransaction: message.subtransaction_xid(),
            kind,
            end_lsn: message.transaction_end_lsn(),
            wal_start: event.wal_start,
        }
    }

    fn summary(&self, xid: Option<Xid>, streamed: bool) -> Summary {
        Summary {
            kind: self.kind,
            xid: xid.or(self.xid),
            end_lsn: self.end_lsn,
            streamed,
        }
    }
}

/// The transactions being gathered, and the one handed out last.
#[derive(Debug)]
pub(crate) struct Assembler {
    /// The transaction sent whole that is open: its xid and frames.
    open: Option<(Option<Xid>, Vec<Bytes>)>,
    /// Streamed transactions with blocks sent and no end yet.
    streamed: HashMap<Xid, Vec<Held>>,
    /// The xid of the stream block that is open.
    block: Option<Xid>,
    /// The end of the last transaction handed out (or the start position).
    handed_out: Lsn,
    ready: Option<Ready>,
    fresh: Decoder,
}

impl Assembler {
    /// Gathering from a stream that starts after `start`, decoding as `fresh` does.
    pub(crate) fn new(start: Lsn, fresh: Decoder) -> Assembler {
        Assembler {
            open: None,
            streamed: HashMap::new(),
            block: None,
            handed_out: start,
            ready: None,
            fresh,
        }
    }

    /// Places one XLogData frame, `message` decoded from it: `true` when a transaction
    /// is ready to hand out ([`Assembler::take`]).
    pub(crate) fn absorb(
        &mut self,
        frame: Bytes,
        message: Placed,
        relations: &mut Relations,
    ) -> bool {
        let role = message.role;
        if let Some(xid) = self.block {
            let change_of = (role == TransactionRole::Change)
                .then_some(message.subtransaction)
                .flatten();
            self.streamed
                .entry(xid)
                .or_default()
                .push(Held { frame, change_of });
            if message.stream == StreamRole::Stop {
                self.block = None;
            }
            return false;
        }
        match (message.stream, role) {
            (StreamRole::Start, _) => {
                let xid = message.xid.unwrap_or(Xid(0));
                self.block = Some(xid);
                self.streamed.entry(xid).or_default().push(Held {
                    frame,
                    change_of: None,
                });
                false
            }
            (StreamRole::Outside, TransactionRole::End) => {
                let xid = message.xid;
                let mut frames: Vec<Bytes> = xid
                    .and_then(|xid| self.streamed.remove(&xid))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|held| held.frame)
                    .collect();
                frames.push(frame);
                self.hand_out(frames, message.summary(xid, true), relations)
            }
            (StreamRole::Outside, TransactionRole::Abort) => {
                let xid = message.xid.unwrap_or(Xid(0));
                match message.subtransaction {
                    Some(sub) if sub != xid => {
                        if let Some(held) = self.streamed.get_mut(&xid) {
                            held.retain(|held| held.change_of != Some(sub));
                        }
                    }
                    _ => {
                        self.streamed.remove(&xid);
                    }
                }
                false
            }
            (_, TransactionRole::Begin) => {
                self.open = Some((message.xid, vec![frame]));
                false
            }
            (_, TransactionRole::End) => {
                let (xid, mut frames) = self
                    .open
                    .take()
                    .unwrap_or_else(|| (message.xid, Vec::new()));
                frames.push(frame);
                self.hand_out(frames, message.summary(xid, false), relations)
            }
            _ => match &mut self.open {
                Some((_, frames)) => {
                    frames.push(frame);
                    false
                }
                // A change outside every transaction: a non-transactional message.
                None if role == TransactionRole::Change => {
                    let summary = message.summary(None, false);
                    if message.wal_start <= self.handed_out {
                        return self.skip(vec![frame], relations);
                    }
                    self.handed_out = message.wal_start;
                    self.ready(vec![frame], summary)
                }
                // A Relation or Type message outside every transaction: its table now.
                None => {
                    self.learn(&[frame], relations);
                    false
                }
            },
        }
    }

    /// A transaction has ended: ready to hand out, unless one ending at or after it was
    /// handed out already.
    fn hand_out(
        &mut self,
        frames: Vec<Bytes>,
        summary: Summary,
        relations: &mut Relations,
    ) -> bool {
        let end = summary.end_lsn.unwrap_or_default();
        if end <= self.handed_out {
            return self.skip(frames, relations);
        }
        self.handed_out = end;
        self.ready(frames, summary)
    }

    fn ready(&mut self, frames: Vec<Bytes>, summary: Summary) -> bool {
        self.ready = Some(Ready {
            frames,
            next: 0,
            decoder: self.fresh,
            summary,
        });
        true
    }

    /// A transaction sent again: not handed out, but the tables it carries are learnt
    /// (the server will not send them again in this session).
    fn skip(&mut self, frames: Vec<Bytes>, relations: &mut Relations) -> bool {
        self.learn(&frames, relations);
        false
    }

    /// Frames that are not handed out, replayed for the tables they carry.
    fn learn(&self, frames: &[Bytes], relations: &mut Relations) {
        let mut decoder = self.fresh;
        for frame in frames {
            // They decoded when they arrived, with the decoder in the same state.
            let _ = replay(&mut decoder, relations, frame);
        }
    }

    /// The transaction handed out last is done with: what was not read of it is
    /// replayed for its tables.
    pub(crate) fn finish(&mut self, relations: &mut Relations) {
        if let Some(ready) = &mut self.ready {
            ready.finish(relations);
        }
    }

    /// The transaction [`true`] announced.
    pub(crate) fn take<'a>(&'a mut self, relations: &'a mut Relations) -> WholeTransaction<'a> {
        let ready = self.ready.as_mut().expect("a transaction is ready");
        WholeTransaction { ready, relations }
    }

    /// The connection is gone: the server sends every transaction that was not handed
    /// out again in full, in the new session.
    pub(crate) fn resume(&mut self) {
        self.open = None;
        self.streamed.clear();
        self.block = None;
        self.ready = None;
    }
}

/// One transaction, whole: every message of it from its Begin (or first Stream Start) to
/// its end, read with [`WholeTransaction::next_event`]; handed out once, after its end
/// arrived, in the order transactions ended.
///
/// Confirm [`WholeTransaction::end_lsn`] once it is applied (or let auto-confirm do it
/// when the next transaction is asked for).
#[derive(Debug)]
pub struct WholeTransaction<'a> {
    ready: &'a mut Ready,
    relations: &'a mut Relations,
}

impl WholeTransaction<'_> {
    /// The next message of the transaction, with its table and rows; `None` after its
    /// last (the Commit, Prepare, …, or the lone message).
    ///
    /// # Errors
    ///
    /// [`ClientError::Decode`] for a frame that does not decode (it decoded once, when
    /// it arrived, so this does not happen with the frames the consumer gathered).
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>, ClientError> {
        let Ready {
            frames,
            next,
            decoder,
            ..
        } = &mut *self.ready;
        let Some(frame) = frames.get(*next) else {
            return Ok(None);
        };
        *next += 1;
        replay(decoder, self.relations, frame).map(Some)
    }

    /// How it ended.
    #[must_use]
    pub fn kind(&self) -> TransactionKind {
        self.ready.summary.kind
    }

    /// Its xid (`None` for a message outside any transaction).
    #[must_use]
    pub fn xid(&self) -> Option<Xid> {
        self.ready.summary.xid
    }

    /// The position to confirm once it is applied: the end of its commit (prepare,
    /// commit prepared, rollback prepared) record; `None` for a message outside any
    /// transaction, which moves no position.
    #[must_use]
    pub fn end_lsn(&self) -> Option<Lsn> {
        self.ready.summary.end_lsn
    }

    /// Whether it was streamed (in blocks, before its end).
    #[must_use]
    pub fn streamed(&self) -> bool {
        self.ready.summary.streamed
    }

    /// How many messages it has (its Begin and end, Stream Start and Stop included).
    #[must_use]
    pub fn len(&self) -> usize {
        self.ready.frames.len()
    }

    /// Whether it has no messages (never: it has at least its end).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ready.frames.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Replication, StreamOptions};
    use pgoutput_codec::{encode, Ctx, ServerMessage, XLogData};
    use pgoutput_codec::{
        Begin, ColumnValue, Commit, Encoder, Insert, Oid, PgTimestamp, ProtocolVersion, Relation,
        RelationColumn, ReplicaIdentity, Seq, StreamAbort, StreamCommit, StreamStart, StreamStop,
        Streaming, TupleData,
    };

    /// A session's frames, as a walsender with protocol 2 and streaming on sends them.
    struct Wal {
        encoder: Encoder,
    }

    impl Wal {
        fn new() -> Wal {
            Wal {
                encoder: Encoder::new(ProtocolVersion::V2, Streaming::On).unwrap(),
            }
        }

        fn frame(&mut self, at: u64, message: &PgOutputMessage<'_>) -> Bytes {
            let payload = self.encoder.encode(message).unwrap();
            let xlog = ServerMessage::XLogData(XLogData {
                wal_start: Lsn(at),
                wal_end: Lsn(at),
                send_time: PgTimestamp(0),
                data: payload.as_slice().into(),
            });
            Bytes::from(encode(&xlog, Ctx::plain(ProtocolVersion::V1)).unwrap())
        }
    }

    fn relation(xid: Option<u32>, columns: &[&'static str]) -> PgOutputMessage<'static> {
        PgOutputMessage::Relation(Relation {
            xid: xid.map(Xid),
            relation_oid: Oid(16385),
            namespace: "public".into(),
            relation_name: "t".into(),
            replica_identity: ReplicaIdentity::Default,
            columns: Seq::from(
                columns
                    .iter()
                    .map(|name| RelationColumn {
                        flags: 0,
                        name: (*name).into(),
                        type_oid: Oid(25),
                        type_modifier: -1,
                    })
                    .collect::<Vec<_>>(),
            ),
        })
    }

    fn insert(xid: Option<u32>, values: &[&str]) -> PgOutputMessage<'static> {
        PgOutputMessage::Insert(Insert {
            xid: xid.map(Xid),
            relation_oid: Oid(16385),
            new_tuple: TupleData::new(values.iter().map(|v| ColumnValue::from(*v)).collect()),
        })
    }

    fn begin(xid: u32, at: u64) -> PgOutputMessage<'static> {
        PgOutputMessage::Begin(Begin {
            final_lsn: Lsn(at),
            commit_timestamp: PgTimestamp(0),
            xid: Xid(xid),
        })
    }

    fn commit(at: u64) -> PgOutputMessage<'static> {
        PgOutputMessage::Commit(Commit {
            flags: 0,
            commit_lsn: Lsn(at),
            end_lsn: Lsn(at + 8),
            commit_timestamp: PgTimestamp(0),
        })
    }

    fn start(xid: u32, first: bool) -> PgOutputMessage<'static> {
        PgOutputMessage::StreamStart(StreamStart {
            xid: Xid(xid),
            first_segment: first,
        })
    }

    fn stop() -> PgOutputMessage<'static> {
        PgOutputMessage::StreamStop(StreamStop {})
    }

    fn stream_commit(xid: u32, at: u64) -> PgOutputMessage<'static> {
        PgOutputMessage::StreamCommit(StreamCommit {
            xid: Xid(xid),
            flags: 0,
            commit_lsn: Lsn(at),
            end_lsn: Lsn(at + 8),
            commit_timestamp: PgTimestamp(0),
        })
    }

    fn stream_abort(xid: u32, sub: u32) -> PgOutputMessage<'static> {
        PgOutputMessage::StreamAbort(StreamAbort {
            xid: Xid(xid),
            subtransaction_xid: Xid(sub),
            abort_lsn: None,
            abort_timestamp: None,
        })
    }

    /// Each transaction handed out: its xid, end, and its rows as `column=value` lists.
    type Handed = Vec<(Option<Xid>, Option<Lsn>, Vec<String>)>;

    fn gather(replication: &mut Replication, frames: Vec<Bytes>) -> Handed {
        let mut handed = Vec::new();
        for frame in frames {
            let Some(mut transaction) = replication.gather(frame).unwrap() else {
                continue;
            };
            let (xid, end) = (transaction.xid(), transaction.end_lsn());
            let mut rows = Vec::new();
            while let Some(event) = transaction.next_event().unwrap() {
                if let Some(row) = event.new_row() {
                    let values: Vec<String> = row
                        .iter()
                        .map(|c| format!("{}={}", c.name(), c.value::<String>().unwrap()))
                        .collect();
                    rows.push(values.join(","));
                }
            }
            handed.push((xid, end, rows));
        }
        handed
    }

    fn replication() -> Replication {
        let options = StreamOptions::new(ProtocolVersion::V2, &["p"]).streaming(Streaming::On);
        Replication::new(&options).unwrap()
    }

    #[test]
    fn a_streamed_transaction_comes_whole_at_its_end_with_its_aborted_subtransaction_dropped() {
        let mut wal = Wal::new();
        let frames = vec![
            wal.frame(0x100, &start(700, true)),
            wal.frame(0, &relation(Some(700), &["id", "name"])),
            wal.frame(0x110, &insert(Some(700), &["1", "a"])),
            wal.frame(0x120, &insert(Some(701), &["99", "rolled back"])),
            wal.frame(0x130, &stop()),
            // A transaction sent whole between the blocks: its table was sent before
            // the stream, outside it.
            wal.frame(0, &relation(None, &["id", "name"])),
            wal.frame(0x140, &begin(710, 0x150)),
            wal.frame(0x148, &insert(None, &["5", "between"])),
            wal.frame(0x150, &commit(0x150)),
            wal.frame(0x160, &start(700, false)),
            wal.frame(0x170, &insert(Some(702), &["2", "b"])),
            wal.frame(0x180, &stop()),
            wal.frame(0x190, &stream_abort(700, 701)),
            // Another streamed transaction, aborted whole.
            wal.frame(0x1a0, &start(720, true)),
            wal.frame(0x1b0, &insert(Some(720), &["50", "never"])),
            wal.frame(0x1c0, &stop()),
            wal.frame(0x1d0, &stream_abort(720, 720)),
            wal.frame(0x1e0, &stream_commit(700, 0x1e0)),
        ];
        let handed = gather(&mut replication(), frames);
        assert_eq!(
            handed,
            [
                (
                    Some(Xid(710)),
                    Some(Lsn(0x158)),
                    vec!["id=5,name=between".to_owned()]
                ),
                (
                    Some(Xid(700)),
                    Some(Lsn(0x1e8)),
                    vec!["id=1,name=a".to_owned(), "id=2,name=b".to_owned()]
                ),
            ]
        );
    }

    #[test]
    fn rows_are_read_with_the_columns_they_were_sent_with() {
        let mut wal = Wal::new();
        let frames = vec![
            wal.frame(0x100, &begin(700, 0x140)),
            wal.frame(0, &relation(None, &["id", "name"])),
            wal.frame(0x110, &insert(None, &["1", "a"])),
            // ALTER TABLE t RENAME name TO label, inside the transaction.
            wal.frame(0, &relation(None, &["id", "label"])),
            wal.frame(0x120, &insert(None, &["2", "b"])),
            wal.frame(0x140, &commit(0x140)),
            wal.frame(0x150, &begin(701, 0x170)),
            wal.frame(0x160, &insert(None, &["3", "c"])),
            wal.frame(0x170, &commit(0x170)),
        ];
        let handed = gather(&mut replication(), frames);
        let rows: Vec<Vec<String>> = handed.into_iter().map(|(_, _, rows)| rows).collect();
        assert_eq!(
            rows,
            [
                vec!["id=1,name=a".to_owned(), "id=2,label=b".to_owned()],
                vec!["id=3,label=c".to_owned()],
            ]
        );
    }

    #[test]
    fn a_transaction_sent_again_is_not_handed_out_again_and_its_table_is_still_learnt() {
        let mut wal = Wal::new();
        let first = vec![
            wal.frame(0x100, &begin(700, 0x120)),
            wal.frame(0, &relation(None, &["id", "name"])),
            wal.frame(0x110, &insert(None, &["1", "a"])),
            wal.frame(0x120, &commit(0x120)),
            // Cut inside the next one.
            wal.frame(0x130, &begin(701, 0x150)),
            wal.frame(0x140, &insert(None, &["2", "half"])),
        ];
        let mut replication = replication();
        let handed = gather(&mut replication, first);
        assert_eq!(handed.len(), 1);
        replication.resume();
        // A new session (a crashed server sending again from an older position): the
        // first transaction again, carrying the table, then the one that was cut, whole.
        let mut wal = Wal::new();
        let again = vec![
            wal.frame(0x100, &begin(700, 0x120)),
            wal.frame(0, &relation(None, &["id", "name"])),
            wal.frame(0x110, &insert(None, &["1", "a"])),
            wal.frame(0x120, &commit(0x120)),
            wal.frame(0x130, &begin(701, 0x150)),
            wal.frame(0x140, &insert(None, &["2", "b"])),
            wal.frame(0x150, &commit(0x150)),
        ];
        let handed = gather(&mut replication, again);
        assert_eq!(
            handed,
            [(
                Some(Xid(701)),
                Some(Lsn(0x158)),
                vec!["id=2,name=b".to_owned()]
            )]
        );
        assert_eq!(replication.delivered(), Lsn(0x158));
    }

    #[test]
    fn a_transaction_handed_out_and_not_read_still_teaches_its_tables() {
        let mut wal = Wal::new();
        let mut replication = replication();
        let frames = [
            wal.frame(0x100, &begin(700, 0x120)),
            wal.frame(0, &relation(None, &["id", "name"])),
            wal.frame(0x110, &insert(None, &["1", "a"])),
            wal.frame(0x120, &commit(0x120)),
        ];
        for frame in frames {
            // Handed out, and dropped unread.
            let _ = replication.gather(frame).unwrap();
        }
        let frames = vec![
            wal.frame(0x130, &begin(701, 0x150)),
            wal.frame(0x140, &insert(None, &["2", "b"])),
            wal.frame(0x150, &commit(0x150)),
        ];
        let handed = gather(&mut replication, frames);
        assert_eq!(handed[0].2, ["id=2,name=b"]);
    }

    #[test]
    fn a_row_knows_its_key_and_a_truncate_its_tables() {
        let mut wal = Wal::new();
        let PgOutputMessage::Relation(mut keyed) = relation(None, &["id", "name"]) else {
            unreachable!()
        };
        keyed.columns = Seq::from(
            keyed
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| RelationColumn {
                    flags: u8::from(i == 0),
                    ..c.clone()
                })
                .collect::<Vec<_>>(),
        );
        let truncate = PgOutputMessage::Truncate(pgoutput_codec::Truncate {
            xid: None,
            options: pgoutput_codec::TruncateOptions(0),
            // 16390 has had no Relation message: it is left out.
            relation_oids: Seq::from(vec![Oid(16385), Oid(16390)]),
        });
        let frames = vec![
            wal.frame(0x100, &begin(730, 0x130)),
            wal.frame(0, &PgOutputMessage::Relation(keyed)),
            wal.frame(0x110, &insert(None, &["7", "a"])),
            wal.frame(0x120, &truncate),
            wal.frame(0x130, &commit(0x130)),
        ];
        let mut replication = replication();
        let mut checked = 0;
        for frame in frames {
            let Some(mut transaction) = replication.gather(frame).unwrap() else {
                continue;
            };
            while let Some(event) = transaction.next_event().unwrap() {
                if let Some(row) = event.new_row() {
                    let key: Vec<String> = row
                        .key()
                        .map(|c| format!("{}={}", c.name(), c.value::<String>().unwrap()))
                        .collect();
                    assert_eq!(key, ["id=7"]);
                    assert_eq!(event.truncated().count(), 0);
                    checked += 1;
                }
                if matches!(event.message, PgOutputMessage::Truncate(_)) {
                    let tables: Vec<&str> = event.truncated().map(|r| r.name.as_str()).collect();
                    assert_eq!(tables, ["t"]);
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 2);
    }
}
