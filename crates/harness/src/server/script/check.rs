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
use pgoutput_codec::{Oid, OldTuple, PgOutputMessage, TupleData};

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
                    if let Step::Schema { relation: r, .. }
                    | Step::Change {
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
                Event::Message(_) | Event::StreamProgress { .. } | Event::WalPosition { .. } => {}
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

#[cfg(test)]
mod tests {
    use crate::server::catalog::{Catalog, Publication, Table};
    use crate::server::script::{Clock, Script};
    use pgoutput_codec::Lsn;

    const RELATION: &str = r#"{"type":"relation","relation_oid":16385,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}"#;

    /// What the server says when it loads `lines`: the check, then the clock.
    fn load(lines: &[&str]) -> Result<(), String> {
        let mut script = Script::from_json_lines(&lines.join("\n")).map_err(|e| e.to_string())?;
        let mut catalog = Catalog::new(vec![Publication::all_tables("p")])?;
        for table in &script.tables {
            catalog.add_table(table.clone());
        }
        script.check(&catalog).map_err(|e| e.to_string())?;
        let mut clock = Clock {
            next_lsn: Lsn(0x0100_0000),
            next_xid: 750,
        };
        script.fill(&mut clock).map_err(|e| e.to_string())
    }

    #[test]
    fn what_a_script_cannot_mean_is_refused_naming_its_line() {
        for (lines, expected) in [
            (
                &[RELATION, r#"{"type":"begin"}"#, r#"{"type":"insert","relation_oid":16390,"new_tuple":[{"text":"1"}]}"#, r#"{"type":"commit"}"#][..],
                "script line 3: an Insert of relation 16390, which no Relation line or configured table defines",
            ),
            (
                &[RELATION, r#"{"type":"begin"}"#, r#"{"type":"insert","relation_oid":16385,"new_tuple":[{"text":"1"},{"text":"2"}]}"#, r#"{"type":"commit"}"#],
                "script line 3: an Insert with 2 values, but table public.t has 1 columns",
            ),
            (
                &[r#"{"type":"commit_prepared","gid":"g"}"#],
                "script line 1: COMMIT PREPARED of gid \"g\", which no transaction before it prepared",
            ),
            (
                &[RELATION, r#"{"type":"begin","final_lsn":"0/2000000"}"#, r#"{"type":"commit","commit_lsn":"0/2000000","end_lsn":"0/2000048"}"#, r#"{"type":"begin","final_lsn":"0/1800000"}"#, r#"{"type":"commit","commit_lsn":"0/1800000","end_lsn":"0/1800048"}"#],
                "script line 5: commit LSN 0/1800000 is before the end of the events before it (0/2000048): LSNs go backwards",
            ),
            (
                &[r#"{"type":"begin"}"#, r#"{"type":"commit","commit_lsn":"FFFFFFFF/FFFFFFF0"}"#],
                "script line 2: LSN FFFFFFFF/FFFFFFF0 leaves no room for its record",
            ),
            (
                &[r#"{"type":"message","flags":"non_transactional","lsn":"FFFFFFFF/FFFFFFFF","prefix":"p","content":""}"#],
                "script line 1: LSN FFFFFFFF/FFFFFFFF leaves no room for its record",
            ),
        ] {
            let err = load(lines).unwrap_err();
            assert!(err.starts_with(expected), "{err}\nexpected: {expected}");
        }
    }

    #[test]
    fn a_transactional_message_may_sit_at_its_commit_and_nothing_else_may() {
        let message = |at: &str| {
            format!(
                r#"{{"wal_start":"{at}","type":"message","flags":"transactional","lsn":"{at}","prefix":"p","content":""}}"#
            )
        };
        let insert = |at: &str| {
            format!(
                r#"{{"wal_start":"{at}","type":"insert","relation_oid":16385,"new_tuple":[{{"text":"1"}}]}}"#
            )
        };
        let begin = r#"{"wal_start":"0/2000000","type":"begin","final_lsn":"0/2000100"}"#;
        let commit = r#"{"wal_start":"0/2000148","type":"commit","commit_lsn":"0/2000100","end_lsn":"0/2000148"}"#;
        // As PostgreSQL sends them: a message last in its transaction, and a transaction
        // of one message, each at the commit's position.
        for steps in [
            vec![insert("0/2000010"), message("0/2000100")],
            vec![message("0/2000100")],
        ] {
            let mut lines = vec![RELATION, begin];
            lines.extend(steps.iter().map(String::as_str));
            lines.push(commit);
            assert_eq!(load(&lines), Ok(()), "{lines:?}");
        }
        for (step, expected) in [
            (
                insert("0/2000100"),
                "script line 4: a change at 0/2000100 is not before its transaction's commit at 0/2000100",
            ),
            (
                message("0/2000101"),
                "script line 4: a message at 0/2000101 is after its transaction's commit at 0/2000100",
            ),
        ] {
            let err = load(&[RELATION, begin, &step, commit]).unwrap_err();
            assert!(err.starts_with(expected), "{err}\nexpected: {expected}");
        }
    }

    #[test]
    fn a_script_built_in_rust_is_refused_naming_its_event() {
        let unknown = Table::new(16390, "public", "u").key_column("id", 23);
        let script = Script::new()
            .transaction(crate::server::Transaction::new())
            .transaction(crate::server::Transaction::new().insert(&unknown, ["1"]));
        let err = script.check(&Catalog::default()).unwrap_err();
        assert_eq!(err.line, 0);
        assert!(
            err.to_string()
                .starts_with("script event 2, step 1: an Insert of relation 16390"),
            "{err}"
        );
    }

    #[test]
    fn a_large_transaction_keeps_its_changes_below_its_commit() {
        let mut lines = vec![RELATION.to_owned(), r#"{"type":"begin"}"#.to_owned()];
        for id in 0..100_000 {
            lines.push(format!(
                r#"{{"type":"insert","relation_oid":16385,"new_tuple":[{{"text":"{id}"}}]}}"#
            ));
        }
        // 100,000 records 0x48 apart would pass this commit by 7 MB.
        lines.push(r#"{"type":"commit","commit_lsn":"0/1100000","end_lsn":"0/1100048"}"#.into());
        let mut script = Script::from_json_lines(&lines.join("\n")).unwrap();
        let mut clock = Clock {
            next_lsn: Lsn(0x0100_0000),
            next_xid: 750,
        };
        script.fill(&mut clock).unwrap();
        let crate::server::Event::Transaction(t) = &script.events[0] else {
            panic!()
        };
        let lsns: Vec<Lsn> = t
            .steps
            .iter()
            .map(|s| match s {
                crate::server::Step::Change { lsn, .. } => *lsn,
                _ => panic!(),
            })
            .collect();
        assert!(lsns.windows(2).all(|w| w[0] < w[1]));
        assert!(*lsns.last().unwrap() < Lsn(0x0110_0000));
        assert_eq!(t.commit_lsn, Lsn(0x0110_0000));
    }

    #[test]
    fn configured_tables_are_checked_by_key() {
        let t = Table::new(16385, "public", "t").key_column("id", 23);
        let other = Table::new(16385, "public", "other").key_column("id", 23);
        let err = Catalog::new(vec![
            Publication::new("a").table(t.clone()),
            Publication::new("b").table(other),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            "publications[1].tables[0]: table public.other has OID 16385, which publications[0].tables[0] gives to public.t"
        );
        // The same table in two publications is one table.
        assert!(Catalog::new(vec![
            Publication::new("a").table(t.clone()),
            Publication::new("b").table(t.clone())
        ])
        .is_ok());
        let wide = t.row([Some("1"), Some("2")]);
        assert_eq!(
            Catalog::new(vec![Publication::new("a").table(wide)]).unwrap_err(),
            "publications[0].tables[0].rows[0]: 2 values, but table public.t has 1 columns"
        );
    }
}
