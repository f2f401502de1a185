//! The fuzz targets' bodies, shared by `fuzz/` (cargo-fuzz, nightly) and the normal test
//! suite (which replays every corpus and crash input through them on stable). Each takes
//! the fuzzer's bytes and panics when a property breaks.

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use pgoutput_codec::{
    decode, encode, Begin, BeginPrepare, ClientMessage, ColumnValue, Commit, CommitPrepared, Ctx,
    Decode, Decoder, Delete, Encode, Encoder, Insert, IntoOwned, Message, OldTuple, Origin,
    PgOutputMessage, Prepare, ProtocolVersion, Reader, Relation, RelationColumn, RollbackPrepared,
    ServerMessage, StreamAbort, StreamCommit, StreamPrepare, StreamStart, StreamStop, Streaming,
    Truncate, TupleData, Type, Update,
};
use pgoutput_harness::server::TestServer;

/// The targets, by the names of their folders under `fuzz/corpus`.
/// A target: its name and its body.
pub type Target = (&'static str, fn(&[u8]));

/// The targets, by the names of their folders under `fuzz/corpus`.
pub const TARGETS: [Target; 6] = [
    ("raw", raw),
    ("session", session),
    ("envelope", envelope),
    ("json", json),
    ("structured", structured),
    ("server", server),
];

/// The context a selector byte picks: protocol version (bits 0-1), streaming mode (bits
/// 2-3, modulo 3) and whether we are inside a stream block (bit 4). Combinations
/// PostgreSQL refuses fall back to the plain context of that version.
pub fn context(selector: u8) -> Ctx {
    let version = ProtocolVersion::ALL[usize::from(selector & 3)];
    let streaming =
        [Streaming::Off, Streaming::On, Streaming::Parallel][usize::from((selector >> 2) & 3) % 3];
    let ctx = Ctx::new(version, streaming).unwrap_or(Ctx::plain(version));
    if selector & 16 != 0 {
        ctx.with_in_stream(true).unwrap_or(ctx)
    } else {
        ctx
    }
}

/// Raw bytes decoded in the context the first byte chooses: if they decode, they
/// re-encode to exactly themselves, with `encoded_len` exact; and the elements a decoded
/// `Seq` hands out on iteration (read again with `Decode::decode_valid`)
/// are the ones decoding validated: made owned, element by element, the message encodes
/// to the same bytes and equals the borrowed one.
pub fn raw(data: &[u8]) {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let ctx = context(selector);
    if let Ok(message) = decode::<PgOutputMessage<'_>>(bytes, ctx) {
        assert_eq!(message.encoded_len(ctx), bytes.len(), "{message:?}");
        assert_eq!(
            encode(&message, ctx).expect("a decoded message encodes"),
            bytes
        );
        let owned = message.clone().into_owned();
        assert_eq!(
            encode(&owned, ctx).expect("an owned copy encodes"),
            bytes,
            "{owned:?}"
        );
        assert_eq!(owned, message);
    }
    quiet_decoding_agrees(bytes, ctx);
}

/// `Decode::decode_valid` (how a `Seq` validates and iterates its elements) is `decode`
/// without errors: from each of the first offsets, for every type it is derived for, the
/// same value and position where `decode` succeeds, `None` exactly where it fails.
fn quiet_decoding_agrees(bytes: &[u8], ctx: Ctx) {
    fn agrees<'a, T: Decode<'a> + PartialEq + std::fmt::Debug>(bytes: &'a [u8], ctx: Ctx) {
        let (mut checked, mut quiet) = (Reader::new(bytes), Reader::new(bytes));
        let value = T::decode(&mut checked, ctx).ok();
        assert_eq!(T::decode_valid(&mut quiet, ctx), value, "{bytes:02x?}");
        if value.is_some() {
            assert_eq!(quiet.position(), checked.position(), "{bytes:02x?}");
        }
    }
    for start in 0..bytes.len().min(64) {
        let bytes = &bytes[start..];
        agrees::<ColumnValue<'_>>(bytes, ctx);
        agrees::<TupleData<'_>>(bytes, ctx);
        agrees::<OldTuple<'_>>(bytes, ctx);
        agrees::<RelationColumn<'_>>(bytes, ctx);
        agrees::<Begin>(bytes, ctx);
        agrees::<Commit>(bytes, ctx);
        agrees::<Origin<'_>>(bytes, ctx);
        agrees::<Relation<'_>>(bytes, ctx);
        agrees::<Type<'_>>(bytes, ctx);
        agrees::<Insert<'_>>(bytes, ctx);
        agrees::<Update<'_>>(bytes, ctx);
        agrees::<Delete<'_>>(bytes, ctx);
        agrees::<Truncate<'_>>(bytes, ctx);
        agrees::<Message<'_>>(bytes, ctx);
        agrees::<StreamStart>(bytes, ctx);
        agrees::<StreamStop>(bytes, ctx);
        agrees::<StreamCommit>(bytes, ctx);
        agrees::<StreamAbort>(bytes, ctx);
        agrees::<BeginPrepare<'_>>(bytes, ctx);
        agrees::<Prepare<'_>>(bytes, ctx);
        agrees::<CommitPrepared<'_>>(bytes, ctx);
        agrees::<RollbackPrepared<'_>>(bytes, ctx);
        agrees::<StreamPrepare<'_>>(bytes, ctx);
    }
}

