//! What must hold for every message a server sends: it decodes with the session decoder,
//! re-encodes to the server's bytes, and its fields agree with the facts learned via SQL.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use pgoutput_client::{Bytes, ConnInfo, Connection, CopyEvent};
use pgoutput_codec::message::{
    Begin, BeginPrepare, ColumnValue, Commit, Delete, Message, OldTuple, Origin, Prepare, Relation,
    ReplicaIdentity, StreamAbort, Truncate, TupleData, Update,
};
use pgoutput_codec::{
    decode, encode, Ctx, Decoder, Encoder, IntoOwned, Lsn, Oid, PgOutputMessage, PgTimestamp,
    ProtocolVersion, ServerMessage, StandbyStatusUpdate, Streaming, Tagged, Xid,
};
use pgoutput_tests::hex;
use pgoutput_tests::pg::Server;

use crate::scenario::{Facts, Value};
use crate::{peek, Options, Row};

/// Fails with `message` unless `condition` holds.
fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition {
        Ok(())
    } else {
        Err(message())
    }
}

/// The tags seen over all reads of one server.
#[derive(Debug, Default)]
pub struct Coverage {
    tags: BTreeSet<u8>,
}

impl Coverage {
    pub fn complete(&self) -> Result<String, String> {
        let missing: Vec<char> = PgOutputMessage::TAGS
            .iter()
            .filter(|tag| !self.tags.contains(tag))
            .map(char::from)
            .collect();
        ensure(missing.is_empty(), || format!("never sent: {missing:?}"))?;
        Ok(format!("{} tags", self.tags.len()))
    }
}

/// The slot reported `lsn` (a transaction's end) as the position of this row.
fn reported_at(row: &Row, lsn: Lsn, what: &str) -> Result<(), String> {
    ensure(row.lsn == lsn, || {
        format!("slot reported {} for {what} {lsn}", row.lsn)
    })
}

/// The workload step a GID belongs to.
fn step_of_gid(gid: &[u8]) -> Option<&'static str> {
    match gid {
        b"gid_commit" => Some("prepare_commit"),
        b"gid_rollback" => Some("prepare_rollback"),
        b"gid_stream" => Some("streamed_prepare"),
        _ => None,
    }
}

/// The origin's commit time set by `pg_replication_origin_xact_setup` in the workload.
fn origin_commit_time() -> PgTimestamp {
    PgTimestamp::from_unix_micros(1_704_164_645_000_000).expect("in range")
}

/// State carried from message to message while reading one stream.
#[derive(Default)]
struct Reading {
    last_begin: Option<Begin>,
    last_begin_prepare: Option<BeginPrepare<'static>>,
    previous_tag: u8,
    relations: HashMap<Oid, String>,
    seen_xids: HashSet<Xid>,
    values_checked: usize,
    aborts: usize,
}

pub fn check_stream(
    facts: &Facts,
    options: &Options,
    rows: &[Row],
    coverage: &mut Coverage,
) -> Result<String, String> {
    let mut decoder =
        Decoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
    let mut encoder =
        Encoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
    let mut reading = Reading::default();
    for (i, row) in rows.iter().enumerate() {
        let message = decoder
            .decode(&row.data)
            .map_err(|e| format!("row {i} ({}): {e}", hex(&row.data)))?;
        let again = encoder
            .encode(&message)
            .map_err(|e| format!("row {i} {message:?}: re-encoding failed: {e}"))?;
        ensure(again == row.data, || {
            format!(
                "row {i}: re-encoded\n{}\nbut the server sent\n{}",
                hex(&again),
                hex(&row.data)
            )
        })?;
        coverage.tags.insert(message.tag());
        // The JSON form is exact on real messages too: bytes -> JSON -> bytes.
        let json = serde_json::to_string(&message).map_err(|e| e.to_string())?;
        let from_json: PgOutputMessage<'_> =
            serde_json::from_str(&json).map_err(|e| format!("row {i} {json}: {e}"))?;
        ensure(from_json == message, || {
            format!("row {i}: JSON round trip changed {json}")
        })?;
        reading
            .check(facts, options, row, &message)
            .map_err(|e| format!("row {i} {message:?}: {e}"))?;
        reading.previous_tag = message.tag();
    }
    reading.finish(facts, options)?;
    let mut summary = format!(
        "{} messages, {} values checked",
        rows.len(),
        reading.values_checked
    );
    if std::env::var_os("PGOUTPUT_LIVE_VERBOSE").is_some() {
        // Which messages this option set brought, for docs/postgres-behaviour.md.
        let mut counts: std::collections::BTreeMap<char, usize> = Default::default();
        for row in rows {
            *counts.entry(char::from(row.data[0])).or_default() += 1;
        }
        summary.push_str(&format!("; tags {counts:?}"));
    }
    Ok(summary)
}

