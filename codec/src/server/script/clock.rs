//! The script's clock: the LSNs, xids and timestamps a script leaves at zero are filled in
//! when the server takes it, increasing, with each transaction's records before its
//! commit.

use super::model::{Event, Script, Step};
use crate::{Lsn, PgOutputMessage, PgTimestamp, Xid};

impl Script {
    /// Gives every zero LSN, xid and timestamp a value, continuing from `clock`.
    pub(crate) fn fill(&mut self, clock: &mut Clock) {
        for event in &mut self.events {
            clock.fill_event(event);
        }
        // Stream progress takes its transaction's end, known now.
        for i in 0..self.events.len() {
            if let Event::StreamProgress { xid, .. } = self.events[i] {
                let end = self.events[i + 1..].iter().find_map(|e| match e {
                    Event::Transaction(t) if t.xid == xid => Some(t.end_lsn),
                    _ => None,
                });
                if let (Some(end), Event::StreamProgress { end_lsn, .. }) =
                    (end, &mut self.events[i])
                {
                    *end_lsn = end;
                }
            }
        }
    }
}

/// Where the server's WAL stands: the next LSN and xid to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clock {
    pub next_lsn: Lsn,
    pub next_xid: u32,
}

/// How far apart filled-in records are, as in a real WAL with small records.
pub(super) const RECORD: u64 = 0x48;

impl Clock {
    /// The position of a record: `given` if set (and the clock moves past it), else the
    /// next one.
    fn lsn(&mut self, given: Lsn) -> Lsn {
        let lsn = if given.0 != 0 { given } else { self.next_lsn };
        self.next_lsn = Lsn(self.next_lsn.0.max(lsn.0 + RECORD));
        lsn
    }

    fn xid(&mut self, given: Xid) -> Xid {
        let xid = if given.0 != 0 {
            given
        } else {
            Xid(self.next_xid)
        };
        self.next_xid = self.next_xid.max(xid.0.saturating_add(1));
        xid
    }

    fn fill_event(&mut self, event: &mut Event) {
        let now = PgTimestamp::now();
        let time = |t: &mut PgTimestamp| {
            if t.0 == 0 {
                *t = now;
            }
        };
        match event {
            Event::Transaction(t) => {
                t.xid = self.xid(t.xid);
                for sub in &mut t.subtransaction_xids {
                    *sub = self.xid(*sub);
                }
                for step in &mut t.steps {
                    match step {
                        Step::Change { lsn, message, .. } => {
                            *lsn = self.lsn(*lsn);
                            if let PgOutputMessage::Message(m) = message {
                                m.lsn = *lsn;
                            }
                        }
                        Step::SubtransactionAbort { lsn, timestamp, .. } => {
                            *lsn = self.lsn(*lsn);
                            time(timestamp);
                        }
                        Step::StreamBoundary => {}
                    }
                }
                t.commit_lsn = self.lsn(t.commit_lsn);
                t.end_lsn = self.end(t.commit_lsn, t.end_lsn);
                time(&mut t.timestamp);
            }
            Event::CommitPrepared {
                commit_lsn,
                end_lsn,
                timestamp,
                ..
            } => {
                *commit_lsn = self.lsn(*commit_lsn);
                *end_lsn = self.end(*commit_lsn, *end_lsn);
                time(timestamp);
            }
            Event::RollbackPrepared {
                end_lsn, timestamp, ..
            } => {
                let record = self.lsn(Lsn(0));
                *end_lsn = self.end(record, *end_lsn);
                time(timestamp);
            }
            Event::Message(m) => {
                m.lsn = self.lsn(m.lsn);
            }
            Event::StreamProgress { .. } => {}
        }
    }

    /// The end of the record at `record`: `given` if set, else a record length on.
    fn end(&mut self, record: Lsn, given: Lsn) -> Lsn {
        let end = if given.0 != 0 {
            given
        } else {
            Lsn(record.0 + RECORD)
        };
        self.next_lsn = Lsn(self.next_lsn.0.max(end.0));
        end
    }
}
