//! Users extend the protocol with their own tagged message types and their own enum that
//! wraps `PgOutputMessage` (see `examples/src/extension.rs`).

use pgoutput_codec::{
    decode, encode, Ctx, DecodeErrorKind, Decoder, Encoder, PgOutputMessage, ProtocolVersion,
    Streaming, TagSet, Tagged, Xid,
};
use pgoutput_examples::extension::{ExtendedMessage, Heartbeat};
use pgoutput_tests::{all_cases, hex};

fn heartbeat(xid: Option<u32>) -> ExtendedMessage<'static> {
    ExtendedMessage::Heartbeat(Heartbeat {
        xid: xid.map(Xid),
        lsn: pgoutput_codec::Lsn(0x16B_3748),
        note: "alive".into(),
    })
}

#[test]
fn the_extended_enum_accepts_every_pgoutput_tag_and_its_own() {
    assert_eq!(ExtendedMessage::TAGS, PgOutputMessage::TAGS.with(b'H'));
    // Every pgoutput message decodes through the extended enum to the same bytes.
    for case in all_cases() {
        let bytes = encode(&case.value, case.ctx).unwrap();
        let extended: ExtendedMessage<'_> = decode(&bytes, case.ctx).unwrap();
        assert_eq!(
            extended,
            ExtendedMessage::PgOutput(case.value.clone()),
            "{}",
            case.name
        );
        assert_eq!(encode(&extended, case.ctx).unwrap(), bytes);
    }
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let bytes = encode(&heartbeat(None), v1).unwrap();
    assert_eq!(hex(&bytes), "4800000000016b3748616c69766500");
    assert_eq!(
        decode::<ExtendedMessage<'_>>(&bytes, v1).unwrap(),
        heartbeat(None)
    );
    // Plain pgoutput decoding does not know 'H'.
    let err = decode::<PgOutputMessage<'_>>(&bytes, v1).unwrap_err();
    assert_eq!(
        err.kind(),
        DecodeErrorKind::UnknownTag {
            found: b'H',
            expected: PgOutputMessage::TAGS
        }
    );
    // And the extended enum reports its own, larger set.
    let err = decode::<ExtendedMessage<'_>>(b"Z", v1).unwrap_err();
    assert_eq!(
        err.kind(),
        DecodeErrorKind::UnknownTag {
            found: b'Z',
            expected: ExtendedMessage::TAGS
        }
    );
    assert_eq!(err.message(), Some("ExtendedMessage"));
    assert_eq!(heartbeat(None).tag(), b'H');
    assert!(!TagSet::single(b'H').intersects(PgOutputMessage::TAGS));
}

#[test]
fn custom_messages_follow_the_session_context() {
    let mut encoder = Encoder::new(ProtocolVersion::V4, Streaming::Parallel).unwrap();
    let mut decoder = Decoder::new(ProtocolVersion::V4, Streaming::Parallel).unwrap();
    let start =
        ExtendedMessage::PgOutput(PgOutputMessage::StreamStart(pgoutput_codec::StreamStart {
            xid: Xid(744),
            first_segment: true,
        }));
    let stop = ExtendedMessage::PgOutput(PgOutputMessage::StreamStop(pgoutput_codec::StreamStop));
    let script = [
        heartbeat(None),
        start,
        heartbeat(Some(744)),
        stop,
        heartbeat(None),
    ];
    for message in &script {
        let bytes = encoder.encode(message).unwrap();
        assert_eq!(
            &decoder.decode_as::<ExtendedMessage<'_>>(&bytes).unwrap(),
            message
        );
    }
    // The session refuses a heartbeat without its xid inside a block, like pgoutput's own.
    encoder.encode(&script[1]).unwrap();
    let err = encoder.encode(&heartbeat(None)).unwrap_err();
    assert!(err.is_context_error());
    assert_eq!(
        (err.message(), err.field()),
        (Some("Heartbeat"), Some("xid"))
    );
}