impl Reading {
    /// One message against what the workload did: each kind in a method of its own.
    fn check(
        &mut self,
        facts: &Facts,
        options: &Options,
        row: &Row,
        message: &PgOutputMessage<'_>,
    ) -> Result<(), String> {
        match message {
            PgOutputMessage::Begin(begin) => {
                self.seen_xids.insert(begin.xid);
                ensure(begin.final_lsn.is_valid(), || "final_lsn is 0".into())?;
                self.last_begin = Some(*begin);
            }
            PgOutputMessage::Commit(commit) => self.check_commit(commit, row)?,
            PgOutputMessage::Origin(origin) => self.check_origin(origin)?,
            PgOutputMessage::Relation(relation) => self.check_relation(relation, facts)?,
            PgOutputMessage::Type(ty) => {
                ensure(ty.type_oid == facts.mood_oid, || {
                    format!("type OID {} != {}", ty.type_oid, facts.mood_oid)
                })?;
                ensure(ty.name == "mood" && ty.namespace == "public", || {
                    format!("type {}.{}", ty.namespace, ty.name)
                })?;
                self.check_xid(facts, ty.xid)?;
            }
            PgOutputMessage::Message(m) => self.check_message(m, facts)?,
            PgOutputMessage::Insert(insert) => {
                self.check_xid(facts, insert.xid)?;
                if self.relation_name(insert.relation_oid)? == "accounts" {
                    let id = id_of(&insert.new_tuple)?;
                    let expected = row_with_id(facts, "insert", id)?;
                    self.check_tuple(&insert.new_tuple, &expected, options, &[])?;
                }
            }
            PgOutputMessage::Update(update) => self.check_update(update, facts, options)?,
            PgOutputMessage::Delete(delete) => self.check_delete(delete, facts, options)?,
            PgOutputMessage::Truncate(truncate) => {
                self.check_xid(facts, truncate.xid)?;
                self.check_truncate(truncate)?;
            }
            PgOutputMessage::StreamStart(start) => {
                ensure(start.xid.is_valid(), || "xid 0".into())?;
                self.seen_xids.insert(start.xid);
            }
            PgOutputMessage::StreamStop(_) => {}
            PgOutputMessage::StreamCommit(commit) => {
                ensure(self.seen_xids.contains(&commit.xid), || {
                    format!("commit of unseen xid {}", commit.xid)
                })?;
                reported_at(row, commit.end_lsn, "end_lsn")?;
            }
            PgOutputMessage::StreamAbort(abort) => {
                self.check_stream_abort(abort, facts, options)?
            }
            PgOutputMessage::BeginPrepare(begin) => {
                self.check_gid(facts, begin.gid.as_bytes(), begin.xid)?;
                self.seen_xids.insert(begin.xid);
                self.last_begin_prepare = Some(begin.clone().into_owned());
            }
            PgOutputMessage::Prepare(prepare) => self.check_prepare(prepare, facts, row)?,
            PgOutputMessage::CommitPrepared(commit) => {
                self.check_gid(facts, commit.gid.as_bytes(), commit.xid)?;
                reported_at(row, commit.end_lsn, "end_lsn")?;
            }
            PgOutputMessage::RollbackPrepared(rollback) => {
                self.check_gid(facts, rollback.gid.as_bytes(), rollback.xid)?;
                reported_at(row, rollback.rollback_end_lsn, "rollback_end_lsn")?;
            }
            PgOutputMessage::StreamPrepare(prepare) => {
                self.check_gid(facts, prepare.gid.as_bytes(), prepare.xid)?;
                reported_at(row, prepare.end_lsn, "end_lsn")?;
            }
            other => {
                return Err(format!(
                    "a message type this check does not know: {other:?}"
                ))
            }
        }
        Ok(())
    }

