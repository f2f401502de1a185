//! A user's own types through the session decoder and encoder.

use codec::{
    decode, encode, Ctx, Decoder, Encoder, IntoOwned, Lsn, PgOutputMessage, ProtocolVersion,
    StreamStart, StreamStop, Streaming, Xid,
};
use pgoutput_user_crate::{Audit, AuditColumn, Chat, Exit, Extended, Say};

fn audit(xid: Option<u32>) -> Extended<'static> {
    Extended::Audit(Audit {
        lsn: Lsn(0x16B_3748),
        xid: xid.map(Xid),
        columns: vec![
            AuditColumn {
                name: "id".into(),
                value: (&b"\x00\x07"[..]).into(),
            },
            AuditColumn {
                name: "body".into(),
                value: (&b"hello"[..]).into(),
            },
        ],
        signature: (&b"sig"[..]).into(),
    })
}

#[test]
fn an_extended_stream_goes_through_the_session_decoder_and_encoder() {
    let (version, streaming) = (ProtocolVersion::V3, Streaming::On);
    let mut encoder = Encoder::new(version, streaming).unwrap();
    let mut decoder = Decoder::new(version, streaming).unwrap();
    let stream = [
        Extended::PgOutput(PgOutputMessage::StreamStart(StreamStart {
            xid: Xid(744),
            first_segment: true,
        })),
        audit(Some(744)),
        Extended::PgOutput(PgOutputMessage::StreamStop(StreamStop)),
        audit(Some(745)),
    ];
    for message in &stream {
        let bytes = encoder.encode(message).unwrap();
        let decoded: Extended<'_> = decoder.decode_as(&bytes).unwrap();
        assert_eq!(&decoded, message);
        assert_eq!(encoder.in_stream(), decoder.in_stream());
    }
    // pgoutput's stream rules still hold for pgoutput's messages inside the enum.
    let stop = Extended::PgOutput(PgOutputMessage::StreamStop(StreamStop));
    assert!(encoder.encode(&stop).is_err());
    assert!(decoder.decode_as::<Extended<'_>>(b"E").is_err());
}

#[test]
fn the_audit_record_has_the_layout_its_attributes_say() {
    let v3 = Ctx::plain(ProtocolVersion::V3);
    let bytes = encode(&audit(Some(7)), v3).unwrap();
    let mut expected = vec![b'Q'];
    expected.extend(0x16B_3748u64.to_be_bytes());
    expected.extend(7u32.to_be_bytes());
    expected.extend(2u16.to_be_bytes());
    expected.extend(b"id\0\x00\x02\x00\x07");
    expected.extend(b"body\0\x00\x05hello");
    expected.extend(3i32.to_be_bytes());
    expected.extend(b"sig");
    assert_eq!(bytes, expected);
    let decoded: Extended<'_> = decode(&bytes, v3).unwrap();
    assert_eq!(decoded.clone().into_owned(), audit(Some(7)));
    // Before protocol 3 the xid is not on the wire, and a value with one cannot be sent.
    let v2 = Ctx::plain(ProtocolVersion::V2);
    assert!(encode(&audit(Some(7)), v2).is_err());
    let old = encode(&audit(None), v2).unwrap();
    assert_eq!(old.len(), bytes.len() - 4);
    assert_eq!(decode::<Extended<'_>>(&old, v2).unwrap(), audit(None));
    // A count larger than the bytes left is refused before anything is allocated.
    let mut hostile = bytes.clone();
    hostile[13..15].copy_from_slice(&u16::MAX.to_be_bytes());
    assert!(decode::<Extended<'_>>(&hostile, v3).is_err());
}

#[test]
fn a_protocol_of_ones_own_may_use_the_tags_s_and_e() {
    // Streaming off: pgoutput's rules would refuse 'S' here, and 'E' without an 'S'.
    let mut encoder = Encoder::new(ProtocolVersion::V1, Streaming::Off).unwrap();
    let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off).unwrap();
    let chat = [
        Chat::Say(Say { text: "hi".into() }),
        Chat::Say(Say {
            text: "again".into(),
        }),
        Chat::Exit(Exit { seat: 3 }),
        Chat::Exit(Exit { seat: 4 }),
    ];
    for message in &chat {
        let bytes = encoder.encode(message).unwrap();
        let decoded: Chat<'_> = decoder.decode_as(&bytes).unwrap();
        assert_eq!(&decoded, message);
        assert!(!decoder.in_stream() && !encoder.in_stream());
    }
}
