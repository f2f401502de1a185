//! What a scenario commits (and rolls back) on the source: steps as data, turned into SQL
//! on one or more sessions, seeded so that a run repeats exactly.
//!
//! The source's own stream says what was committed (the ledger is read from a slot of
//! its own); the workload keeps only what a stream never shows: the changes it rolled
//! back.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::change::{Change, Op};
use crate::schema::{CODE, ITEMS, MOOD, UNPUBLISHED};
use pgoutput_client::quote_literal;

/// One step of a workload. Outside a `begin` … `commit` on its session, a step that
/// writes is a transaction of its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// New rows (keys never used before), `note_bytes` of text in each (TOASTed past
    /// about 2 kB), one statement per row unless `multi_row`.
    Insert {
        rows: usize,
        #[serde(default)]
        note_bytes: usize,
        #[serde(default)]
        multi_row: bool,
        #[serde(default)]
        session: Session,
    },
    /// Updates the oldest rows no other open transaction holds: a new version, a new
    /// amount (and mood and code, once added); the note unchanged (an unchanged TOASTed value, when it is one).
    Update {
        rows: usize,
        #[serde(default)]
        session: Session,
    },
    /// Deletes the oldest rows no other open transaction holds.
    Delete {
        rows: usize,
        #[serde(default)]
        session: Session,
    },
    /// `TRUNCATE` of the published table.
    Truncate {
        #[serde(default)]
        session: Session,
    },
    /// `ALTER TABLE … ADD COLUMN` on the published table: the enum column `mood` and the
    /// domain column `code`, which the changes after it carry (a Type message each, and
    /// the table's Relation again). Only
    /// the scenarios that add it send a Type: a consumer that cannot take one fails there,
    /// not everywhere.
    AddColumn {
        #[serde(default)]
        session: Session,
    },
    /// Rows in a table outside the publication: the WAL end moves, nothing is sent.
    Unpublished {
        rows: usize,
        #[serde(default)]
        session: Session,
    },
    /// A transactional logical message (`pg_logical_emit_message`).
    Message {
        content: String,
        #[serde(default)]
        session: Session,
    },
    /// Opens a transaction on the session (one a later step commits).
    Begin {
        #[serde(default)]
        session: Session,
    },
    Commit {
        #[serde(default)]
        session: Session,
    },
    /// Rolls the session's transaction back: none of its changes was committed.
    Rollback {
        #[serde(default)]
        session: Session,
    },
    /// A savepoint in the session's open transaction.
    Savepoint {
        #[serde(default)]
        session: Session,
    },
    /// `ROLLBACK TO SAVEPOINT` the last savepoint: the changes since are rolled back (a
    /// subtransaction's abort; a Stream Abort for that subtransaction when streamed).
    RollbackToSavepoint {
        #[serde(default)]
        session: Session,
    },
}

/// A session's name: steps on different sessions run on different connections, so their
/// transactions interleave.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Session(pub String);

impl Default for Session {
    fn default() -> Session {
        Session("main".into())
    }
}

/// SQL for one session, in the order it must run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    pub session: Session,
    pub sql: String,
}

/// A workload turned into SQL, with what it rolled back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub statements: Vec<Statement>,
    pub aborted: Vec<Change>,
    /// The schema changes among the statements, which a sink of tables makes first (as
    /// the operator of a subscriber does).
    pub schema: Vec<String>,
}

/// A small, fast, seeded generator (SplitMix64): the same seed, the same workload.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const MOODS: [&str; 3] = ["calm", "busy", "stuck"];

/// A change made in an open transaction, with what it replaced (to undo it when rolled
/// back).
#[derive(Debug, Clone)]
struct Pending {
    change: Change,
    key: i64,
    before: Option<u64>,
}

/// An open transaction: its changes, and where each savepoint began.
#[derive(Debug, Default)]
struct Open {
    changes: Vec<Pending>,
    savepoints: Vec<usize>,
}

