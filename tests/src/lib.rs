//! Shared helpers for the cross-crate tests: hex, round-trip checks, and the message cases
//! that the snapshot, hostile-input and property tests all use.

use std::fmt::Debug;

use pgoutput_codec::{
    Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Ctx, Delete, Insert, Lsn, Message,
    MessageFlags, Oid, OldTuple, Origin, PgOutputMessage, PgTimestamp, Prepare, ProtocolVersion,
    Relation, RelationColumn, ReplicaIdentity, RollbackPrepared, StreamAbort, StreamCommit,
    StreamPrepare, StreamStart, StreamStop, Streaming, Truncate, TruncateOptions, TupleData, Type,
    Update, Xid,
};

/// Lower-case hex, no separators (as PostgreSQL's `encode(…, 'hex')` prints bytea).
pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// The bytes of a hex string; panics on malformed input (test fixtures only).
pub fn unhex(hex: &str) -> Vec<u8> {
    hex::decode(hex).unwrap_or_else(|e| panic!("{e}: {hex:?}"))
}

/// What a round-trip snapshot shows: the context, the bytes and the decoded value.
pub fn snapshot_text(ctx: Ctx, bytes: &[u8], value: &impl Debug) -> String {
    format!(
        "context: {ctx}\nbytes ({}): {}\n{value:#?}\n",
        bytes.len(),
        hex(bytes)
    )
}

/// Checks both round-trip directions for `$value` of type `$ty` in `$ctx`:
/// `decode(encode(m)) == m` consuming every byte, `encode(decode(b)) == b`, and that
/// `encoded_len` is exact. Evaluates to the snapshot text.
#[macro_export]
macro_rules! assert_round_trip {
    ($ty:ty, $ctx:expr, $value:expr) => {{
        let ctx: ::pgoutput_codec::Ctx = $ctx;
        let value = $value;
        let bytes = ::pgoutput_codec::encode(&value, ctx)
            .unwrap_or_else(|e| panic!("{value:?} should encode in {ctx}: {e}"));
        assert_eq!(
            bytes.len(),
            ::pgoutput_codec::Encode::encoded_len(&value, ctx),
            "encoded_len"
        );
        let decoded: $ty = ::pgoutput_codec::decode(&bytes, ctx)
            .unwrap_or_else(|e| panic!("{} should decode in {ctx}: {e}", $crate::hex(&bytes)));
        assert_eq!(decoded, value, "decode(encode(m)) == m");
        let again = ::pgoutput_codec::encode(&decoded, ctx).expect("re-encodes");
        assert_eq!(
            $crate::hex(&again),
            $crate::hex(&bytes),
            "encode(decode(b)) == b"
        );
        $crate::snapshot_text(ctx, &bytes, &decoded)
    }};
}

/// One test input: a named value in the context where its layout applies.
#[derive(Debug, Clone)]
pub struct Case<T> {
    pub name: &'static str,
    pub ctx: Ctx,
    pub value: T,
}

/// Contexts the cases use.
pub mod ctx {
    use super::*;

    pub fn v1() -> Ctx {
        Ctx::plain(ProtocolVersion::V1)
    }

    pub fn streaming(version: ProtocolVersion, streaming: Streaming) -> Ctx {
        Ctx::new(version, streaming).expect("valid options")
    }

    pub fn in_block(version: ProtocolVersion, mode: Streaming) -> Ctx {
        streaming(version, mode)
            .with_in_stream(true)
            .expect("streaming")
    }
}

