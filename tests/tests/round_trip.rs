//! Round-trip snapshots: for each message in every context where its layout differs, the
//! hex bytes and the decoded value, with both round-trip directions asserted.

use pgoutput_codec::{
    decode, encode, Ctx, DecodeErrorKind, EncodeErrorKind, Lsn, Message, PgOutputMessage,
    PgTimestamp, ProtocolVersion, StreamAbort, Streaming, Tagged, Xid,
};
use pgoutput_tests::{
    all_cases, assert_round_trip, ctx, message_cases, stream_abort_cases, type_name, unhex,
};

/// Every message type, in every context where its layout differs.
#[test]
fn every_message_round_trips() {
    let mut types: Vec<String> = Vec::new();
    for case in all_cases() {
        let text = assert_round_trip!(PgOutputMessage<'_>, case.ctx, case.value.clone());
        let type_name = type_name(&case.value);
        let name = if case.name.starts_with(&type_name) {
            case.name.to_owned()
        } else {
            format!("{type_name}__{}", case.name)
        };
        insta::assert_snapshot!(name, text);
        if !types.contains(&type_name) {
            types.push(type_name);
        }
    }
    assert_eq!(
        types.len(),
        PgOutputMessage::TAGS.len(),
        "every pgoutput message type has a case: {types:?}"
    );
}

/// The concrete types decode the same bytes as the dispatch enum.
#[test]
fn concrete_types_agree_with_the_dispatch_enum() {
    for case in message_cases() {
        assert_round_trip!(Message<'_>, case.ctx, case.value.clone());
    }
    for case in stream_abort_cases() {
        assert_round_trip!(StreamAbort, case.ctx, case.value);
    }
}

/// Bytes PostgreSQL 17 sent for `ROLLBACK TO SAVEPOINT` in a streamed transaction.
#[test]
fn real_postgres_17_bytes() {
    let expected = |info: bool| StreamAbort {
        xid: Xid(744),
        subtransaction_xid: Xid(745),
        abort_lsn: info.then_some(Lsn(0x014F_FE70)),
        abort_timestamp: info.then_some(PgTimestamp(0x0003_0467_4534_E714)),
    };
    let parallel = ctx::streaming(ProtocolVersion::V4, Streaming::Parallel);
    let on = ctx::streaming(ProtocolVersion::V4, Streaming::On);
    for (hex, ctx, info) in [
        (
            "41000002e8000002e900000000014ffe70000304674534e714",
            parallel,
            true,
        ),
        ("41000002e8000002e9", on, false),
    ] {
        let bytes = unhex(hex);
        let abort: StreamAbort = decode(&bytes, ctx).unwrap();
        assert_eq!(abort, expected(info));
        assert_eq!(encode(&abort, ctx).unwrap(), bytes);
        assert_eq!(
            abort.abort_lsn.map(|l| l.to_string()),
            info.then(|| "0/14FFE70".to_owned())
        );
    }
    // Reading the parallel form with `streaming 'on'` leaves the extra 16 bytes unread, and
    // the short form with `parallel` runs out: the context decides, never the length.
    let long = unhex("41000002e8000002e900000000014ffe70000304674534e714");
    assert_eq!(
        decode::<StreamAbort>(&long, on).unwrap_err().kind(),
        DecodeErrorKind::TrailingBytes { remaining: 16 }
    );
    let short = unhex("41000002e8000002e9");
    let err = decode::<StreamAbort>(&short, parallel).unwrap_err();
    assert_eq!((err.offset(), err.field()), (9, Some("abort_lsn")));
}

#[test]
fn decoded_fields_borrow_from_the_input() {
    let case = &message_cases()[0];
    let bytes = encode(&case.value, case.ctx).unwrap();
    let message: Message<'_> = decode(&bytes, case.ctx).unwrap();
    assert!(message.prefix.is_borrowed());
    assert!(message.content.is_borrowed());
    assert!(bytes.as_ptr_range().contains(&message.content.as_ptr()));
    // into_owned() detaches the value from the input.
    let owned: Message<'static> = pgoutput_codec::IntoOwned::into_owned(message.clone());
    drop(bytes);
    assert_eq!(owned, case.value);
}

#[test]
fn gated_fields_that_do_not_fit_the_context_are_encode_errors() {
    let mut in_block = message_cases()[3].value.clone();
    assert!(in_block.xid.is_some());
    let outside = ctx::streaming(ProtocolVersion::V2, Streaming::On);
    let err = encode(&in_block, outside).unwrap_err();
    assert!(matches!(
        err.kind(),
        EncodeErrorKind::NotCarriedInContext { .. }
    ));
    assert_eq!((err.message(), err.field()), (Some("Message"), Some("xid")));
    assert_eq!(
        err.to_string(),
        "Message.xid is Some, but the wire carries it only when protocol version is 2 or \
         higher and inside a Stream Start/Stop block (context: protocol 2, streaming on)"
    );
    in_block.xid = None;
    let inside = ctx::in_block(ProtocolVersion::V2, Streaming::On);
    let err = encode(&in_block, inside).unwrap_err();
    assert!(matches!(
        err.kind(),
        EncodeErrorKind::MissingInContext { .. }
    ));
    assert_eq!(
        err.to_string(),
        "Message.xid is None, but the wire carries it when protocol version is 2 or higher \
         and inside a Stream Start/Stop block (context: protocol 2, streaming on, inside a \
         stream block)"
    );

    let parallel = stream_abort_cases()[3].value;
    let err = encode(
        &parallel,
        ctx::streaming(ProtocolVersion::V4, Streaming::On),
    )
    .unwrap_err();
    assert_eq!(err.field(), Some("abort_lsn"));
    assert!(err.is_context_error());
    let short = stream_abort_cases()[2].value;
    let err = encode(
        &short,
        ctx::streaming(ProtocolVersion::V4, Streaming::Parallel),
    )
    .unwrap_err();
    assert!(matches!(
        err.kind(),
        EncodeErrorKind::MissingInContext { .. }
    ));
    // A failed encode_into leaves the buffer as it was.
    let mut buf = b"keep".to_vec();
    assert!(pgoutput_codec::encode_into(
        &short,
        Ctx::new(ProtocolVersion::V4, Streaming::Parallel).unwrap(),
        &mut buf
    )
    .is_err());
    assert_eq!(buf, b"keep");
}

#[test]
fn strings_with_nul_are_encode_errors() {
    let mut message = message_cases()[0].value.clone();
    message.prefix = pgoutput_codec::PgStr::from(&b"a\0b"[..]);
    let err = encode(&message, ctx::v1()).unwrap_err();
    assert_eq!(err.kind(), EncodeErrorKind::InteriorNul { position: 1 });
    assert_eq!(
        err.to_string(),
        "Message.prefix contains a NUL byte at index 1"
    );
    assert!(!err.is_context_error());
}