/// Turns steps into SQL, keeping the rows' state from one batch of steps to the next (a
/// scenario's `then` goes on from its workload).
#[derive(Debug)]
pub struct Planner {
    rng: Rng,
    /// The published table's rows: key → version.
    rows: BTreeMap<i64, u64>,
    next_key: i64,
    next_unpublished: i64,
    /// Whether the table has its `mood` and `code` columns (an [`Step::AddColumn`]
    /// added them).
    added: bool,
    open: BTreeMap<Session, Open>,
    plan: Plan,
}

/// The workload's SQL for `steps`, seeded with `seed`.
///
/// # Errors
///
/// As [`Planner::plan`].
pub fn plan(steps: &[Step], seed: u64) -> Result<Plan, String> {
    Planner::new(seed).plan(steps)
}

impl Planner {
    /// A planner for an empty table, seeded with `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Planner {
        Planner {
            rng: Rng::new(seed),
            rows: BTreeMap::new(),
            next_key: 1,
            next_unpublished: 1,
            added: false,
            open: BTreeMap::new(),
            plan: Plan::default(),
        }
    }

    /// The SQL for `steps`, after what was planned before.
    ///
    /// # Errors
    ///
    /// A step the sessions' state does not allow (a commit with no open transaction, a
    /// savepoint outside one, a rollback to no savepoint, a session left open at the end).
    pub fn plan(&mut self, steps: &[Step]) -> Result<Plan, String> {
        for (i, step) in steps.iter().enumerate() {
            self.step(step)
                .map_err(|e| format!("step {} ({step:?}): {e}", i + 1))?;
        }
        if let Some(session) = self.open.keys().next() {
            return Err(format!("session {:?} is left open at the end", session.0));
        }
        Ok(std::mem::take(&mut self.plan))
    }
}

impl Planner {
    fn sql(&mut self, session: &Session, sql: String) {
        self.plan.statements.push(Statement {
            session: session.clone(),
            sql,
        });
    }

    /// Runs `body` inside the session's open transaction, or in one of its own.
    fn write(&mut self, session: &Session, body: impl FnOnce(&mut Planner) -> Vec<String>) {
        let own = !self.open.contains_key(session);
        if own {
            self.open.insert(session.clone(), Open::default());
        }
        let sql = body(self);
        let sql = if own {
            self.open.remove(session);
            format!("BEGIN; {}; COMMIT", sql.join("; "))
        } else {
            sql.join("; ")
        };
        self.sql(session, sql);
    }

    fn record(&mut self, session: &Session, change: Change, key: i64, before: Option<u64>) {
        if let Some(open) = self.open.get_mut(session) {
            open.changes.push(Pending {
                change,
                key,
                before,
            });
        }
    }

    /// Keys held by an open transaction of another session (a write to them would wait
    /// for it).
    fn held(&self, session: &Session) -> BTreeSet<i64> {
        self.open
            .iter()
            .filter(|(s, _)| *s != session)
            .flat_map(|(_, open)| open.changes.iter().map(|p| p.key))
            .collect()
    }

    fn pick(&self, session: &Session, rows: usize) -> Vec<i64> {
        let held = self.held(session);
        self.rows
            .keys()
            .copied()
            .filter(|key| !held.contains(key))
            .take(rows)
            .collect()
    }