    /// Commit: the end of the Begin before it, at the position the slot reported.
    fn check_commit(&mut self, commit: &Commit, row: &Row) -> Result<(), String> {
        let begin = self.last_begin.take().ok_or("Commit without Begin")?;
        ensure(commit.commit_lsn == begin.final_lsn, || {
            format!(
                "commit_lsn {} != Begin.final_lsn {}",
                commit.commit_lsn, begin.final_lsn
            )
        })?;
        ensure(commit.commit_timestamp == begin.commit_timestamp, || {
            "commit time differs from Begin's".into()
        })?;
        reported_at(row, commit.end_lsn, "end_lsn")?;
        Ok(())
    }

    /// Origin: the upstream origin, right after Begin or Stream Start.
    fn check_origin(&mut self, origin: &Origin<'_>) -> Result<(), String> {
        ensure(origin.name == "upstream", || {
            format!("origin name {}", origin.name)
        })?;
        match self.previous_tag {
            b'B' => {
                ensure(
                    origin.origin_lsn == "0/ABCDEF0".parse::<Lsn>().unwrap(),
                    || format!("origin_lsn {}", origin.origin_lsn),
                )?;
                let begin = self.last_begin.ok_or("Origin without Begin")?;
                ensure(begin.commit_timestamp == origin_commit_time(), || {
                    format!(
                        "Begin of an origin transaction has commit time {}",
                        begin.commit_timestamp
                    )
                })?;
            }
            b'S' => ensure(origin.origin_lsn == Lsn(0), || {
                "origin_lsn after Stream Start must be 0".into()
            })?,
            other => return Err(format!("Origin after {:?}", char::from(other))),
        }
        Ok(())
    }

    /// Relation: the table as the catalog describes it.
    fn check_relation(&mut self, relation: &Relation<'_>, facts: &Facts) -> Result<(), String> {
        let name = relation.relation_name.to_string();
        let oid = facts
            .relations
            .get(&name)
            .ok_or_else(|| format!("unknown relation {name}"))?;
        ensure(relation.relation_oid == *oid, || {
            format!("relation OID {} != {oid}", relation.relation_oid)
        })?;
        ensure(relation.namespace == "public", || {
            format!("namespace {}", relation.namespace)
        })?;
        let identity = match name.as_str() {
            "ledger" => ReplicaIdentity::Full,
            "codes" => ReplicaIdentity::Index,
            _ => ReplicaIdentity::Default,
        };
        ensure(relation.replica_identity == identity, || {
            format!("replica identity {:?}", relation.replica_identity)
        })?;
        let columns = &facts.columns[&name];
        ensure(relation.columns.len() == columns.len(), || {
            format!("{} columns", relation.columns.len())
        })?;
        for (got, want) in relation.columns.iter().zip(columns) {
            ensure(got.name == want.name.as_str(), || {
                format!("column {} != {}", got.name, want.name)
            })?;
            ensure(got.type_oid == want.type_oid, || {
                format!("{}: type {} != {}", want.name, got.type_oid, want.type_oid)
            })?;
            ensure(got.type_modifier == want.type_modifier, || {
                format!("{}: typmod {}", want.name, got.type_modifier)
            })?;
            ensure(got.is_key() == want.is_key, || {
                format!("{}: key flag {}", want.name, got.flags)
            })?;
        }
        self.check_xid(facts, relation.xid)?;
        self.relations.insert(*oid, name);
        Ok(())
    }

    /// Message: what pg_logical_emit_message was given, at the LSN it returned.
    fn check_message(&mut self, m: &Message<'_>, facts: &Facts) -> Result<(), String> {
        let prefix = m.prefix.to_string();
        let lsn = facts
            .message_lsns
            .get(&prefix)
            .ok_or_else(|| format!("unknown prefix {prefix}"))?;
        ensure(m.lsn == *lsn, || {
            format!("lsn {} but pg_logical_emit_message returned {lsn}", m.lsn)
        })?;
        let (content, transactional): (&[u8], bool) = match prefix.as_str() {
            "nontx" => (b"hello", false),
            "nontx_in_stream" => (b"between", false),
            "tx" => (b"\x00\xff\x00", true),
            _ => (b"inside", true),
        };
        ensure(m.content == *content, || format!("content {:?}", m.content))?;
        ensure(m.is_transactional() == transactional, || {
            "transactional flag".into()
        })?;
        if let Some(xid) = m.xid {
            // Inside a stream block a Message carries the top-level xid.
            ensure(self.seen_xids.contains(&xid), || {
                format!("xid {xid} of no streamed transaction")
            })?;
        }
        Ok(())
    }

