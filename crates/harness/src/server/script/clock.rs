//! The script's clock: the LSNs, xids and timestamps a script leaves at zero are filled in
//! when the server takes it, increasing, with each transaction's records before its
//! commit.

use std::collections::HashMap;

use super::model::{Event, Script, Step, RECORD};
use super::ScriptError;
use pgoutput_codec::{Lsn, PgOutputMessage, PgTimestamp, Xid};

impl Script {
    /// Gives every zero LSN, xid and timestamp a value, continuing from `clock`.
    ///
    /// # Errors
    ///
    /// [`ScriptError`] naming the line (or event) whose positions go backwards (a
    /// record before the end of the events before it) or past the end of the LSN space.
    pub(crate) fn fill(&mut self, clock: &mut Clock) -> Result<(), ScriptError> {
        for index in 0..self.events.len() {
            clock
                .fill_event(&mut self.events[index])
                .map_err(|message| self.error_at(index, None, message))?;
        }
        // Stream progress takes its transaction's end, known now (the first transaction
        // of that xid after it).
        let mut ends: HashMap<Xid, Lsn> = HashMap::new();
        for event in self.events.iter_mut().rev() {
            match event {
                Event::Transaction(t) => {
                    ends.insert(t.xid, t.end_lsn);
                }
                Event::StreamProgress { xid, end_lsn, .. } => {
                    if let Some(end) = ends.get(xid) {
                        *end_lsn = *end;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Where the server's WAL stands: the next LSN and xid to hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clock {
    pub next_lsn: Lsn,
    pub next_xid: u32,
}

impl Clock {
    /// The position of a record: `given` if set (and the clock moves past it), else the
    /// next one.
    fn lsn(&mut self, given: Lsn) -> Result<Lsn, String> {
        let lsn = if given.0 != 0 { given } else { self.next_lsn };
        let after = lsn
            .0
            .checked_add(RECORD)
            .ok_or_else(|| format!("LSN {lsn} leaves no room for its record before the end of the LSN space (FFFFFFFF/FFFFFFFF)"))?;
        self.next_lsn = Lsn(self.next_lsn.0.max(after));
        Ok(lsn)
    }

    /// A record that ends an event (a commit, a message): at or after the end of
    /// everything before it.
    fn ending_lsn(&mut self, given: Lsn, what: &str) -> Result<Lsn, String> {
        if given.0 != 0 && given < self.next_lsn {
            return Err(format!(
                "{what} {given} is before the end of the events before it ({}): LSNs go backwards",
                self.next_lsn
            ));
        }
        self.lsn(given)
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

    fn fill_event(&mut self, event: &mut Event) -> Result<(), String> {
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
                // Records left at zero go between the clock and a given commit: a large
                // transaction's changes are spaced closer rather than passing its commit.
                let unset = t
                    .steps
                    .iter()
                    .filter(|s| match s {
                        Step::Change { lsn, .. } | Step::SubtransactionAbort { lsn, .. } => {
                            lsn.0 == 0
                        }
                        Step::Schema { .. } | Step::StreamBlock { .. } => false,
                    })
                    .count() as u64;
                let spacing = match t.commit_lsn.0 {
                    0 => RECORD,
                    commit => {
                        let room = commit.saturating_sub(self.next_lsn.0);
                        RECORD.min(room / (unset + 1))
                    }
                };
                let mut next = self.next_lsn;
                let mut last = Lsn(0);
                for step in &mut t.steps {
                    // A transactional message is queued at the end of its record
                    // (`logicalmsg_decode` passes `endptr`): as the transaction's last
                    // record, its position is the commit record's. Every other change is
                    // queued at its record's start, below the commit.
                    let (lsn, may_meet_commit) = match step {
                        Step::Change {
                            lsn,
                            message: PgOutputMessage::Message(_),
                            ..
                        } => (lsn, true),
                        Step::Change { lsn, .. } | Step::SubtransactionAbort { lsn, .. } => {
                            (lsn, false)
                        }
                        Step::Schema { .. } | Step::StreamBlock { .. } => continue,
                    };
                    if lsn.0 == 0 {
                        *lsn = next;
                        next = Lsn(next.0.saturating_add(spacing));
                        continue;
                    }
                    // Given positions are the WAL's: they only go forward.
                    if *lsn < last {
                        return Err(format!(
                            "a change at {lsn} comes after one at {last}: LSNs go backwards"
                        ));
                    }
                    last = *lsn;
                    next = Lsn(next.0.max(lsn.0.saturating_add(spacing)));
                    let past_commit = match may_meet_commit {
                        true => *lsn > t.commit_lsn,
                        false => *lsn >= t.commit_lsn,
                    };
                    if t.commit_lsn.0 != 0 && past_commit {
                        return Err(match may_meet_commit {
                            true => format!(
                                "a message at {lsn} is after its transaction's commit at {}",
                                t.commit_lsn
                            ),
                            false => format!(
                                "a change at {lsn} is not before its transaction's commit at {}",
                                t.commit_lsn
                            ),
                        });
                    }
                }
                for step in &mut t.steps {
                    match step {
                        Step::Change {
                            lsn,
                            message: PgOutputMessage::Message(m),
                            ..
                        } => m.lsn = *lsn,
                        Step::SubtransactionAbort { timestamp, .. } => time(timestamp),
                        _ => {}
                    }
                }
                // The changes stay below a given commit, however close.
                let after_changes = match t.commit_lsn.0 {
                    0 => next,
                    _ => next.min(t.commit_lsn),
                };
                self.next_lsn = self.next_lsn.max(after_changes);
                t.commit_lsn = self.ending_lsn(t.commit_lsn, "commit LSN")?;
                t.end_lsn = self.end(t.commit_lsn, t.end_lsn)?;
                time(&mut t.timestamp);
            }
            Event::CommitPrepared {
                commit_lsn,
                end_lsn,
                timestamp,
                ..
            } => {
                *commit_lsn = self.ending_lsn(*commit_lsn, "COMMIT PREPARED's LSN")?;
                *end_lsn = self.end(*commit_lsn, *end_lsn)?;
                time(timestamp);
            }
            Event::RollbackPrepared {
                end_lsn, timestamp, ..
            } => {
                let record = self.lsn(Lsn(0))?;
                *end_lsn = self.end(record, *end_lsn)?;
                time(timestamp);
            }
            Event::Message(m) => {
                m.lsn = self.ending_lsn(m.lsn, "message LSN")?;
            }
            Event::StreamProgress { .. } => {}
            // A keepalive reports at least the end of what went before; records are
            // spaced here by a guess, so a recorded position may fall inside that space.
            Event::WalPosition { lsn } => {
                if lsn.0 == 0 {
                    *lsn = self.next_lsn;
                }
                self.next_lsn = self.next_lsn.max(*lsn);
            }
        }
        Ok(())
    }

    /// The end of the record at `record`: `given` if set, else a record length on.
    fn end(&mut self, record: Lsn, given: Lsn) -> Result<Lsn, String> {
        let end = if given.0 != 0 {
            if given <= record {
                return Err(format!(
                    "end LSN {given} is not after its record at {record}"
                ));
            }
            given
        } else {
            Lsn(record.0.checked_add(RECORD).ok_or_else(|| {
                format!("LSN {record} leaves no room for its record before the end of the LSN space (FFFFFFFF/FFFFFFFF)")
            })?)
        };
        self.next_lsn = Lsn(self.next_lsn.0.max(end.0));
        Ok(end)
    }
}