/// Message 'M' in every context and shape where its layout differs.
pub fn message_cases() -> Vec<Case<Message<'static>>> {
    let message =
        |xid: Option<u32>, flags, prefix: &'static [u8], content: &'static [u8]| Message {
            xid: xid.map(Xid),
            flags,
            lsn: Lsn(0x0000_0001_6B37_4D48),
            prefix: prefix.into(),
            content: content.into(),
        };
    use MessageFlags::{NonTransactional, Transactional};
    use ProtocolVersion::{V2, V4};
    vec![
        Case {
            name: "non_transactional",
            ctx: ctx::v1(),
            value: message(None, NonTransactional, b"audit", b"hello"),
        },
        Case {
            name: "transactional",
            ctx: ctx::v1(),
            value: message(None, Transactional, b"audit", b"hello"),
        },
        Case {
            name: "streaming_session_outside_block",
            ctx: ctx::streaming(V2, Streaming::On),
            value: message(None, NonTransactional, b"audit", b"between blocks"),
        },
        Case {
            name: "inside_stream_block",
            ctx: ctx::in_block(V2, Streaming::On),
            value: message(Some(744), Transactional, b"audit", b"streamed"),
        },
        Case {
            name: "inside_parallel_stream_block",
            ctx: ctx::in_block(V4, Streaming::Parallel),
            value: message(Some(744), Transactional, b"audit", b"streamed"),
        },
        Case {
            name: "empty_prefix_and_content",
            ctx: ctx::v1(),
            value: message(None, NonTransactional, b"", b""),
        },
        Case {
            name: "non_utf8_prefix",
            ctx: ctx::v1(),
            value: message(None, Transactional, b"caf\xe9 \xff", b"latin-1 prefix"),
        },
        Case {
            name: "binary_content_with_nul",
            ctx: ctx::v1(),
            value: message(None, NonTransactional, b"bin", b"\x00\x01\x00\xff\xfe\x00"),
        },
    ]
}

/// Stream Abort 'A' in every protocol version and streaming mode where its layout differs.
pub fn stream_abort_cases() -> Vec<Case<StreamAbort>> {
    use ProtocolVersion::{V2, V3, V4};
    let abort = |xid, subxid, info: Option<(u64, i64)>| StreamAbort {
        xid: Xid(xid),
        subtransaction_xid: Xid(subxid),
        abort_lsn: info.map(|(lsn, _)| Lsn(lsn)),
        abort_timestamp: info.map(|(_, ts)| PgTimestamp(ts)),
    };
    // Values from a real PostgreSQL 17 capture (see `real_postgres_17_bytes`).
    let info = Some((0x014F_FE70, 0x0003_0467_4534_E714));
    vec![
        Case {
            name: "v2_top_level",
            ctx: ctx::streaming(V2, Streaming::On),
            value: abort(744, 744, None),
        },
        Case {
            name: "v3_subtransaction",
            ctx: ctx::streaming(V3, Streaming::On),
            value: abort(744, 745, None),
        },
        Case {
            name: "v4_streaming_on_subtransaction",
            ctx: ctx::streaming(V4, Streaming::On),
            value: abort(744, 745, None),
        },
        Case {
            name: "v4_parallel_subtransaction",
            ctx: ctx::streaming(V4, Streaming::Parallel),
            value: abort(744, 745, info),
        },
        Case {
            name: "v4_parallel_top_level",
            ctx: ctx::streaming(V4, Streaming::Parallel),
            value: abort(744, 744, info),
        },
        Case {
            name: "v1_without_streaming",
            ctx: ctx::v1(),
            value: abort(744, 745, None),
        },
    ]
}

const LSN: Lsn = Lsn(0x0000_0001_6B37_4D48);
const END_LSN: Lsn = Lsn(0x0000_0001_6B37_4E10);
const TIME: PgTimestamp = PgTimestamp(0x0003_0467_4534_E714);
const XID: Xid = Xid(744);
const SUBXID: Xid = Xid(745);
const RELID: Oid = Oid(16_394);

/// A case of the dispatch enum.
fn case(
    name: &'static str,
    ctx: Ctx,
    value: PgOutputMessage<'static>,
) -> Case<PgOutputMessage<'static>> {
    Case { name, ctx, value }
}

fn text(value: &'static str) -> ColumnValue<'static> {
    ColumnValue::Text(value.as_bytes().into())
}

fn binary(value: &'static [u8]) -> ColumnValue<'static> {
    ColumnValue::Binary(value.into())
}

/// A row with every column kind, text and binary mixed.
fn mixed_row() -> TupleData<'static> {
    TupleData::new(vec![
        text("42"),
        ColumnValue::Null,
        binary(b"\x00\x00\x00\x2a"),
        text("caf\u{e9}"),
        ColumnValue::Text(b"\xff latin-1 \xe9"[..].into()),
        binary(b""),
    ])
}

fn key_row() -> TupleData<'static> {
    TupleData::new(vec![text("42"), ColumnValue::Null, ColumnValue::Null])
}

fn new_row_with_toast() -> TupleData<'static> {
    TupleData::new(vec![
        text("42"),
        ColumnValue::UnchangedToast,
        text("updated"),
    ])
}

