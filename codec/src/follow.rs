//! Where each message of a pgoutput stream stands: in which transaction (counted from 1
//! over the session), which change of it, which stream block; whether it opens or ends
//! its transaction. Every side that follows a stream reads it here (the client's stream
//! core, the fault rules of the test server and of the proxy), from what the derive says
//! of each message type ([`Tagged::transaction_role`], [`Tagged::stream_role`] and the
//! xids), so a message type of a protocol of your own is followed like the built-in
//! ones.
//!
//! ```
//! use pgoutput_codec::{Begin, Commit, Follower, Lsn, PgOutputMessage, PgTimestamp, Xid};
//!
//! let mut follower = Follower::default();
//! let begin = PgOutputMessage::Begin(Begin {
//!     final_lsn: Lsn(0x100),
//!     commit_timestamp: PgTimestamp(0),
//!     xid: Xid(750),
//! });
//! let place = follower.follow(&begin);
//! assert_eq!((place.transaction, place.opens), (Some(1), true));
//! assert!(!follower.idle());
//! let commit = PgOutputMessage::Commit(Commit {
//!     flags: 0,
//!     commit_lsn: Lsn(0x100),
//!     end_lsn: Lsn(0x148),
//!     commit_timestamp: PgTimestamp(0),
//! });
//! let place = follower.follow(&commit);
//! assert_eq!((place.transaction, place.ends), (Some(1), true));
//! assert!(follower.idle());
//! ```

use std::collections::HashMap;

use crate::{StreamRole, Tagged, TransactionRole, Xid};

/// Where one message stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Place {
    /// The transaction the message belongs to, counted from 1 in the order transactions
    /// first showed (a Begin, a first Stream Start, or an end with nothing open before
    /// it, such as Commit Prepared); `None` outside any.
    pub transaction: Option<u64>,
    /// For a change: its number within its transaction, from 1.
    pub change: Option<u64>,
    /// For a Stream Start: the block's number within its transaction, from 1.
    pub block: Option<u64>,
    /// The message opens its transaction (a Begin, or a transaction's first Stream
    /// Start).
    pub opens: bool,
    /// The message ends its transaction (a Commit, Stream Commit, Prepare, Stream
    /// Prepare, Commit Prepared or Rollback Prepared; not an abort).
    pub ends: bool,
}

/// A streamed transaction with blocks out and no end yet.
#[derive(Debug, Clone, Copy)]
struct Streamed {
    number: u64,
    blocks: u64,
    changes: u64,
}

/// Follows the transactions and stream blocks of one session, message by message.
#[derive(Debug, Clone, Default)]
pub struct Follower {
    transactions: u64,
    /// The transaction sent whole that is open: its number and changes so far.
    open: Option<(u64, u64)>,
    /// Streamed transactions by xid.
    streamed: HashMap<Xid, Streamed>,
    /// The xid of the stream block that is open.
    block: Option<Xid>,
    /// The xid of the last transaction opened or block started.
    xid: Option<Xid>,
}

impl Follower {
    /// Places `message`, the session's next.
    pub fn follow<T: Tagged + ?Sized>(&mut self, message: &T) -> Place {
        let mut place = Place::default();
        match (message.stream_role(), message.transaction_role()) {
            (StreamRole::Start, _) => {
                let xid = message.xid().unwrap_or(Xid(0));
                self.xid = Some(xid);
                self.block = Some(xid);
                let transactions = &mut self.transactions;
                let streamed = self.streamed.entry(xid).or_insert_with(|| {
                    *transactions += 1;
                    place.opens = true;
                    Streamed {
                        number: *transactions,
                        blocks: 0,
                        changes: 0,
                    }
                });
                streamed.blocks += 1;
                place.transaction = Some(streamed.number);
                place.block = Some(streamed.blocks);
            }
            (StreamRole::Stop, _) => {
                place.transaction = self
                    .block
                    .take()
                    .and_then(|xid| self.streamed.get(&xid))
                    .map(|s| s.number);
            }
            (_, TransactionRole::Begin) => {
                self.xid = message.xid();
                self.transactions += 1;
                self.open = Some((self.transactions, 0));
                place.transaction = Some(self.transactions);
                place.opens = true;
            }
            (stream, TransactionRole::End) => {
                let ended = match stream {
                    // A streamed transaction's end names it.
                    StreamRole::Outside => message
                        .xid()
                        .and_then(|xid| self.streamed.remove(&xid))
                        .map(|s| s.number),
                    _ => self.open.take().map(|(number, _)| number),
                };
                // Nothing of it was open here (Commit Prepared, Rollback Prepared, or a
                // transaction whose start this session did not see): one of its own.
                place.transaction = Some(ended.unwrap_or_else(|| {
                    self.transactions += 1;
                    self.transactions
                }));
                place.ends = true;
            }
            (_, TransactionRole::Abort) => {
                let xid = message.xid().unwrap_or(Xid(0));
                place.transaction = self.streamed.get(&xid).map(|s| s.number);
                if message.subtransaction_xid().is_none_or(|sub| sub == xid) {
                    self.streamed.remove(&xid);
                }
            }
            (_, TransactionRole::Change) => {
                let counted = match self.block {
                    Some(xid) => self
                        .streamed
                        .get_mut(&xid)
                        .map(|s| (s.number, &mut s.changes)),
                    None => self.open.as_mut().map(|(n, changes)| (*n, changes)),
                };
                if let Some((number, changes)) = counted {
                    *changes += 1;
                    place.transaction = Some(number);
                    place.change = Some(*changes);
                }
            }
            _ => place.transaction = self.current(),
        }
        place
    }

