//! Which Relation messages a client has had, by pgoutput's rules (`RelationSyncEntry`'s
//! `schema_sent` and `streamed_txns` in pgoutput.c): a table's schema goes out before its
//! first change in a session; in a stream block, before its first change in that streamed
//! transaction, and again after any Stream Abort of it (a subtransaction's included);
//! a Stream Commit counts what its blocks sent as sent; an invalidation resets it all.
//!
//! The renderer follows these rules for each client. The JSON reader follows them for the
//! recorded session, to tell the Relations pgoutput sent on its own rules (which each
//! client gets where its own session needs them) from those the WAL caused.

use std::collections::{HashMap, HashSet};

use pgoutput_codec::{Oid, Xid};

/// The tables whose schema a client has, in its session and in each streamed transaction.
#[derive(Debug, Default)]
pub(crate) struct SchemaCache {
    /// Sent outside stream blocks, or in a streamed transaction that committed.
    sent: HashSet<Oid>,
    /// Sent in the blocks of each streamed transaction (by top-level xid) still open.
    streamed: HashMap<Xid, HashSet<Oid>>,
}

impl SchemaCache {
    /// Whether a change of `oid` needs the table's Relation first; `stream` is the
    /// top-level xid when the change goes out in a stream block.
    pub(crate) fn needs(&self, oid: Oid, stream: Option<Xid>) -> bool {
        match stream {
            Some(xid) => !self.streamed.get(&xid).is_some_and(|s| s.contains(&oid)),
            None => !self.sent.contains(&oid),
        }
    }

    /// The Relation of `oid` went out (in a block of `stream`).
    pub(crate) fn sent(&mut self, oid: Oid, stream: Option<Xid>) {
        match stream {
            Some(xid) => self.streamed.entry(xid).or_default().insert(oid),
            None => self.sent.insert(oid),
        };
    }

    /// Stream Commit: the subscriber has what the transaction's blocks sent.
    pub(crate) fn stream_committed(&mut self, xid: Xid) {
        if let Some(oids) = self.streamed.remove(&xid) {
            self.sent.extend(oids);
        }
    }

    /// Stream Abort of the transaction or one of its subtransactions: what its blocks
    /// sent may be undone, so its next changes send the schema again.
    pub(crate) fn stream_aborted(&mut self, xid: Xid) {
        self.streamed.remove(&xid);
    }

    /// The table's cached entry was invalidated: every context sends its schema again.
    pub(crate) fn invalidate(&mut self, oid: Oid) {
        self.sent.remove(&oid);
        for oids in self.streamed.values_mut() {
            oids.remove(&oid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgoutput_rules() {
        let (t, x, y) = (Oid(1), Xid(10), Xid(11));
        let mut cache = SchemaCache::default();
        assert!(cache.needs(t, None));
        cache.sent(t, None);
        assert!(!cache.needs(t, None));
        // Each streamed transaction sends it once, whatever the session had.
        assert!(cache.needs(t, Some(x)));
        cache.sent(t, Some(x));
        assert!(!cache.needs(t, Some(x)));
        assert!(cache.needs(t, Some(y)));
        // After a (sub)transaction's Stream Abort, again.
        cache.stream_aborted(x);
        assert!(cache.needs(t, Some(x)));
        // A Stream Commit makes it sent for the session.
        let mut fresh = SchemaCache::default();
        fresh.sent(t, Some(y));
        assert!(fresh.needs(t, None));
        fresh.stream_committed(y);
        assert!(!fresh.needs(t, None));
        // An invalidation resets every context.
        cache.sent(t, Some(y));
        cache.invalidate(t);
        assert!(cache.needs(t, None) && cache.needs(t, Some(y)));
    }
}