/// A session: the first byte chooses version and streaming, then messages each with a
/// one-byte length. The decoder and an encoder fed what it decoded agree on every byte
/// and on the state; a message that fails leaves the decoder's state unchanged.
pub fn session(data: &[u8]) {
    let Some((&selector, mut rest)) = data.split_first() else {
        return;
    };
    let base = context(selector & 0x0f);
    let mut decoder = Decoder::new(base.version(), base.streaming()).expect("a valid context");
    let mut encoder = Encoder::new(base.version(), base.streaming()).expect("a valid context");
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        let (bytes, tail) = tail.split_at(len);
        rest = tail;
        let before = decoder.ctx();
        match decoder.decode(bytes) {
            Ok(message) => {
                assert_eq!(
                    encoder.encode(&message).expect("what decoded encodes"),
                    bytes
                );
                assert_eq!(encoder.ctx(), decoder.ctx());
            }
            Err(_) => assert_eq!(decoder.ctx(), before, "a failed decode changed the state"),
        }
    }
}

/// Envelope messages both ways, and the pgoutput message inside an XLogData in every
/// context: whatever decodes re-encodes to the same bytes.
pub fn envelope(data: &[u8]) {
    let ctx = Ctx::plain(ProtocolVersion::V1);
    if let Ok(message) = decode::<ServerMessage<'_>>(data, ctx) {
        assert_eq!(encode(&message, ctx).expect("re-encodes"), data);
        if let ServerMessage::XLogData(xlog) = &message {
            for selector in 0..32 {
                let inner = context(selector);
                if let Ok(m) = decode::<PgOutputMessage<'_>>(&xlog.data, inner) {
                    assert_eq!(encode(&m, inner).expect("re-encodes"), &xlog.data[..]);
                }
            }
        }
    }
    if let Ok(message) = decode::<ClientMessage>(data, ctx) {
        assert_eq!(encode(&message, ctx).expect("re-encodes"), data);
    }
}

/// The JSON form: a message or envelope value read from JSON writes back the same value,
/// and where a context can carry it, goes to bytes and back unchanged.
pub fn json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(message) = serde_json::from_str::<PgOutputMessage<'_>>(text) {
        let again = serde_json::to_string(&message).expect("serializes");
        let back: PgOutputMessage<'_> = serde_json::from_str(&again).expect("reads back");
        assert_eq!(back, message);
        for selector in 0..32 {
            let ctx = context(selector);
            if let Ok(bytes) = encode(&message, ctx) {
                let decoded: PgOutputMessage<'_> = decode(&bytes, ctx).expect("decodes");
                assert_eq!(decoded.into_owned(), message.clone().into_owned());
            }
        }
    }
    let ctx = Ctx::plain(ProtocolVersion::V1);
    if let Ok(message) = serde_json::from_str::<ServerMessage<'_>>(text) {
        let bytes = encode(&message, ctx).expect("envelope messages always encode");
        assert_eq!(
            decode::<ServerMessage<'_>>(&bytes, ctx).expect("decodes"),
            message
        );
    }
    if let Ok(message) = serde_json::from_str::<ClientMessage>(text) {
        let bytes = encode(&message, ctx).expect("envelope messages always encode");
        assert_eq!(
            decode::<ClientMessage>(&bytes, ctx).expect("decodes"),
            message
        );
    }
}

/// Structured `arbitrary` messages: where the context can carry one, `encoded_len` is
/// exact and decoding gives it back; where it cannot, the error names a context rule.
pub fn structured(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (Ok(ctx), Ok(message)) = (Ctx::arbitrary(&mut u), PgOutputMessage::arbitrary(&mut u))
    else {
        return;
    };
    match encode(&message, ctx) {
        Ok(bytes) => {
            assert_eq!(message.encoded_len(ctx), bytes.len());
            assert_eq!(
                decode::<PgOutputMessage<'_>>(&bytes, ctx).expect("decodes"),
                message
            );
        }
        Err(err) => assert!(
            err.is_context_error()
                || matches!(err.kind(), pgoutput_codec::EncodeErrorKind::TooLong { .. }),
            "{err}"
        ),
    }
}

/// One test server for the whole process, serving a small script.
fn test_server() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let t = pgoutput_harness::server::Table::new(16385, "public", "t")
            .key_column("id", 23)
            .column("v", 25)
            .row([Some("1"), Some("a")]);
        let script = pgoutput_harness::server::Script::new()
            .transaction(pgoutput_harness::server::Transaction::new().insert(&t, ["2", "b"]));
        TestServer::builder()
            .publication(pgoutput_harness::server::Publication::new("p").table(t))
            .script(script)
            .max_replication_slots(20)
            .start()
            .expect("the test server starts")
    })
}

/// What a client sends the test server (start-up packets, queries and replication
/// commands, CopyData), run as one connection in memory: whatever it is, the session ends
/// (the fuzzer's timeout catches a hang), nothing panics, and what the server wrote is a
/// well-formed sequence of backend messages (after one `N` per SSL or GSSENC request).
pub fn server(data: &[u8]) {
    let reply = test_server().__serve_in_memory(data);
    let mut rest = &reply[..];
    // The server sends no NoticeResponse, so every leading `N` answers a request.
    while rest.first() == Some(&b'N') {
        rest = &rest[1..];
    }
    while !rest.is_empty() {
        assert!(rest.len() >= 5, "a truncated message header: {reply:02x?}");
        let len = u32::from_be_bytes(rest[1..5].try_into().expect("4 bytes")) as usize;
        assert!(
            len >= 4 && len < rest.len(),
            "a bad message length: {reply:02x?}"
        );
        rest = &rest[1 + len..];
    }
}