    /// The transaction a message without a role of its own belongs to.
    fn current(&self) -> Option<u64> {
        match self.block {
            Some(xid) => self.streamed.get(&xid).map(|s| s.number),
            None => self.open.map(|(number, _)| number),
        }
    }

    /// Whether no transaction, and no streamed transaction, is open.
    #[must_use]
    pub fn idle(&self) -> bool {
        self.open.is_none() && self.streamed.is_empty()
    }

    /// Whether a stream block is open.
    #[must_use]
    pub fn in_block(&self) -> bool {
        self.block.is_some()
    }

    /// How many transactions showed so far.
    #[must_use]
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    /// The xid of the last transaction opened (a Begin's, a Stream Start's).
    #[must_use]
    pub fn xid(&self) -> Option<Xid> {
        self.xid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, Ctx, Decoder, PgOutputMessage, ProtocolVersion, Streaming};

    /// The session decoder's messages from hand-made payloads.
    fn places(payloads: &[Vec<u8>]) -> Vec<Place> {
        let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On).unwrap();
        let mut follower = Follower::default();
        payloads
            .iter()
            .map(|p| follower.follow(&decoder.decode(p).unwrap()))
            .collect()
    }

    fn begin(xid: u32) -> Vec<u8> {
        let mut m = vec![b'B'];
        m.extend_from_slice(&[0; 16]);
        m.extend_from_slice(&xid.to_be_bytes());
        m
    }

    fn commit() -> Vec<u8> {
        let mut m = vec![b'C', 0];
        m.extend_from_slice(&[0; 24]);
        m
    }

    fn insert(xid: Option<u32>) -> Vec<u8> {
        let mut m = vec![b'I'];
        if let Some(xid) = xid {
            m.extend_from_slice(&xid.to_be_bytes());
        }
        m.extend_from_slice(&[0, 0, 0, 1, b'N', 0, 0]);
        m
    }

    fn stream_start(xid: u32, first: bool) -> Vec<u8> {
        let mut m = vec![b'S'];
        m.extend_from_slice(&xid.to_be_bytes());
        m.push(u8::from(first));
        m
    }

    fn stream_commit(xid: u32) -> Vec<u8> {
        let mut m = vec![b'c'];
        m.extend_from_slice(&xid.to_be_bytes());
        m.push(0);
        m.extend_from_slice(&[0; 24]);
        m
    }

    fn stream_abort(xid: u32, sub: u32) -> Vec<u8> {
        let mut m = vec![b'A'];
        m.extend_from_slice(&xid.to_be_bytes());
        m.extend_from_slice(&sub.to_be_bytes());
        m
    }

    #[test]
    fn transactions_changes_and_blocks_are_counted_across_interleaving() {
        let p = places(&[
            begin(5),
            insert(None),
            insert(None),
            commit(),
            stream_start(7, true),
            insert(Some(7)),
            b"E".to_vec(),
            begin(8),
            insert(None),
            commit(),
            stream_start(7, false),
            insert(Some(9)),
            b"E".to_vec(),
            stream_abort(7, 9),
            stream_commit(7),
        ]);
        let change = |p: &Place| (p.transaction, p.change);
        assert_eq!(change(&p[2]), (Some(1), Some(2)));
        assert!(p[3].ends && p[3].transaction == Some(1));
        assert_eq!(
            (p[4].transaction, p[4].block, p[4].opens),
            (Some(2), Some(1), true)
        );
        assert_eq!(change(&p[5]), (Some(2), Some(1)));
        assert_eq!(p[6].transaction, Some(2));
        assert_eq!(change(&p[8]), (Some(3), Some(1)));
        assert_eq!(
            (p[10].transaction, p[10].block, p[10].opens),
            (Some(2), Some(2), false)
        );
        assert_eq!(change(&p[11]), (Some(2), Some(2)));
        // A subtransaction's abort leaves the transaction open; its commit ends it.
        assert_eq!((p[13].transaction, p[13].ends), (Some(2), false));
        assert!(p[14].ends && p[14].transaction == Some(2));
    }

    #[test]
    fn idle_only_when_nothing_is_open() {
        let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On).unwrap();
        let mut follower = Follower::default();
        let mut follow = |payload: Vec<u8>| {
            follower.follow(&decoder.decode(&payload).unwrap());
            (follower.idle(), follower.in_block())
        };
        assert_eq!(follow(stream_start(7, true)), (false, true));
        assert_eq!(follow(b"E".to_vec()), (false, false));
        assert_eq!(follow(stream_abort(7, 7)), (true, false));
        assert_eq!(follow(begin(9)), (false, false));
        assert_eq!(follow(commit()), (true, false));
    }

    #[test]
    fn an_end_with_nothing_open_is_a_transaction_of_its_own() {
        let mut follower = Follower::default();
        let commit_prepared =
            b"K\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x03\0\0\0\x04g\0";
        let message: PgOutputMessage<'_> =
            decode(commit_prepared, Ctx::plain(ProtocolVersion::V3)).unwrap();
        let place = follower.follow(&message);
        assert_eq!((place.transaction, place.ends), (Some(1), true));
        assert!(follower.idle());
    }
}
