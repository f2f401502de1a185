//! The JSON form (the `serde` feature): one object per message with a snake_case `"type"`,
//! exact in both directions for every message.

use arbitrary::{Arbitrary, Unstructured};
use pgoutput_codec::{
    decode, encode, ClientMessage, Ctx, Lsn, PgOutputMessage, PgStr, PgTimestamp, ProtocolVersion,
    ServerMessage,
};
use pgoutput_tests::all_cases;

/// JSON → message → JSON and bytes → JSON → bytes, exactly.
fn assert_json_round_trip(message: &PgOutputMessage<'_>, ctx: Ctx) -> String {
    let json = serde_json::to_string(message).unwrap();
    let back: PgOutputMessage<'_> =
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert_eq!(&back, message, "{json}");
    assert_eq!(serde_json::to_string(&back).unwrap(), json);
    if let Ok(bytes) = encode(message, ctx) {
        assert_eq!(encode(&back, ctx).unwrap(), bytes, "{json}");
    }
    json
}

#[test]
fn every_case_round_trips_through_json() {
    let mut lines = String::new();
    for case in all_cases() {
        let json = assert_json_round_trip(&case.value, case.ctx);
        lines.push_str(&format!("{}: {json}\n", case.name));
    }
    insta::assert_snapshot!(lines);
}

#[test]
fn arbitrary_messages_round_trip_through_json() {
    let mut checked = 0;
    for seed in 0..5_000u64 {
        let data: Vec<u8> = (0..256u64)
            .map(|i| (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 57)) as u8 ^ i as u8)
            .collect();
        let mut u = Unstructured::new(&data);
        if let (Ok(ctx), Ok(message)) = (Ctx::arbitrary(&mut u), PgOutputMessage::arbitrary(&mut u))
        {
            assert_json_round_trip(&message, ctx);
            checked += 1;
        }
        let mut u = Unstructured::new(&data);
        if let Ok(message) = ServerMessage::arbitrary(&mut u) {
            let json = serde_json::to_string(&message).unwrap();
            assert_eq!(
                serde_json::from_str::<ServerMessage<'_>>(&json).unwrap(),
                message
            );
        }
        if let Ok(message) = ClientMessage::arbitrary(&mut u) {
            let json = serde_json::to_string(&message).unwrap();
            assert_eq!(
                serde_json::from_str::<ClientMessage>(&json).unwrap(),
                message
            );
        }
    }
    assert!(checked > 2_000, "only {checked}");
}

#[test]
fn value_forms() {
    assert_eq!(
        serde_json::to_string(&Lsn(0x1B4_6000)).unwrap(),
        r#""0/1B46000""#
    );
    assert_eq!(
        serde_json::to_string(&PgTimestamp(0)).unwrap(),
        r#""2000-01-01 00:00:00+00""#
    );
    assert_eq!(
        serde_json::to_string(&PgTimestamp(i64::MAX)).unwrap(),
        r#""infinity""#
    );
    // Bytes that are not UTF-8 keep every byte as hex; UTF-8 may come either way.
    assert_eq!(
        serde_json::to_string(&PgStr::from(&b"caf\xe9"[..])).unwrap(),
        r#"{"hex":"636166e9"}"#
    );
    assert_eq!(
        serde_json::from_str::<PgStr<'_>>(r#"{"hex":"636166e9"}"#).unwrap(),
        PgStr::from(&b"caf\xe9"[..])
    );
    assert_eq!(
        serde_json::from_str::<PgStr<'_>>(r#"{"hex":"6869"}"#).unwrap(),
        "hi"
    );
    assert!(serde_json::from_str::<PgStr<'_>>(r#"{"hex":"6"}"#).is_err());
    assert!(serde_json::from_str::<PgStr<'_>>(r#"{"base64":"aGk="}"#).is_err());
    assert!(serde_json::from_str::<Lsn>(r#""16/B374D848""#).is_ok());
    assert!(serde_json::from_str::<Lsn>(r#""16B374D848""#).is_err());
    let stop: PgOutputMessage<'_> = serde_json::from_str(r#"{"type":"stream_stop"}"#).unwrap();
    assert_eq!(
        encode(&stop, Ctx::plain(ProtocolVersion::V1)).unwrap(),
        b"E"
    );
    let err = serde_json::from_str::<PgOutputMessage<'_>>(r#"{"type":"bogus"}"#).unwrap_err();
    assert!(err.to_string().contains("unknown variant `bogus`"), "{err}");
    // A real message: bytes in, JSON out.
    let bytes = pgoutput_tests::unhex("41000002e8000002e9");
    let message: PgOutputMessage<'_> = decode(&bytes, Ctx::plain(ProtocolVersion::V1)).unwrap();
    assert_eq!(
        serde_json::to_string(&message).unwrap(),
        r#"{"type":"stream_abort","xid":744,"subtransaction_xid":745,"abort_lsn":null,"abort_timestamp":null}"#
    );
}

/// JSON and timestamp text from outside are untrusted: damaged input is an error, never a
/// panic (extreme years included).
#[test]
fn damaged_json_and_timestamps_never_panic() {
    let alphabet: Vec<char> = "0123456789-:. +\"{}[],abcdefxyz\\".chars().collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let jsons: Vec<String> = all_cases()
        .iter()
        .map(|c| serde_json::to_string(&c.value).unwrap())
        .collect();
    let mut parsed = 0;
    for _ in 0..20_000 {
        let mut chars: Vec<char> = jsons[next(jsons.len())].chars().collect();
        for _ in 0..=next(3) {
            let at = next(chars.len());
            chars[at] = alphabet[next(alphabet.len())];
        }
        let text: String = chars.into_iter().collect();
        parsed += usize::from(serde_json::from_str::<PgOutputMessage<'_>>(&text).is_ok());
    }
    assert!(parsed > 100, "only {parsed} damaged messages still parsed");
    for _ in 0..20_000 {
        let digits = |n: usize, next: &mut dyn FnMut(usize) -> usize| -> String {
            (0..n).map(|_| char::from(b'0' + next(10) as u8)).collect()
        };
        let year_len = 1 + next(19);
        let text = format!(
            "{}{}-{}-{} {}:{}:{}.{}+00",
            if next(2) == 0 { "-" } else { "" },
            digits(year_len, &mut next),
            digits(2, &mut next),
            digits(2, &mut next),
            digits(2, &mut next),
            digits(2, &mut next),
            digits(2, &mut next),
            digits(1 + next(6), &mut next)
        );
        if let Ok(ts) = text.parse::<PgTimestamp>() {
            assert_eq!(ts.to_string().parse::<PgTimestamp>(), Ok(ts), "{text}");
        }
    }
}
