//! The workload run on each server, and what the test learns about it through SQL,
//! independently of the replication stream.

use std::collections::HashMap;
use std::io;

use pgoutput_codec::{Lsn, Oid, Xid};
use pgoutput_tests::pg::Server;
use pgoutput_tests::unhex;

pub const SCHEMA: &str = r#"
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE accounts (id int PRIMARY KEY, name text, balance numeric(12, 2), feeling mood, notes text);
ALTER TABLE accounts ALTER COLUMN notes SET STORAGE EXTERNAL;
CREATE TABLE ledger (id int, entry text);
ALTER TABLE ledger REPLICA IDENTITY FULL;
CREATE TABLE codes (id int NOT NULL, code text NOT NULL, label text);
CREATE UNIQUE INDEX codes_code ON codes (code);
ALTER TABLE codes REPLICA IDENTITY USING INDEX codes_code;
CREATE TABLE parent (id int PRIMARY KEY);
CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent (id));
CREATE TABLE counters (id serial PRIMARY KEY, n int);
CREATE TABLE bulk (id int PRIMARY KEY, payload text);
CREATE PUBLICATION pub FOR ALL TABLES;
SELECT pg_replication_origin_create('upstream');
SELECT pg_create_logical_replication_slot('plain', 'pgoutput') IS NOT NULL;
SELECT pg_create_logical_replication_slot('two_phase', 'pgoutput', false, true) IS NOT NULL;
SELECT pg_create_logical_replication_slot('walsender', 'pgoutput') IS NOT NULL;
SELECT pg_create_logical_replication_slot('consumer_busy', 'pgoutput') IS NOT NULL;
SELECT pg_create_logical_replication_slot('consumer_resume', 'pgoutput') IS NOT NULL;
SELECT pg_create_logical_replication_slot('consumer_async', 'pgoutput') IS NOT NULL;
SELECT pg_create_logical_replication_slot('consumer_whole', 'pgoutput', false, true) IS NOT NULL;
SELECT pg_create_logical_replication_slot('consumer_whole_async', 'pgoutput', false, true) IS NOT NULL;
CREATE ROLE tailer LOGIN REPLICATION PASSWORD 'tailer-secret';
SET password_encryption = 'md5';
CREATE ROLE md5_tailer LOGIN REPLICATION PASSWORD 'md5-secret';
RESET password_encryption;
CREATE ROLE password_tailer LOGIN REPLICATION PASSWORD 'plain-secret';
SELECT pg_create_logical_replication_slot('tail_' || v || '_' || mode, 'pgoutput') IS NOT NULL
  FROM (VALUES (1, 'off'), (2, 'off'), (2, 'on'), (3, 'off'), (3, 'on'),
               (4, 'off'), (4, 'on'), (4, 'parallel')) AS sets (v, mode);
"#;

/// The role `pgoutput tail` logs in as, with SCRAM-SHA-256.
pub const TAIL_USER: (&str, &str) = ("tailer", "tailer-secret");
/// A role that authenticates with MD5.
pub const MD5_USER: (&str, &str) = ("md5_tailer", "md5-secret");
/// A role that authenticates with a cleartext password.
pub const PASSWORD_USER: (&str, &str) = ("password_tailer", "plain-secret");

/// The columns of `accounts` as the RETURNING clauses print them: text output, then send
/// output as hex, for each column in order.
const ACCOUNTS_RETURNING: &str = "RETURNING 'row', id::text, name, balance::text, feeling::text, \
     notes, encode(int4send(id), 'hex'), encode(textsend(name), 'hex'), \
     encode(numeric_send(balance), 'hex'), encode(enum_send(feeling), 'hex'), \
     encode(textsend(notes), 'hex')";

