//! Whole transactions: Begin, the changes and the schema messages they need, Commit (or
//! Prepare, and the prepared transaction sent whole at COMMIT PREPARED), with its origin.

use std::collections::HashSet;

use crate::server::catalog::Table;
use crate::server::script::{End, Step, Transaction};
use pgoutput_codec::{
    Begin, BeginPrepare, Commit, Lsn, Oid, Origin, PgOutputMessage, PgStr, Prepare, Xid,
};

use super::change::is_table_change;
use super::{Definition, Halt, RenderError, Renderer, Sink};

/// The prepared transaction a `COMMIT` / `ROLLBACK PREPARED` finishes.
pub(super) fn prepared<'e>(
    partner: Option<&'e Transaction>,
    gid: &str,
) -> Result<&'e Transaction, RenderError> {
    partner.ok_or_else(|| RenderError::UnknownGid {
        gid: gid.to_owned(),
    })
}

/// How a transaction sent whole ends (its own end, or the `COMMIT PREPARED` that sends
/// a prepared transaction to a client without `two_phase`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ending<'t> {
    pub(super) prepare_gid: Option<&'t str>,
    pub(super) commit_lsn: Lsn,
    pub(super) end_lsn: Lsn,
    pub(super) timestamp: pgoutput_codec::PgTimestamp,
}

impl<'t> Ending<'t> {
    pub(super) fn of(t: &'t Transaction) -> Ending<'t> {
        Ending {
            prepare_gid: match &t.end {
                End::Prepare { gid } => Some(gid),
                _ => None,
            },
            commit_lsn: t.commit_lsn,
            end_lsn: t.end_lsn,
            timestamp: t.timestamp,
        }
    }
}

impl Renderer<'_> {
    pub(super) fn transaction<S>(
        &mut self,
        t: &Transaction,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        if t.origin.is_some() && self.options.origin_none {
            return Ok(());
        }
        let prepared = matches!(t.end, End::Prepare { .. });
        if prepared && !self.options.two_phase {
            // Sent at COMMIT PREPARED instead.
            return Ok(());
        }
        if self.streams(t) {
            return self.streamed(t, sink);
        }
        if t.end == End::Abort {
            return Ok(());
        }
        self.whole(t, Ending::of(t), sink)
    }