    fn step(&mut self, step: &Step) -> Result<(), String> {
        match step {
            Step::Insert {
                rows,
                note_bytes,
                multi_row,
                session,
            } => self.write(session, |p| {
                let values: Vec<String> =
                    (0..*rows).map(|_| p.insert(session, *note_bytes)).collect();
                let into = p.insert_into();
                if *multi_row && !values.is_empty() {
                    vec![format!("{into} VALUES {}", values.join(", "))]
                } else {
                    values
                        .into_iter()
                        .map(|v| format!("{into} VALUES {v}"))
                        .collect()
                }
            }),
            Step::Update { rows, session } => self.write(session, |p| {
                p.pick(session, *rows)
                    .into_iter()
                    .map(|key| p.update(session, key))
                    .collect()
            }),
            Step::Delete { rows, session } => self.write(session, |p| {
                p.pick(session, *rows)
                    .into_iter()
                    .map(|key| {
                        let before = p.rows.remove(&key);
                        let change = Change::new(ITEMS, Op::Delete, [("id", key.to_string())]);
                        p.record(session, change, key, before);
                        format!("DELETE FROM {ITEMS} WHERE id = {key}")
                    })
                    .collect()
            }),
            Step::Truncate { session } => self.write(session, |p| {
                p.rows.clear();
                vec![format!("TRUNCATE {ITEMS}")]
            }),
            Step::AddColumn { session } => {
                let sql = format!(
                    "ALTER TABLE {ITEMS} ADD COLUMN IF NOT EXISTS mood {MOOD} DEFAULT 'calm', \
                     ADD COLUMN IF NOT EXISTS code {CODE} DEFAULT 'new'"
                );
                self.added = true;
                self.plan.schema.push(sql.clone());
                self.write(session, |_| vec![sql])
            }
            Step::Unpublished { rows, session } => self.write(session, |p| {
                (0..*rows)
                    .map(|_| {
                        let key = p.next_unpublished;
                        p.next_unpublished += 1;
                        format!("INSERT INTO {UNPUBLISHED} (id, version) VALUES ({key}, 1)")
                    })
                    .collect()
            }),
            Step::Message { content, session } => self.write(session, |_| {
                vec![format!(
                    "SELECT pg_logical_emit_message(true, 'pgoutput-trial', {})",
                    quote_literal(content)
                )]
            }),
            Step::Begin { session } => {
                if self.open.contains_key(session) {
                    return Err("the session's transaction is open already".into());
                }
                self.open.insert(session.clone(), Open::default());
                self.sql(session, "BEGIN".into());
            }
            Step::Commit { session } => {
                self.open
                    .remove(session)
                    .ok_or("no open transaction to commit")?;
                self.sql(session, "COMMIT".into());
            }
            Step::Rollback { session } => {
                let open = self
                    .open
                    .remove(session)
                    .ok_or("no open transaction to roll back")?;
                self.undo(open.changes);
                self.sql(session, "ROLLBACK".into());
            }
            Step::Savepoint { session } => {
                let open = self
                    .open
                    .get_mut(session)
                    .ok_or("a savepoint outside a transaction")?;
                open.savepoints.push(open.changes.len());
                let name = format!("s{}", open.savepoints.len());
                self.sql(session, format!("SAVEPOINT {name}"));
            }
            Step::RollbackToSavepoint { session } => {
                let open = self
                    .open
                    .get_mut(session)
                    .ok_or("a rollback to savepoint outside a transaction")?;
                let name = format!("s{}", open.savepoints.len());
                let from = open
                    .savepoints
                    .pop()
                    .ok_or("no savepoint to roll back to")?;
                let undone = open.changes.split_off(from);
                self.undo(undone);
                self.sql(session, format!("ROLLBACK TO SAVEPOINT {name}"));
            }
        }
        Ok(())
    }

    /// The VALUES of a new row, recorded.
    fn insert(&mut self, session: &Session, note_bytes: usize) -> String {
        let key = self.next_key;
        self.next_key += 1;
        self.rows.insert(key, 1);
        let mood = MOODS[self.rng.below(3) as usize];
        let amount = format!("{}.{:02}", self.rng.below(100_000), self.rng.below(100));
        let note = if note_bytes > 0 {
            // Random enough not to compress below the TOAST threshold.
            format!(
                "(SELECT string_agg(md5(i::text || '{key}'), '') FROM generate_series(1, {}) i)",
                note_bytes.div_ceil(32)
            )
        } else {
            format!("'note {key}'")
        };
        let change = Change::new(ITEMS, Op::Insert, [("id", key.to_string())]).version(1);
        self.record(session, change, key, None);
        let added = if self.added {
            format!(", '{mood}', '{mood}-{key}'")
        } else {
            String::new()
        };
        format!("({key}, 1, {note}, {amount}, '{{\"key\": {key}, \"tags\": [\"trial\"]}}'{added})")
    }

