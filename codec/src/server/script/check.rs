//! What a script must hold before it is served: every change names a table the server
//! knows (from the script's Relation lines or the configured publications), no tuple is
//! wider than its table, and every `COMMIT` / `ROLLBACK PREPARED` finishes a transaction
//! prepared before it. A script that breaks one is refused when it is loaded, naming its
//! line, instead of being served with the change dropped or failing at every
//! START_REPLICATION.

use std::collections::{HashMap, HashSet};

use super::model::{End, Event, Script, Step};
use super::ScriptError;
use crate::server::catalog::Catalog;
use crate::server::state::Wal;
use crate::{Oid, OldTuple, PgOutputMessage, TupleData};

impl Script {
    /// Checks the script against the tables the server knows.
    pub(crate) fn check(&self, catalog: &Catalog) -> Result<(), ScriptError> {
        self.check_with(catalog, HashSet::new())
    }

    /// Checks events to be appended after what `wal` holds.
    pub(crate) fn check_after(&self, catalog: &Catalog, wal: &Wal) -> Result<(), ScriptError> {
        self.check_with(catalog, wal.prepared_gids())
    }

    fn check_with(
        &self,
        catalog: &Catalog,
        mut prepared: HashSet<String>,
    ) -> Result<(), ScriptError> {
        // The widest definition of each table: a Relation inside a transaction may send a
        // new shape (after ALTER TABLE), so a tuple is checked against the widest.
        let mut widths: HashMap<Oid, usize> = catalog
            .tables
            .iter()
            .map(|t| (t.oid, t.columns.len()))
            .collect();
        for event in &self.events {
            if let Event::Transaction(t) = event {
                for step in &t.steps {
                    if let Step::Change {
                        message: PgOutputMessage::Relation(r),
                        ..
                    } = step
                    {
                        let width = widths.entry(r.relation_oid).or_default();
                        *width = (*width).max(r.columns.len());
                    }
                }
            }
        }
        for (index, event) in self.events.iter().enumerate() {
            match event {
                Event::Transaction(t) => {
                    for (number, step) in t.steps.iter().enumerate() {
                        if let Step::Change { message, .. } = step {
                            change(message, &widths, catalog)
                                .map_err(|m| self.error_at(index, Some(number), m))?;
                        }
                    }
                    if let End::Prepare { gid } = &t.end {
                        prepared.insert(gid.clone());
                    }
                }
                Event::CommitPrepared { gid, .. } | Event::RollbackPrepared { gid, .. } => {
                    if !prepared.remove(gid) {
                        let what = match event {
                            Event::CommitPrepared { .. } => "COMMIT PREPARED",
                            _ => "ROLLBACK PREPARED",
                        };
                        return Err(self.error_at(
                            index,
                            None,
                            format!(
                                "{what} of gid {gid:?}, which no transaction before it prepared"
                            ),
                        ));
                    }
                }
                Event::Message(_) | Event::StreamProgress { .. } => {}
            }
        }
        Ok(())
    }
}

/// A change's tables are known and its tuples fit them.
fn change(
    message: &PgOutputMessage<'_>,
    widths: &HashMap<Oid, usize>,
    catalog: &Catalog,
) -> Result<(), String> {
    let (what, oid, tuples): (&str, Oid, Vec<&TupleData<'_>>) = match message {
        PgOutputMessage::Insert(m) => ("an Insert", m.relation_oid, vec![&m.new_tuple]),
        PgOutputMessage::Update(m) => {
            let mut tuples = vec![&m.new_tuple];
            if let Some(OldTuple::Key(t) | OldTuple::Old(t)) = &m.old_tuple {
                tuples.push(t);
            }
            ("an Update", m.relation_oid, tuples)
        }
        PgOutputMessage::Delete(m) => match &m.old_tuple {
            OldTuple::Key(t) | OldTuple::Old(t) => ("a Delete", m.relation_oid, vec![t]),
        },
        PgOutputMessage::Truncate(m) => {
            for oid in m.relation_oids.iter() {
                known(oid, widths, "a Truncate")?;
            }
            return Ok(());
        }
        _ => return Ok(()),
    };
    let width = known(oid, widths, what)?;
    for tuple in tuples {
        if tuple.columns.len() > width {
            let name = catalog
                .table(oid)
                .map_or_else(|| format!("relation {}", oid.0), |t| t.qualified_name());
            return Err(format!(
                "{what} with {} values, but table {name} has {width} columns",
                tuple.columns.len()
            ));
        }
    }
    Ok(())
}

fn known(oid: Oid, widths: &HashMap<Oid, usize>, what: &str) -> Result<usize, String> {
    widths.get(&oid).copied().ok_or_else(|| {
        format!(
            "{what} of relation {}, which no Relation line or configured table defines (add it to a publication, or with Builder::table)",
            oid.0
        )
    })
}