    /// Update: new rows and old keys per table and replica identity.
    fn check_update(
        &mut self,
        update: &Update<'_>,
        facts: &Facts,
        options: &Options,
    ) -> Result<(), String> {
        self.check_xid(facts, update.xid)?;
        match (
            self.relation_name(update.relation_oid)?.as_str(),
            &update.old_tuple,
        ) {
            ("accounts", None) => {
                // Only the name changed: the TOASTed notes are not sent.
                let expected = row_with_id(facts, "update_toast", id_of(&update.new_tuple)?)?;
                self.check_tuple(&update.new_tuple, &expected, options, &[4])?;
            }
            ("accounts", Some(OldTuple::Key(key))) => {
                let old = row_with_id(facts, "insert", id_of(key)?)?;
                self.check_key(key, &old, options, &[0])?;
                let new = row_with_id(facts, "update_key", id_of(&update.new_tuple)?)?;
                self.check_tuple(&update.new_tuple, &new, options, &[])?;
            }
            ("ledger", old) => ensure(
                matches!(old, Some(OldTuple::Old(t)) if t.columns.len() == 2),
                || "REPLICA IDENTITY FULL must send the whole old row ('O')".into(),
            )?,
            ("codes", Some(OldTuple::Key(key))) => {
                let columns = key.columns.to_vec();
                ensure(
                    columns.len() == 3
                        && matches!(columns[0], ColumnValue::Null)
                        && columns[1].bytes().is_some()
                        && matches!(columns[2], ColumnValue::Null),
                    || format!("index identity key tuple {key:?}"),
                )?
            }
            ("codes", None) => {}
            (name, old) => return Err(format!("unexpected update of {name} with {old:?}")),
        }
        Ok(())
    }

    /// Delete: the old key (or whole old row for REPLICA IDENTITY FULL).
    fn check_delete(
        &mut self,
        delete: &Delete<'_>,
        facts: &Facts,
        options: &Options,
    ) -> Result<(), String> {
        self.check_xid(facts, delete.xid)?;
        match (
            self.relation_name(delete.relation_oid)?.as_str(),
            &delete.old_tuple,
        ) {
            ("accounts", OldTuple::Key(key)) => {
                let old = row_with_id(facts, "update_key", id_of(key)?)?;
                self.check_key(key, &old, options, &[0])?;
            }
            ("ledger", OldTuple::Old(_)) => {}
            (name, old) => return Err(format!("unexpected delete of {name} with {old:?}")),
        }
        Ok(())
    }

    /// Truncate: the tables truncated together, with their options.
    fn check_truncate(&mut self, truncate: &Truncate<'_>) -> Result<(), String> {
        let mut names: Vec<String> = truncate
            .relation_oids
            .iter()
            .map(|oid| self.relation_name(oid))
            .collect::<Result<_, _>>()?;
        names.sort();
        let options_ok = match names
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice()
        {
            ["child", "parent"] => {
                truncate.options.cascade() && !truncate.options.restart_identity()
            }
            ["counters"] => truncate.options.restart_identity() && !truncate.options.cascade(),
            _ => false,
        };
        ensure(options_ok, || {
            format!("truncate of {names:?} with {:?}", truncate.options)
        })?;
        Ok(())
    }