    /// An UPDATE of `key` to its next version, recorded.
    fn update(&mut self, session: &Session, key: i64) -> String {
        let before = self.rows.get(&key).copied();
        let version = before.unwrap_or(0) + 1;
        self.rows.insert(key, version);
        let mood = MOODS[self.rng.below(3) as usize];
        let amount = format!("{}.{:02}", self.rng.below(100_000), self.rng.below(100));
        let change = Change::new(ITEMS, Op::Update, [("id", key.to_string())]).version(version);
        self.record(session, change, key, before);
        let added = if self.added {
            format!(", mood = '{mood}', code = '{mood}-{key}-{version}'")
        } else {
            String::new()
        };
        format!("UPDATE {ITEMS} SET version = {version}, amount = {amount}{added} WHERE id = {key}")
    }

    /// Changes rolled back: into the ledger's aborted list, the rows as they were.
    fn undo(&mut self, changes: Vec<Pending>) {
        for pending in changes.into_iter().rev() {
            match pending.before {
                Some(version) => self.rows.insert(pending.key, version),
                None => self.rows.remove(&pending.key),
            };
            self.plan.aborted.push(pending.change);
        }
    }
}

impl Planner {
    /// The INSERT's head, with the columns the table has.
    fn insert_into(&self) -> String {
        let added = if self.added { ", mood, code" } else { "" };
        format!("INSERT INTO {ITEMS} (id, version, note, amount, doc{added})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(json: &str) -> Vec<Step> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_same_seed_gives_the_same_sql_and_another_seed_other_values() {
        let workload = steps(r#"[{"do": "insert", "rows": 3}, {"do": "update", "rows": 2}]"#);
        let a = plan(&workload, 7).unwrap();
        assert_eq!(a, plan(&workload, 7).unwrap());
        assert_ne!(a.statements, plan(&workload, 8).unwrap().statements);
        assert_eq!(a.statements.len(), 2);
        assert!(a.statements[0]
            .sql
            .starts_with("BEGIN; INSERT INTO pgoutput_trial_items"));
        assert!(a.statements[1].sql.contains("SET version = 2"));
    }

    #[test]
    fn rolled_back_changes_are_kept_and_their_rows_restored() {
        let workload = steps(
            r#"[{"do": "insert", "rows": 2},
                {"do": "begin"}, {"do": "update", "rows": 1}, {"do": "savepoint"},
                {"do": "insert", "rows": 1}, {"do": "update", "rows": 1},
                {"do": "rollback_to_savepoint"}, {"do": "commit"},
                {"do": "begin"}, {"do": "delete", "rows": 1}, {"do": "rollback"},
                {"do": "update", "rows": 1}]"#,
        );
        let plan = plan(&workload, 1).unwrap();
        let aborted: Vec<String> = plan.aborted.iter().map(ToString::to_string).collect();
        assert_eq!(
            aborted,
            [
                "update pgoutput_trial_items (id=1) version 3",
                "insert pgoutput_trial_items (id=3) version 1",
                "delete pgoutput_trial_items (id=1)",
            ]
        );
        // Row 1 is at version 2 after all that: its next update writes 3.
        assert!(plan
            .statements
            .last()
            .unwrap()
            .sql
            .contains("SET version = 3"));
    }

    #[test]
    fn interleaved_sessions_do_not_touch_each_others_rows() {
        let workload = steps(
            r#"[{"do": "insert", "rows": 2},
                {"do": "begin", "session": "a"}, {"do": "update", "rows": 1, "session": "a"},
                {"do": "update", "rows": 1, "session": "b"}, {"do": "commit", "session": "a"}]"#,
        );
        let plan = plan(&workload, 1).unwrap();
        assert!(plan.statements[2].sql.contains("WHERE id = 1"));
        assert!(plan.statements[3].sql.contains("WHERE id = 2"));
    }

    #[test]
    fn steps_out_of_place_are_refused() {
        assert!(plan(&steps(r#"[{"do": "commit"}]"#), 1).is_err());
        assert!(plan(&steps(r#"[{"do": "savepoint"}]"#), 1).is_err());
        assert!(plan(&steps(r#"[{"do": "begin"}]"#), 1)
            .unwrap_err()
            .contains("left open"));
        assert!(serde_json::from_str::<Vec<Step>>(r#"[{"do": "explode"}]"#).is_err());
    }
}
