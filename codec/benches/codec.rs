//! Decode and encode throughput for each message shape.
//!
//! Run with `cargo bench -p pgoutput-codec`. Decoding borrows from the input, so these
//! numbers are parsing alone; encoding reuses one buffer, as a sender would.

use divan::counter::BytesCount;
use divan::{black_box, Bencher};
use pgoutput_codec::{
    decode, encode, encode_into, ColumnValue, Ctx, Insert, Lsn, Message, MessageFlags, Oid,
    PgOutputMessage, PgTimestamp, ProtocolVersion, Relation, RelationColumn, ReplicaIdentity,
    StreamAbort, Streaming, TupleData, Xid,
};

fn main() {
    divan::main();
}

fn in_block() -> Ctx {
    Ctx::new(ProtocolVersion::V4, Streaming::Parallel)
        .unwrap()
        .with_in_stream(true)
        .unwrap()
}

fn message(content_len: usize) -> PgOutputMessage<'static> {
    PgOutputMessage::Message(Message {
        xid: Some(Xid(744)),
        flags: MessageFlags::Transactional,
        lsn: Lsn(0x16_B374_D848),
        prefix: "audit".into(),
        content: vec![b'x'; content_len].into(),
    })
}

fn stream_abort() -> PgOutputMessage<'static> {
    PgOutputMessage::StreamAbort(StreamAbort {
        xid: Xid(744),
        subtransaction_xid: Xid(745),
        abort_lsn: Some(Lsn(0x014F_FE70)),
        abort_timestamp: Some(PgTimestamp(0x0003_0467_4534_E714)),
    })
}

/// An Insert of a typical 10-column row, text values with one NULL.
fn insert() -> PgOutputMessage<'static> {
    let mut columns: Vec<ColumnValue<'static>> = (0..9)
        .map(|i| ColumnValue::Text(format!("value number {i}").into_bytes().into()))
        .collect();
    columns.insert(3, ColumnValue::Null);
    PgOutputMessage::Insert(Insert {
        xid: None,
        relation_oid: Oid(16_394),
        new_tuple: TupleData::new(columns),
    })
}

/// A Relation of 10 columns.
fn relation() -> PgOutputMessage<'static> {
    PgOutputMessage::Relation(Relation {
        xid: None,
        relation_oid: Oid(16_394),
        namespace: "public".into(),
        relation_name: "accounts".into(),
        replica_identity: ReplicaIdentity::Default,
        columns: (0..10)
            .map(|i| RelationColumn {
                flags: u8::from(i == 0),
                name: format!("column_{i}").into(),
                type_oid: Oid(25),
                type_modifier: -1,
            })
            .collect(),
    })
}

const SHAPES: [&str; 5] = [
    "message_16b",
    "message_4kib",
    "stream_abort",
    "insert_10_columns",
    "relation_10_columns",
];

/// (name, message, context) for each shape measured.
fn shapes() -> [(&'static str, PgOutputMessage<'static>, Ctx); 5] {
    let parallel = Ctx::new(ProtocolVersion::V4, Streaming::Parallel).unwrap();
    let v1 = Ctx::plain(ProtocolVersion::V1);
    [
        ("message_16b", message(16), in_block()),
        ("message_4kib", message(4096), in_block()),
        ("stream_abort", stream_abort(), parallel),
        ("insert_10_columns", insert(), v1),
        ("relation_10_columns", relation(), v1),
    ]
}

#[divan::bench(args = SHAPES)]
fn decode_dispatch(bencher: Bencher<'_, '_>, shape: &str) {
    let (_, value, ctx) = shapes().into_iter().find(|(n, ..)| *n == shape).unwrap();
    let bytes = encode(&value, ctx).unwrap();
    bencher
        .counter(BytesCount::of_slice(&bytes))
        .bench(|| decode::<PgOutputMessage<'_>>(black_box(&bytes), ctx).unwrap());
}

#[divan::bench(args = SHAPES)]
fn encode_reusing_buffer(bencher: Bencher<'_, '_>, shape: &str) {
    let (_, value, ctx) = shapes().into_iter().find(|(n, ..)| *n == shape).unwrap();
    let len = encode(&value, ctx).unwrap().len();
    let mut buf = Vec::with_capacity(len);
    bencher.counter(BytesCount::new(len)).bench_local(|| {
        buf.clear();
        encode_into(black_box(&value), ctx, &mut buf).unwrap();
    });
}

/// The error path: a truncated message, which allocates the boxed error.
#[divan::bench]
fn decode_truncated(bencher: Bencher<'_, '_>) {
    let bytes = encode(&stream_abort(), in_block()).unwrap();
    let ctx = Ctx::new(ProtocolVersion::V4, Streaming::Parallel).unwrap();
    bencher.bench(|| decode::<PgOutputMessage<'_>>(black_box(&bytes[..20]), ctx).unwrap_err());
}