    /// Stream Abort: which rollback it is, with abort LSN and time only when parallel.
    fn check_stream_abort(
        &mut self,
        abort: &StreamAbort,
        facts: &Facts,
        options: &Options,
    ) -> Result<(), String> {
        self.aborts += 1;
        // A subtransaction abort is the ROLLBACK TO SAVEPOINT of the streamed commit. A
        // top-level one is the streamed rollback, or (PostgreSQL 16+, which streams
        // even small transactions here) a prepared transaction that a slot without
        // two-phase streamed at PREPARE and that ROLLBACK PREPARED then aborted.
        let steps: &[&str] = match (abort.is_top_level(), options.two_phase) {
            (false, _) => &["streamed_commit"],
            (true, true) => &["streamed_rollback"],
            (true, false) => &["streamed_rollback", "prepare_rollback"],
        };
        let step = steps
            .iter()
            .find(|step| facts.xids.get(**step) == Some(&abort.xid));
        ensure(step.is_some(), || {
            format!(
                "abort of xid {}, expected one of {steps:?}: {:?}",
                abort.xid, facts.xids
            )
        })?;
        let parallel =
            options.streaming == Streaming::Parallel && options.version >= ProtocolVersion::V4;
        ensure(abort.abort_lsn.is_some() == parallel, || {
            "abort_lsn presence".into()
        })?;
        if let (Some(lsn), Some(time)) = (abort.abort_lsn, abort.abort_timestamp) {
            ensure(lsn.is_valid() && time.0 > 0, || {
                format!("abort at {lsn}, {time}")
            })?;
        }
        Ok(())
    }

    /// Prepare: the end of its Begin Prepare.
    fn check_prepare(
        &mut self,
        prepare: &Prepare<'_>,
        facts: &Facts,
        row: &Row,
    ) -> Result<(), String> {
        self.check_gid(facts, prepare.gid.as_bytes(), prepare.xid)?;
        let begin = self
            .last_begin_prepare
            .take()
            .ok_or("Prepare without Begin Prepare")?;
        ensure(
            prepare.prepare_lsn == begin.prepare_lsn && prepare.gid == begin.gid,
            || "Prepare differs from its Begin Prepare".into(),
        )?;
        reported_at(row, prepare.end_lsn, "end_lsn")?;
        Ok(())
    }

    fn relation_name(&self, oid: Oid) -> Result<String, String> {
        self.relations
            .get(&oid)
            .cloned()
            .ok_or_else(|| format!("relation {oid} before its Relation message"))
    }

    /// A change's xid: present exactly inside stream blocks (the decoder saw to that), and
    /// then a transaction of the workload or one of its subtransactions.
    fn check_xid(&self, facts: &Facts, xid: Option<Xid>) -> Result<(), String> {
        if let Some(xid) = xid {
            let known = self.seen_xids.contains(&xid)
                || facts.xids.values().any(|x| x.0 < xid.0 && xid.0 < x.0 + 10);
            ensure(known, || {
                format!("xid {xid} belongs to no streamed transaction")
            })?;
        }
        Ok(())
    }

    fn check_gid(&self, facts: &Facts, gid: &[u8], xid: Xid) -> Result<(), String> {
        let step = step_of_gid(gid)
            .ok_or_else(|| format!("unknown gid {:?}", String::from_utf8_lossy(gid)))?;
        ensure(facts.xids.get(step) == Some(&xid), || {
            format!("xid {xid} for {step}")
        })
    }

    /// Compares a tuple with the values RETURNING printed: text values with the type's
    /// output function, binary values with its send function. `unchanged` columns must be
    /// `'u'`.
    fn check_tuple(
        &mut self,
        tuple: &TupleData<'_>,
        expected: &[Value],
        options: &Options,
        unchanged: &[usize],
    ) -> Result<(), String> {
        ensure(tuple.columns.len() == expected.len(), || {
            format!("{} columns", tuple.columns.len())
        })?;
        for (i, (column, want)) in tuple.columns.iter().zip(expected).enumerate() {
            match column {
                ColumnValue::UnchangedToast => ensure(unchanged.contains(&i), || {
                    format!("column {i} sent as unchanged TOAST")
                })?,
                _ if unchanged.contains(&i) => {
                    return Err(format!(
                        "column {i} should be unchanged TOAST, got {column:?}"
                    ))
                }
                ColumnValue::Null => ensure(want.text.is_none(), || format!("column {i} is NULL"))?,
                ColumnValue::Text(bytes) => {
                    // Every column type here has a send function: binary mode sends 'b'.
                    ensure(!options.binary, || {
                        format!("column {i} sent as text in binary mode")
                    })?;
                    ensure(Some(bytes.as_bytes()) == want.text.as_deref(), || {
                        format!("column {i}: {bytes:?} != {want:?}")
                    })?;
                }
                ColumnValue::Binary(bytes) => {
                    ensure(options.binary, || {
                        format!("column {i} sent as binary in text mode")
                    })?;
                    ensure(Some(bytes.as_bytes()) == want.binary.as_deref(), || {
                        format!("column {i}: {bytes:?} != {want:?}")
                    })?;
                }
            }
            self.values_checked += 1;
        }
        Ok(())
    }