fn relation(
    xid: Option<Xid>,
    namespace: &'static str,
    replica_identity: ReplicaIdentity,
    columns: Vec<RelationColumn<'static>>,
) -> PgOutputMessage<'static> {
    PgOutputMessage::Relation(Relation {
        xid,
        relation_oid: RELID,
        namespace: namespace.into(),
        relation_name: "accounts".into(),
        replica_identity,
        columns: columns.into(),
    })
}

fn column(
    flags: u8,
    name: &'static str,
    type_oid: u32,
    type_modifier: i32,
) -> RelationColumn<'static> {
    RelationColumn {
        flags,
        name: name.into(),
        type_oid: Oid(type_oid),
        type_modifier,
    }
}

fn columns() -> Vec<RelationColumn<'static>> {
    vec![
        column(1, "id", 23, -1),
        column(0, "name", 1043, 68),
        column(0, "balance", 1700, 1_310_726),
    ]
}

/// Every message type in every context where its layout differs, as the dispatch enum.
pub fn all_cases() -> Vec<Case<PgOutputMessage<'static>>> {
    use PgOutputMessage as M;
    use ProtocolVersion::{V2, V3, V4};
    let v1 = ctx::v1();
    let v3 = Ctx::plain(V3);
    let on = ctx::streaming(V2, Streaming::On);
    let block = ctx::in_block(V2, Streaming::On);
    let parallel_block = ctx::in_block(V4, Streaming::Parallel);
    let mut cases = vec![
        case(
            "begin",
            v1,
            M::Begin(Begin {
                final_lsn: LSN,
                commit_timestamp: TIME,
                xid: XID,
            }),
        ),
        case(
            "commit",
            v1,
            M::Commit(Commit {
                flags: 0,
                commit_lsn: LSN,
                end_lsn: END_LSN,
                commit_timestamp: TIME,
            }),
        ),
        case(
            "origin",
            v1,
            M::Origin(Origin {
                origin_lsn: LSN,
                name: "pg_16395".into(),
            }),
        ),
        case(
            "origin__after_stream_start",
            on,
            M::Origin(Origin {
                origin_lsn: Lsn(0),
                name: "pg_16395".into(),
            }),
        ),
        case(
            "relation__default_identity",
            v1,
            relation(None, "public", ReplicaIdentity::Default, columns()),
        ),
        case(
            "relation__pg_catalog_namespace",
            v1,
            relation(None, "", ReplicaIdentity::Default, columns()),
        ),
        case(
            "relation__full_identity",
            v1,
            relation(
                None,
                "public",
                ReplicaIdentity::Full,
                columns()
                    .into_iter()
                    .map(|c| RelationColumn { flags: 1, ..c })
                    .collect(),
            ),
        ),
        case(
            "relation__index_identity",
            v1,
            relation(None, "public", ReplicaIdentity::Index, columns()),
        ),
        case(
            "relation__nothing_identity_no_columns",
            v1,
            relation(None, "public", ReplicaIdentity::Nothing, vec![]),
        ),
        case(
            "relation__in_stream_block",
            block,
            relation(Some(SUBXID), "public", ReplicaIdentity::Default, columns()),
        ),
        case(
            "type",
            v1,
            M::Type(Type {
                xid: None,
                type_oid: Oid(16_400),
                namespace: "public".into(),
                name: "mood".into(),
            }),
        ),
        case(
            "type__domain_over_builtin",
            v1,
            M::Type(Type {
                xid: None,
                type_oid: Oid(16_410),
                namespace: "".into(),
                name: "text".into(),
            }),
        ),
        case(
            "type__in_stream_block",
            block,
            M::Type(Type {
                xid: Some(SUBXID),
                type_oid: Oid(16_400),
                namespace: "public".into(),
                name: "mood".into(),
            }),
        ),
        case(
            "insert",
            v1,
            M::Insert(Insert {
                xid: None,
                relation_oid: RELID,
                new_tuple: mixed_row(),
            }),
        ),
        case(
            "insert__no_columns",
            v1,
            M::Insert(Insert {
                xid: None,
                relation_oid: RELID,
                new_tuple: TupleData::default(),
            }),
        ),
        case(
            "insert__in_stream_block",
            block,
            M::Insert(Insert {
                xid: Some(SUBXID),
                relation_oid: RELID,
                new_tuple: mixed_row(),
            }),
        ),
        case(
            "insert__in_parallel_stream_block",
            parallel_block,
            M::Insert(Insert {
                xid: Some(XID),
                relation_oid: RELID,
                new_tuple: mixed_row(),
            }),
        ),
        case(
            "update__without_old_tuple",
            v1,
            M::Update(Update {
                xid: None,
                relation_oid: RELID,
                old_tuple: None,
                new_tuple: new_row_with_toast(),
            }),
        ),
        case(
            "update__key_change",
            v1,
            M::Update(Update {
                xid: None,
                relation_oid: RELID,
                old_tuple: Some(OldTuple::Key(key_row())),
                new_tuple: mixed_row(),
            }),
        ),
        case(
            "update__full_old_row",
            v1,
            M::Update(Update {
                xid: None,
                relation_oid: RELID,
                old_tuple: Some(OldTuple::Old(mixed_row())),
                new_tuple: mixed_row(),
            }),
        ),
        case(
            "update__in_stream_block",
            block,
            M::Update(Update {
                xid: Some(SUBXID),
                relation_oid: RELID,
                old_tuple: Some(OldTuple::Key(key_row())),
                new_tuple: new_row_with_toast(),
            }),
        ),
        case(
            "delete__key",
            v1,
            M::Delete(Delete {
                xid: None,
                relation_oid: RELID,
                old_tuple: OldTuple::Key(key_row()),
            }),
        ),
        case(
            "delete__full_old_row",
            v1,
            M::Delete(Delete {
                xid: None,
                relation_oid: RELID,
                old_tuple: OldTuple::Old(mixed_row()),
            }),
        ),
        case(
            "delete__in_stream_block",
            block,
            M::Delete(Delete {
                xid: Some(SUBXID),
                relation_oid: RELID,
                old_tuple: OldTuple::Key(key_row()),
            }),
        ),
        case(
            "truncate",
            v1,
            M::Truncate(Truncate {
                xid: None,
                options: TruncateOptions::NONE,
                relation_oids: vec![RELID].into(),
            }),
        ),
        case(
            "truncate__cascade_restart_identity",
            v1,
            M::Truncate(Truncate {
                xid: None,
                options: TruncateOptions::CASCADE | TruncateOptions::RESTART_IDENTITY,
                relation_oids: vec![RELID, Oid(16_402), Oid(16_410)].into(),
            }),
        ),
        case(
            "truncate__restart_identity",
            v1,
            M::Truncate(Truncate {
                xid: None,
                options: TruncateOptions::RESTART_IDENTITY,
                relation_oids: vec![RELID].into(),
            }),
        ),
        case(
            "truncate__in_stream_block",
            block,
            M::Truncate(Truncate {
                xid: Some(SUBXID),
                options: TruncateOptions::CASCADE,
                relation_oids: vec![RELID, Oid(16_402)].into(),
            }),
        ),
        case(
            "stream_start__first_segment",
            on,
            M::StreamStart(StreamStart {
                xid: XID,
                first_segment: true,
            }),
        ),
        case(
            "stream_start__later_segment",
            on,
            M::StreamStart(StreamStart {
                xid: XID,
                first_segment: false,
            }),
        ),
        case("stream_stop", block, M::StreamStop(StreamStop)),
        case(
            "stream_commit",
            on,
            M::StreamCommit(StreamCommit {
                xid: XID,
                flags: 0,
                commit_lsn: LSN,
                end_lsn: END_LSN,
                commit_timestamp: TIME,
            }),
        ),
        case(
            "begin_prepare",
            v3,
            M::BeginPrepare(BeginPrepare {
                prepare_lsn: LSN,
                end_lsn: END_LSN,
                prepare_timestamp: TIME,
                xid: XID,
                gid: "tx-1".into(),
            }),
        ),
        case(
            "begin_prepare__protocol_1_two_phase_slot",
            v1,
            M::BeginPrepare(BeginPrepare {
                prepare_lsn: LSN,
                end_lsn: END_LSN,
                prepare_timestamp: TIME,
                xid: XID,
                gid: "tx-1".into(),
            }),
        ),
        case(
            "prepare",
            v3,
            M::Prepare(Prepare {
                flags: 0,
                prepare_lsn: LSN,
                end_lsn: END_LSN,
                prepare_timestamp: TIME,
                xid: XID,
                gid: "tx-1".into(),
            }),
        ),
        case(
            "commit_prepared",
            v3,
            M::CommitPrepared(CommitPrepared {
                flags: 0,
                commit_lsn: LSN,
                end_lsn: END_LSN,
                commit_timestamp: TIME,
                xid: XID,
                gid: "tx-1".into(),
            }),
        ),
        case(
            "rollback_prepared",
            v3,
            M::RollbackPrepared(RollbackPrepared {
                flags: 0,
                prepare_end_lsn: LSN,
                rollback_end_lsn: END_LSN,
                prepare_timestamp: TIME,
                rollback_timestamp: PgTimestamp(TIME.0 + 1_000_000),
                xid: XID,
                gid: "tx-1".into(),
            }),
        ),
        case(
            "stream_prepare",
            ctx::streaming(V3, Streaming::On),
            M::StreamPrepare(StreamPrepare {
                flags: 0,
                prepare_lsn: LSN,
                end_lsn: END_LSN,
                prepare_timestamp: TIME,
                xid: XID,
                gid: "tx-\u{e9}".into(),
            }),
        ),
    ];
    for c in message_cases() {
        cases.push(Case {
            name: c.name,
            ctx: c.ctx,
            value: M::Message(c.value),
        });
    }
    for c in stream_abort_cases() {
        cases.push(Case {
            name: c.name,
            ctx: c.ctx,
            value: M::StreamAbort(c.value),
        });
    }
    cases
}