    /// A transaction sent whole: Begin (or Begin Prepare), its changes that this client
    /// gets, then Commit (or Prepare). Its changes are looked at twice (is there any, and
    /// where is the first) rather than collected, so memory does not grow with it.
    pub(super) fn whole<S>(
        &mut self,
        t: &Transaction,
        ending: Ending<'_>,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        // Changes of aborted subtransactions never reach a client that gets the
        // transaction whole.
        let aborted: HashSet<usize> = t
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::SubtransactionAbort { subtransaction, .. } => Some(*subtransaction),
                _ => None,
            })
            .collect();
        let kept = |step: &Step| match step {
            Step::Change { subtransaction, .. } => !aborted.contains(subtransaction),
            _ => true,
        };
        // A transaction the script leaves with no steps at all is sent as it is (older
        // servers send empty ones, and a replayed capture may hold one); one whose
        // changes are all for others, or that is stream blocks of DDL alone, is not.
        let scripted_empty = t.steps.is_empty();
        if t.steps
            .iter()
            .any(|s| matches!(s, Step::Change { message, .. } if is_table_change(message)))
        {
            self.load_publications(sink)?;
        }
        let first_change = t
            .steps
            .iter()
            .filter(|step| kept(step))
            .find_map(|step| match step {
                Step::Change { lsn, message, .. } if self.visible(message) => Some(*lsn),
                _ => None,
            });
        let prepared = ending.prepare_gid.is_some();
        if first_change.is_none() && !prepared && !scripted_empty {
            // PostgreSQL 15 and later skip transactions with nothing for this client. What
            // changed the schema still did.
            for step in t.steps.iter().filter(|step| kept(step)) {
                self.schema_changed(step);
                self.invalidated_by(step);
            }
            return Ok(());
        }
        // pgoutput sends Begin at the first change it publishes, so the frame carries
        // that change's position; Begin Prepare goes out at once, with the transaction's
        // first record. With an Origin after it, the Begin's frame carries 0/0 and the
        // Origin's the position.
        let position = match ending.prepare_gid {
            Some(_) if t.first_lsn.0 != 0 => t.first_lsn,
            _ => first_change.unwrap_or(ending.commit_lsn),
        };
        let begin = match ending.prepare_gid {
            Some(gid) => PgOutputMessage::BeginPrepare(BeginPrepare {
                prepare_lsn: ending.commit_lsn,
                end_lsn: ending.end_lsn,
                prepare_timestamp: ending.timestamp,
                xid: t.xid,
                gid: PgStr::from(gid),
            }),
            None => PgOutputMessage::Begin(Begin {
                final_lsn: ending.commit_lsn,
                commit_timestamp: ending.timestamp,
                xid: t.xid,
            }),
        };
        let begin_lsn = if t.origin.is_some() { Lsn(0) } else { position };
        self.emit(sink, begin_lsn, &begin)?;
        self.origin(t, position, sink)?;
        for step in t.steps.iter().filter(|step| kept(step)) {
            match step {
                Step::Change { lsn, message, .. } if self.visible(message) => {
                    self.change(sink, *lsn, message, None, None)?;
                }
                Step::Schema { .. } => self.schema_step(step, sink, None, None)?,
                _ => {}
            }
            self.invalidated_by(step);
        }
        let end = match ending.prepare_gid {
            Some(gid) => PgOutputMessage::Prepare(Prepare {
                flags: 0,
                prepare_lsn: ending.commit_lsn,
                end_lsn: ending.end_lsn,
                prepare_timestamp: ending.timestamp,
                xid: t.xid,
                gid: PgStr::from(gid),
            }),
            None => PgOutputMessage::Commit(Commit {
                flags: 0,
                commit_lsn: ending.commit_lsn,
                end_lsn: ending.end_lsn,
                commit_timestamp: ending.timestamp,
            }),
        };
        self.emit(sink, ending.end_lsn, &end)
    }

    /// A [`Step::Schema`] where this client gets it: the table's definition from here
    /// on, sent now (with the xid `xid` in a block of `stream`) if the table is
    /// published, and again in every other context before its next change there.
    pub(super) fn schema_step<S>(
        &mut self,
        step: &Step,
        sink: &mut dyn Sink<Stop = S>,
        xid: Option<Xid>,
        stream: Option<Xid>,
    ) -> Result<(), Halt<S>> {
        let Some(oid) = self.schema_changed(step) else {
            return Ok(());
        };
        if self.published.contains(&oid) {
            self.schemas.sent(oid, stream);
            self.send_schema(sink, oid, xid)?;
        }
        Ok(())
    }

    /// The definition a [`Step::Schema`] gives holds from here on, and every context
    /// sends it again before the table's next change; the table's OID.
    fn schema_changed(&mut self, step: &Step) -> Option<Oid> {
        let Step::Schema { types, relation } = step else {
            return None;
        };
        let oid = relation.relation_oid;
        self.schemas.invalidate(oid);
        let mut table = Table::from_relation(relation);
        table.types.clone_from(types);
        // Which of its types are enums does not change with its columns.
        table.enums = self.table(oid).map(|t| t.enums.clone()).unwrap_or_default();
        self.definitions.insert(
            oid,
            Definition {
                types: types.clone(),
                relation: relation.clone(),
                table,
            },
        );
        Some(oid)
    }

    /// A TRUNCATE gives its tables new storage, which invalidates pgoutput's entries for
    /// them: their schema goes out again before their next change, in every context.
    pub(super) fn invalidated_by(&mut self, step: &Step) {
        if let Step::Change {
            message: PgOutputMessage::Truncate(truncate),
            ..
        } = step
        {
            for oid in truncate.relation_oids.iter() {
                self.schemas.invalidate(oid);
            }
        }
    }

    /// The Origin message after Begin or the first Stream Start, at `lsn` (the position
    /// the Begin's frame would have carried).
    pub(super) fn origin<S>(
        &mut self,
        t: &Transaction,
        lsn: Lsn,
        sink: &mut dyn Sink<Stop = S>,
    ) -> Result<(), Halt<S>> {
        match &t.origin {
            Some((name, origin_lsn)) => self.emit(
                sink,
                lsn,
                &PgOutputMessage::Origin(Origin {
                    origin_lsn: *origin_lsn,
                    name: PgStr::from(name.as_str()),
                }),
            ),
            None => Ok(()),
        }
    }

    /// The table's Type messages and Relation, as its latest definition has them.
    pub(super) fn send_schema<S>(
        &mut self,
        sink: &mut dyn Sink<Stop = S>,
        oid: Oid,
        xid: Option<Xid>,
    ) -> Result<(), Halt<S>> {
        let (types, mut relation) = match self.definitions.get(&oid) {
            Some(definition) => (definition.types.clone(), definition.relation.clone()),
            None => match self.catalog.table(oid) {
                Some(table) => (table.types.clone(), table.relation(None)),
                None => return Ok(()),
            },
        };
        // Relation and Type frames carry 0/0: pgoutput writes them as not the last
        // message of the change.
        for mut t in types {
            t.xid = xid;
            self.emit(sink, Lsn(0), &PgOutputMessage::Type(t))?;
        }
        relation.xid = xid;
        self.emit(sink, Lsn(0), &PgOutputMessage::Relation(relation))
    }
}