    /// A `'K'` tuple: the key columns' values, NULL for the others.
    fn check_key(
        &mut self,
        key: &TupleData<'_>,
        row: &[Value],
        options: &Options,
        key_columns: &[usize],
    ) -> Result<(), String> {
        let expected: Vec<Value> = row
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if key_columns.contains(&i) {
                    v.clone()
                } else {
                    Value {
                        text: None,
                        binary: None,
                    }
                }
            })
            .collect();
        self.check_tuple(key, &expected, options, &[])
    }

    fn finish(&self, facts: &Facts, options: &Options) -> Result<(), String> {
        let mut required: Vec<&str> = vec![
            "insert",
            "update_toast",
            "update_key",
            "full_identity",
            "index_identity",
            "delete",
            "truncate",
            "messages",
            "origin",
            "streamed_commit",
            "prepare_commit",
            "streamed_prepare",
        ];
        if options.two_phase {
            required.push("prepare_rollback");
        }
        if options.streaming != Streaming::Off {
            required.push("streamed_rollback");
        }
        for step in required {
            let xid = facts.xids[step];
            ensure(self.seen_xids.contains(&xid), || {
                format!("transaction {step} (xid {xid}) was never sent")
            })?;
        }
        ensure(self.values_checked >= 20, || {
            format!("only {} column values checked", self.values_checked)
        })?;
        if options.streaming != Streaming::Off {
            ensure(self.aborts >= 2, || {
                "expected a subtransaction and a top-level Stream Abort".into()
            })?;
        }
        Ok(())
    }
}

/// The `id` column (the first) of an `accounts` tuple, whether text or binary.
fn id_of(tuple: &TupleData<'_>) -> Result<i32, String> {
    match tuple.columns.get(0) {
        Some(ColumnValue::Text(bytes)) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.parse().ok()),
        Some(ColumnValue::Binary(bytes)) => <[u8; 4]>::try_from(bytes.as_bytes())
            .ok()
            .map(i32::from_be_bytes),
        _ => None,
    }
    .ok_or_else(|| format!("no id in {tuple:?}"))
}

fn row_with_id(facts: &Facts, step: &str, id: i32) -> Result<Vec<Value>, String> {
    let id = id.to_string().into_bytes();
    facts
        .account_rows
        .get(step)
        .and_then(|rows| {
            rows.iter()
                .find(|row| row[0].text.as_deref() == Some(&id[..]))
        })
        .cloned()
        .ok_or_else(|| format!("no {step} row with id {}", String::from_utf8_lossy(&id)))
}

/// Reads the `walsender` slot through a real walsender connection: every XLogData payload
/// equals what the SQL interface returns for the same slot and options, XLogData and
/// keepalives decode and re-encode exactly, and a standby status update moves the slot's
/// confirmed position to the last commit.
/// The walsender (not the SQL interface) streams the same payloads, in an envelope that
/// re-encodes to its bytes, and a status update moves the slot to the last commit.
pub fn check_walsender(server: &Server, _facts: &Facts) -> Result<String, String> {
    let version = ProtocolVersion::from_number(server.max_protocol()).ok_or("version")?;
    let options = Options {
        slot: "walsender",
        version,
        streaming: Streaming::On,
        binary: true,
        two_phase: false,
    };
    let expected = peek(server, &options)?;
    let before = slot_confirmed(server)?;
    let conninfo = ConnInfo::parse(Some(&server.conninfo("postgres", None)), |_| None)
        .map_err(|e| e.to_string())?;
    let mut conn = Connection::connect(&conninfo).map_err(|e| e.to_string())?;
    let pgoutput_options: Vec<String> = options
        .pairs()
        .iter()
        .map(|(k, v)| format!("{k} '{v}'"))
        .collect();
    conn.start_replication(&format!(
        "START_REPLICATION SLOT walsender LOGICAL 0/0 ({})",
        pgoutput_options.join(", ")
    ))
    .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut keepalives, last_commit) = receive_all(&mut conn, &options, &expected, deadline)?;
    ensure(last_commit > before, || format!("no commit after {before}"))?;
    keepalives += confirm(&mut conn, last_commit, deadline)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = slot_confirmed(server)?;
    while after < last_commit && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = slot_confirmed(server)?;
    }
    ensure(after == last_commit, || {
        format!("confirmed_flush_lsn {after}, expected {last_commit} (was {before})")
    })?;
    conn.finish_copy(std::time::Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "{} payloads equal to the SQL interface's, {keepalives} keepalives, slot confirmed \
         {before} -> {after}",
        expected.len()
    ))
}

