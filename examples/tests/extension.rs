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

/// A part whose hand-written `Decode` claims more bytes than it takes (`MIN_WIRE_LEN` 8
/// for one byte): the derive's error-free decoding of the enum below then refuses a short
/// `Wide` that `decode` accepts. A `Seq` of them keeps what `decode` read, nothing lost.
#[derive(Debug, Clone, PartialEq)]
struct Overstated(u8);

impl<'a> pgoutput_codec::Decode<'a> for Overstated {
    const MIN_WIRE_LEN: usize = 8;

    fn decode(
        r: &mut pgoutput_codec::Reader<'a>,
        _: Ctx,
    ) -> Result<Self, pgoutput_codec::DecodeError> {
        r.read_u8().map(Overstated)
    }
}

impl pgoutput_codec::Encode for Overstated {
    fn encode(
        &self,
        w: &mut pgoutput_codec::Writer<'_>,
        _: Ctx,
    ) -> Result<(), pgoutput_codec::EncodeError> {
        w.write_u8(self.0);
        Ok(())
    }

    fn encoded_len(&self, _: Ctx) -> usize {
        1
    }
}

#[derive(Debug, Clone, PartialEq, pgoutput_codec::Decode, pgoutput_codec::Encode)]
enum Item {
    #[codec(tag = b'n')]
    Narrow,
    #[codec(tag = b'w')]
    Wide(Overstated),
}

#[derive(Debug, Clone, PartialEq, pgoutput_codec::Decode, pgoutput_codec::Encode)]
struct Items<'a> {
    #[codec(count = u16)]
    items: pgoutput_codec::Seq<'a, Item>,
}

#[test]
fn a_sequence_keeps_what_decode_read_when_a_hand_written_decode_disagrees() {
    let ctx = Ctx::plain(ProtocolVersion::V1);
    // Three items: 'n', 'w' 7, 'w' 9 (the last one with fewer bytes left than claimed).
    let bytes = b"\x00\x03nw\x07w\x09";
    let decoded: Items<'_> = decode(bytes, ctx).unwrap();
    assert_eq!(
        decoded.items.to_vec(),
        [
            Item::Narrow,
            Item::Wide(Overstated(7)),
            Item::Wide(Overstated(9))
        ]
    );
    assert_eq!(decoded.items.iter().count(), 3);
    assert_eq!(encode(&decoded, ctx).unwrap(), bytes);
    // Bytes decode refuses are still refused, with its error.
    let err = decode::<Items<'_>>(b"\x00\x02nx", ctx).unwrap_err();
    assert!(
        matches!(err.kind(), DecodeErrorKind::UnknownTag { .. }),
        "{err}"
    );
    assert_eq!(err.offset(), 3);
}