/// The transactions, each run by its own `psql`. Lines starting `xid|`, `lsn|` and `row|`
/// in their output are facts the checks use.
pub fn workload() -> Vec<(&'static str, String)> {
    let big = |from: u32, to: u32, fill: char| {
        format!("INSERT INTO bulk SELECT g, repeat('{fill}', 100) FROM generate_series({from}, {to}) g;")
    };
    vec![
        ("insert", format!(
            "BEGIN; SELECT 'xid', pg_current_xact_id();
             INSERT INTO accounts VALUES (1, 'alice', 10.50, 'happy', repeat('x', 10000)),
                                         (2, 'bøb', NULL, 'sad', 'short') {ACCOUNTS_RETURNING};
             COMMIT;")),
        ("update_toast", format!(
            "BEGIN; SELECT 'xid', pg_current_xact_id();
             UPDATE accounts SET name = 'alice two' WHERE id = 1 {ACCOUNTS_RETURNING};
             COMMIT;")),
        ("update_key", format!(
            "BEGIN; SELECT 'xid', pg_current_xact_id();
             UPDATE accounts SET id = 3 WHERE id = 2 {ACCOUNTS_RETURNING};
             COMMIT;")),
        ("full_identity", "BEGIN; SELECT 'xid', pg_current_xact_id();
             INSERT INTO ledger VALUES (1, 'first');
             UPDATE ledger SET entry = 'second';
             DELETE FROM ledger;
             COMMIT;".into()),
        ("index_identity", "BEGIN; SELECT 'xid', pg_current_xact_id();
             INSERT INTO codes VALUES (1, 'c1', 'label');
             UPDATE codes SET code = 'c2';
             UPDATE codes SET label = 'relabelled';
             COMMIT;".into()),
        ("delete", "BEGIN; SELECT 'xid', pg_current_xact_id();
             DELETE FROM accounts WHERE id = 3;
             COMMIT;".into()),
        ("truncate", "INSERT INTO parent VALUES (1); INSERT INTO child VALUES (1, 1);
             INSERT INTO counters (n) VALUES (0);
             BEGIN; SELECT 'xid', pg_current_xact_id();
             TRUNCATE parent CASCADE;
             TRUNCATE counters RESTART IDENTITY;
             COMMIT;".into()),
        ("messages", "SELECT 'lsn', 'nontx', pg_logical_emit_message(false, 'nontx', 'hello'::bytea);
             BEGIN; SELECT 'xid', pg_current_xact_id();
             SELECT 'lsn', 'tx', pg_logical_emit_message(true, 'tx', '\\x00ff00'::bytea);
             INSERT INTO counters (n) VALUES (1);
             COMMIT;".into()),
        ("origin", "SELECT pg_replication_origin_session_setup('upstream') IS NULL;
             BEGIN; SELECT 'xid', pg_current_xact_id();
             SELECT pg_replication_origin_xact_setup('0/ABCDEF0', '2024-01-02 03:04:05+00') IS NULL;
             INSERT INTO counters (n) VALUES (2);
             COMMIT;
             SELECT pg_replication_origin_session_reset() IS NULL;".into()),
        ("streamed_commit", format!(
            "BEGIN; SELECT 'xid', pg_current_xact_id();
             {}
             SELECT 'lsn', 'streamed', pg_logical_emit_message(true, 'streamed', 'inside');
             SELECT 'lsn', 'nontx_in_stream', pg_logical_emit_message(false, 'nontx_in_stream', 'between');
             SAVEPOINT s1;
             {}
             ROLLBACK TO SAVEPOINT s1;
             INSERT INTO bulk VALUES (5000, 'after');
             COMMIT;", big(1, 2000, 'p'), big(2001, 4000, 'q'))),
        ("streamed_rollback", format!(
            "BEGIN; SELECT 'xid', pg_current_xact_id(); {} ROLLBACK;", big(10_001, 12_000, 'r'))),
        ("prepare_commit", "BEGIN; SELECT 'xid', pg_current_xact_id();
             INSERT INTO counters (n) VALUES (3);
             PREPARE TRANSACTION 'gid_commit';
             COMMIT PREPARED 'gid_commit';".into()),
        ("prepare_rollback", "BEGIN; SELECT 'xid', pg_current_xact_id();
             INSERT INTO counters (n) VALUES (4);
             PREPARE TRANSACTION 'gid_rollback';
             ROLLBACK PREPARED 'gid_rollback';".into()),
        ("streamed_prepare", format!(
            "BEGIN; SELECT 'xid', pg_current_xact_id(); {}
             PREPARE TRANSACTION 'gid_stream';
             COMMIT PREPARED 'gid_stream';", big(20_001, 22_000, 's'))),
    ]
}

/// A column value as PostgreSQL prints it: text output and send output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    pub text: Option<Vec<u8>>,
    pub binary: Option<Vec<u8>>,
}

/// A relation's published columns from the catalogs.
#[derive(Debug, Clone)]
pub struct CatalogColumn {
    pub name: String,
    pub type_oid: Oid,
    pub type_modifier: i32,
    pub is_key: bool,
}

/// What the test knows about the workload without looking at the replication stream.
#[derive(Debug, Default)]
pub struct Facts {
    /// Transaction ids by workload step.
    pub xids: HashMap<&'static str, Xid>,
    /// `pg_logical_emit_message()` results by prefix.
    pub message_lsns: HashMap<String, Lsn>,
    /// `accounts` rows by step, as RETURNING printed them.
    pub account_rows: HashMap<&'static str, Vec<Vec<Value>>>,
    /// Relation OIDs by name.
    pub relations: HashMap<String, Oid>,
    /// Published columns by relation name.
    pub columns: HashMap<String, Vec<CatalogColumn>>,
    /// The OID of the enum type `mood`.
    pub mood_oid: Oid,
}

/// Creates the schema, publication, slots and roles.
pub fn setup(server: &Server) -> io::Result<()> {
    server.psql(SCHEMA).map(drop)
}

/// Runs the workload, learning the facts.
pub fn run(server: &Server) -> io::Result<Facts> {
    let mut facts = Facts::default();
    for (step, sql) in workload() {
        let out = server.psql(&format!("\\pset null '\\\\N'\n{sql}"))?;
        for line in out.lines() {
            let fields: Vec<&str> = line.split('|').collect();
            match fields.as_slice() {
                ["xid", xid] => {
                    facts
                        .xids
                        .insert(step, Xid(xid.parse().map_err(io::Error::other)?));
                }
                ["lsn", prefix, lsn] => {
                    facts
                        .message_lsns
                        .insert((*prefix).to_owned(), lsn.parse().map_err(io::Error::other)?);
                }
                ["row", rest @ ..] if rest.len() == 10 => {
                    let value = |i: usize| {
                        let text = (rest[i] != "\\N").then(|| rest[i].as_bytes().to_vec());
                        let binary = (rest[i + 5] != "\\N").then(|| unhex(rest[i + 5]));
                        Value { text, binary }
                    };
                    facts
                        .account_rows
                        .entry(step)
                        .or_default()
                        .push((0..5).map(value).collect());
                }
                _ => {}
            }
        }
    }
    for line in server
        .psql("SELECT relname, oid FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r';")?
        .lines()
    {
        if let Some((name, oid)) = line.split_once('|') {
            facts.relations.insert(name.to_owned(), Oid(oid.parse().map_err(io::Error::other)?));
        }
    }
    // Published columns with their key flag: replica identity FULL marks all, INDEX and
    // DEFAULT the columns of the identity index (the primary key for DEFAULT).
    let columns = server.psql(
        "SELECT c.relname, a.attname, a.atttypid, a.atttypmod,
                c.relreplident = 'f' OR EXISTS (
                    SELECT 1 FROM pg_index i
                    WHERE i.indrelid = c.oid AND a.attnum = ANY (i.indkey)
                      AND ((c.relreplident = 'd' AND i.indisprimary)
                        OR (c.relreplident = 'i' AND i.indisreplident)))
         FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'
           AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY c.relname, a.attnum;",
    )?;
    for line in columns.lines() {
        let fields: Vec<&str> = line.split('|').collect();
        if let [relation, name, type_oid, type_modifier, is_key] = fields.as_slice() {
            facts
                .columns
                .entry((*relation).to_owned())
                .or_default()
                .push(CatalogColumn {
                    name: (*name).to_owned(),
                    type_oid: Oid(type_oid.parse().map_err(io::Error::other)?),
                    type_modifier: type_modifier.parse().map_err(io::Error::other)?,
                    is_key: *is_key == "t",
                });
        }
    }
    facts.mood_oid = Oid(server
        .query_one("SELECT 'mood'::regtype::oid;")?
        .parse()
        .map_err(io::Error::other)?);
    Ok(facts)
}