fn slot_confirmed(server: &Server) -> Result<Lsn, String> {
    server
        .query_one(
            "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walsender';",
        )
        .map_err(|e| e.to_string())?
        .parse()
        .map_err(|e| format!("{e}"))
}

/// The next CopyData payload, waiting until `deadline`.
fn next_frame(conn: &mut Connection, deadline: Instant) -> Result<Bytes, String> {
    loop {
        match conn
            .recv_copy_data(Duration::from_millis(500))
            .map_err(|e| e.to_string())?
        {
            CopyEvent::Data(frame) => return Ok(frame),
            CopyEvent::Idle if Instant::now() < deadline => {}
            CopyEvent::Idle => return Err("the walsender went quiet".into()),
            CopyEvent::End => return Err("the walsender ended the stream".into()),
        }
    }
}

/// Receives as many payloads as the SQL interface gave, checking each against it; returns
/// the keepalives seen on the way and the last transaction end.
fn receive_all(
    conn: &mut Connection,
    options: &Options,
    expected: &[Row],
    deadline: Instant,
) -> Result<(usize, Lsn), String> {
    let envelope = Ctx::plain(ProtocolVersion::V1);
    let mut decoder =
        Decoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
    let (mut received, mut keepalives, mut last_commit) = (0, 0, Lsn(0));
    while received < expected.len() {
        let frame = next_frame(conn, deadline)?;
        let message: ServerMessage<'_> =
            decode(&frame, envelope).map_err(|e| format!("{}: {e}", hex(&frame)))?;
        ensure(
            encode(&message, envelope).map_err(|e| e.to_string())? == frame,
            || format!("envelope re-encoding differs: {}", hex(&frame)),
        )?;
        let xlog = match message {
            ServerMessage::XLogData(xlog) => xlog,
            ServerMessage::PrimaryKeepalive(_) => {
                keepalives += 1;
                continue;
            }
        };
        let want = &expected[received];
        ensure(*xlog.data == want.data[..], || {
            format!(
                "payload {received}: walsender sent {} but the SQL interface {}",
                hex(&xlog.data),
                hex(&want.data)
            )
        })?;
        ensure(xlog.wal_start == xlog.wal_end, || {
            "logical XLogData has wal_start != wal_end".into()
        })?;
        let message = decoder.decode(&xlog.data).map_err(|e| e.to_string())?;
        if let Some(end) = message.transaction_end_lsn() {
            last_commit = end;
        }
        if matches!(
            message,
            PgOutputMessage::Relation(_) | PgOutputMessage::Type(_)
        ) {
            ensure(xlog.wal_start == Lsn(0), || {
                "Relation/Type XLogData LSN is not 0".into()
            })?;
        }
        received += 1;
    }
    Ok((keepalives, last_commit))
}

/// Sends a status update confirming `lsn` with reply_requested, and waits for the
/// keepalive the server answers with at once; returns the keepalives seen.
fn confirm(conn: &mut Connection, lsn: Lsn, deadline: Instant) -> Result<usize, String> {
    let envelope = Ctx::plain(ProtocolVersion::V1);
    let update = StandbyStatusUpdate {
        write_lsn: lsn,
        flush_lsn: lsn,
        apply_lsn: lsn,
        send_time: PgTimestamp::now(),
        reply_requested: true,
    };
    conn.send_copy_data(&encode(&update, envelope).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    loop {
        let frame = next_frame(conn, deadline)?;
        if let ServerMessage::PrimaryKeepalive(_) =
            decode(&frame, envelope).map_err(|e| e.to_string())?
        {
            return Ok(1);
        }
    }
}