/// The snake_case name of a message's type, for snapshot names: `stream_abort`.
pub fn type_name(message: &PgOutputMessage<'_>) -> String {
    let debug = format!("{message:?}");
    let variant = debug.split(['(', ' ']).next().unwrap_or_default();
    let mut out = String::new();
    for (i, c) in variant.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// Sets the context-gated fields of `message` to what `ctx` carries (keeping values that
/// are there), so that generated messages can be sent in that context.
///
/// It names every message type, and checks its work by encoding: a gated field (or a new
/// message type) it does not know about fails loudly instead of going untested.
pub fn fit_to_context(message: &mut PgOutputMessage<'_>, ctx: Ctx) {
    let xid = |xid: &mut Option<Xid>| {
        let present = ctx.in_stream();
        *xid = match (present, *xid) {
            (true, None) => Some(SUBXID),
            (true, some) => some,
            (false, _) => None,
        };
    };
    match message {
        PgOutputMessage::Message(m) => xid(&mut m.xid),
        PgOutputMessage::Relation(m) => xid(&mut m.xid),
        PgOutputMessage::Type(m) => xid(&mut m.xid),
        PgOutputMessage::Insert(m) => xid(&mut m.xid),
        PgOutputMessage::Update(m) => xid(&mut m.xid),
        PgOutputMessage::Delete(m) => xid(&mut m.xid),
        PgOutputMessage::Truncate(m) => xid(&mut m.xid),
        PgOutputMessage::StreamAbort(m) => {
            let present = ctx.version() >= ProtocolVersion::V4 && ctx.is_parallel();
            m.abort_lsn = present.then_some(m.abort_lsn.unwrap_or(LSN));
            m.abort_timestamp = present.then_some(m.abort_timestamp.unwrap_or(TIME));
        }
        // No field of these depends on the context.
        PgOutputMessage::Begin(_)
        | PgOutputMessage::Commit(_)
        | PgOutputMessage::Origin(_)
        | PgOutputMessage::StreamStart(_)
        | PgOutputMessage::StreamStop(_)
        | PgOutputMessage::StreamCommit(_)
        | PgOutputMessage::BeginPrepare(_)
        | PgOutputMessage::Prepare(_)
        | PgOutputMessage::CommitPrepared(_)
        | PgOutputMessage::RollbackPrepared(_)
        | PgOutputMessage::StreamPrepare(_) => {}
        // A type added later: the encoding check below says whether it needs fitting.
        _ => {}
    }
    if let Err(err) = pgoutput_codec::encode(&*message, ctx) {
        panic!(
            "fit_to_context does not fit {message:?} to {ctx:?}: {err}; a field that \
             depends on the context needs a line here"
        );
    }
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The test server guide's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/test-server.md")]
pub struct TestServerGuideDoctests;

pub mod fuzz;
pub mod pg;
pub mod poison;
pub mod typed;
