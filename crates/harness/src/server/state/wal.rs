//! The WAL: the script's events, only ever appended, each shared by every connection
//! that streams it instead of copied.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::super::script::{Clock, End, Event};
use pgoutput_codec::{Lsn, Xid};

/// One event of the WAL, with the transaction it needs to be rendered: for a
/// [`Event::StreamProgress`] the streamed transaction (once it has ended), for `COMMIT` /
/// `ROLLBACK PREPARED` the prepared one.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub event: Arc<Event>,
    pub partner: Option<Arc<Event>>,
}

/// The WAL: events only ever appended, each shared by every connection that streams it.
#[derive(Debug)]
pub(crate) struct Wal {
    entries: Vec<Entry>,
    clock: Clock,
    start_lsn: Lsn,
    end: Lsn,
    /// The latest prepared transaction of each gid.
    prepared: HashMap<String, Arc<Event>>,
    /// Stream progress events waiting for their transaction's end, by xid.
    progress: HashMap<Xid, Vec<usize>>,
}

impl Wal {
    pub(crate) fn new(start_lsn: Lsn, clock: Clock) -> Wal {
        Wal {
            entries: Vec::new(),
            clock,
            start_lsn,
            end: start_lsn,
            prepared: HashMap::new(),
            progress: HashMap::new(),
        }
    }

    /// Appends an event whose positions are filled in.
    pub(crate) fn push(&mut self, event: Event) {
        self.end = self.end.max(event.end_lsn());
        let index = self.entries.len();
        let event = Arc::new(event);
        let partner = match &*event {
            Event::CommitPrepared { gid, .. } | Event::RollbackPrepared { gid, .. } => {
                self.prepared.get(gid).cloned()
            }
            Event::StreamProgress { xid, .. } => {
                self.progress.entry(*xid).or_default().push(index);
                None
            }
            Event::Transaction(t) => {
                if let End::Prepare { gid } = &t.end {
                    self.prepared.insert(gid.clone(), Arc::clone(&event));
                }
                for waiting in self.progress.remove(&t.xid).unwrap_or_default() {
                    self.entries[waiting].partner = Some(Arc::clone(&event));
                }
                None
            }
            Event::Message(_) | Event::WalPosition { .. } => None,
        };
        self.entries.push(Entry { event, partner });
    }

    /// Up to `max` entries from `index` on (cheap: each is two reference counts).
    pub(crate) fn entries(&self, index: usize, max: usize) -> Vec<Entry> {
        let end = self.entries.len().min(index.saturating_add(max));
        self.entries.get(index..end).unwrap_or_default().to_vec()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The end of the WAL: the end of the last event (or where it starts).
    pub(crate) fn end(&self) -> Lsn {
        self.end
    }

    pub(crate) fn start_lsn(&self) -> Lsn {
        self.start_lsn
    }

    pub(crate) fn clock(&self) -> Clock {
        self.clock
    }

    pub(crate) fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// The gids prepared and not yet committed or rolled back.
    pub(crate) fn prepared_gids(&self) -> HashSet<String> {
        let mut finished = HashSet::new();
        for entry in &self.entries {
            if let Event::CommitPrepared { gid, .. } | Event::RollbackPrepared { gid, .. } =
                &*entry.event
            {
                finished.insert(gid.clone());
            }
        }
        self.prepared
            .keys()
            .filter(|gid| !finished.contains(*gid))
            .cloned()
            .collect()
    }

    pub(crate) fn events(&self) -> impl Iterator<Item = &Event> {
        self.entries.iter().map(|e| &*e.event)
    }
}
