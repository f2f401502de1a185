//! Hostile input: truncated, malformed and oversized messages fail with their own error
//! kind, at the right offset, in the right field, without panicking and without allocating
//! from lengths read off the wire.
#![allow(unsafe_code)] // the counting allocator below

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pgoutput_codec::{
    decode, encode, ColumnValue, Ctx, DecodeError, DecodeErrorKind, Decoder, Message, OldTuple,
    PgOutputMessage, PrimaryKeepalive, ProtocolVersion, ReplicaIdentity, ServerMessage,
    StreamAbort, Streaming, TagSet, Tagged, XLogData,
};
use pgoutput_tests::{all_cases, ctx, message_cases, unhex};

/// Counts the bytes this thread allocates, so a test can prove a decode allocated nothing
/// (or nothing proportional to a length field).
struct CountingAlloc;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|n| n.set(n.get() + layout.size()));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Bytes allocated by this thread while running `f`.
fn allocated_by<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = ALLOCATED.with(Cell::get);
    let out = f();
    (out, ALLOCATED.with(Cell::get) - before)
}

/// Asserts a decode error's kind, offset and innermost field.
#[track_caller]
fn assert_error(err: &DecodeError, kind: DecodeErrorKind, offset: usize, field: &str) {
    assert_eq!(err.kind(), kind, "{err}");
    assert_eq!(err.offset(), offset, "{err}");
    assert_eq!(err.field(), Some(field), "{err}");
}

/// The Rust type of a message, as errors name it: `StreamAbort`.
fn variant_name(message: &PgOutputMessage<'_>) -> String {
    let debug = format!("{message:?}");
    debug
        .split(['(', ' '])
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn every_proper_prefix_fails_with_a_positioned_error() {
    let mut checked = 0;
    for case in all_cases() {
        let bytes = encode(&case.value, case.ctx).unwrap();
        let name = variant_name(&case.value);
        for len in 0..bytes.len() {
            let err = decode::<PgOutputMessage<'_>>(&bytes[..len], case.ctx).unwrap_err();
            let expected = if len == 0 {
                "PgOutputMessage"
            } else {
                name.as_str()
            };
            assert!(err.offset() <= len, "{}[..{len}]: {err}", case.name);
            assert_eq!(
                err.message(),
                Some(expected),
                "{}[..{len}]: {err}",
                case.name
            );
            assert!(err.field().is_some(), "{}[..{len}]: {err}", case.name);
            let path = err.path();
            assert!(
                path.windows(2).all(|w| w[0] != w[1]),
                "{}[..{len}]: {err}",
                case.name
            );
            checked += 1;
        }
    }
    assert!(checked > 1000, "only {checked} prefixes checked");
}

#[test]
fn truncation_names_the_field_it_cut() {
    // Stream Abort, protocol 4 parallel: tag 0, xid 1..5, subxid 5..9, lsn 9..17, time 17..25.
    let parallel = ctx::streaming(ProtocolVersion::V4, Streaming::Parallel);
    let bytes = unhex("41000002e8000002e900000000014ffe70000304674534e714");
    let fields = [
        (0, "tag"),
        (1, "xid"),
        (5, "subtransaction_xid"),
        (9, "abort_lsn"),
        (17, "abort_timestamp"),
        (25, ""),
    ];
    for window in fields.windows(2) {
        let ((start, field), (end, _)) = (window[0], window[1]);
        for len in start..end {
            let err = decode::<StreamAbort>(&bytes[..len], parallel).unwrap_err();
            let kind = DecodeErrorKind::UnexpectedEnd {
                needed: (end - start).max(1),
                available: len - start,
            };
            assert_error(&err, kind, start, field);
        }
    }
    let err = decode::<StreamAbort>(&bytes[..21], parallel).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unexpected end of input at byte 17 in StreamAbort.abort_timestamp (needed 8, had 4)"
    );

    // Message inside a stream block: tag, xid 1..5, flags 5, lsn 6..14, prefix 14.., length, content.
    let in_block = ctx::in_block(ProtocolVersion::V2, Streaming::On);
    let message = encode(&message_cases()[3].value, in_block).unwrap();
    let cut = |len: usize| decode::<Message<'_>>(&message[..len], in_block).unwrap_err();
    assert_eq!(cut(3).field(), Some("xid"));
    assert_eq!(cut(5).field(), Some("flags"));
    assert_eq!(cut(9).field(), Some("lsn"));
    assert_error(&cut(16), DecodeErrorKind::MissingNul, 14, "prefix");
    assert_eq!(cut(22).field(), Some("content"));
    assert_error(
        &cut(message.len() - 1),
        DecodeErrorKind::LengthTooLarge {
            length: 8,
            available: 7,
        },
        20,
        "content",
    );
}

#[test]
fn unknown_tags() {
    let v1 = ctx::v1();
    let all = PgOutputMessage::TAGS;
    for tag in (0..=255u8).filter(|&tag| !all.contains(tag)) {
        let err = decode::<PgOutputMessage<'_>>(&[tag, 0, 0, 0, 0], v1).unwrap_err();
        assert_error(
            &err,
            DecodeErrorKind::UnknownTag {
                found: tag,
                expected: all,
            },
            0,
            "tag",
        );
        assert_eq!(err.message(), Some("PgOutputMessage"));
    }
    let err = decode::<PgOutputMessage<'_>>(b"Zxyz", v1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown tag 'Z' (0x5A) at byte 0 in PgOutputMessage.tag; expected one of 'A' (0x41), \
         'B' (0x42), 'C' (0x43), 'D' (0x44), 'E' (0x45), 'I' (0x49), 'K' (0x4B), 'M' (0x4D), \
         'O' (0x4F), 'P' (0x50), 'R' (0x52), 'S' (0x53), 'T' (0x54), 'U' (0x55), 'Y' (0x59), \
         'b' (0x62), 'c' (0x63), 'p' (0x70), 'r' (0x72)"
    );
    let err = decode::<Message<'_>>(b"A\0\0\0\x01\0\0\0\x01", v1).unwrap_err();
    let expected = TagSet::single(b'M');
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'A',
            expected,
        },
        0,
        "tag",
    );
    // Envelope tags are another layer: 'w' is not a pgoutput message.
    let err = decode::<PgOutputMessage<'_>>(b"w", v1).unwrap_err();
    assert!(matches!(
        err.kind(),
        DecodeErrorKind::UnknownTag { found: b'w', .. }
    ));
    let err = decode::<PgOutputMessage<'_>>(b"", v1).unwrap_err();
    assert_error(
        &err,
        DecodeErrorKind::UnexpectedEnd {
            needed: 1,
            available: 0,
        },
        0,
        "tag",
    );
}

#[test]
fn message_flags_other_than_0_or_1() {
    let mut bytes = encode(&message_cases()[0].value, ctx::v1()).unwrap();
    for flags in [2u8, 3, 0x80, 0xFF] {
        bytes[1] = flags;
        let err = decode::<Message<'_>>(&bytes, ctx::v1()).unwrap_err();
        let kind = DecodeErrorKind::InvalidValue {
            found: flags.into(),
            expected: "0 (non-transactional) or 1 (transactional)",
        };
        assert_error(&err, kind, 1, "flags");
    }
    // Inside a stream block the flags come after the xid.
    let in_block = ctx::in_block(ProtocolVersion::V4, Streaming::On);
    let mut bytes = encode(&message_cases()[3].value, in_block).unwrap();
    bytes[5] = 7;
    let err = decode::<Message<'_>>(&bytes, in_block).unwrap_err();
    assert_eq!((err.offset(), err.field()), (5, Some("flags")));
}

#[test]
fn prefix_without_nul() {
    // Tag, flags, LSN, then a prefix that runs to the end.
    let bytes = b"M\x00\x00\x00\x00\x00\x00\x00\x00\x10no terminator";
    let err = decode::<Message<'_>>(bytes, ctx::v1()).unwrap_err();
    assert_error(&err, DecodeErrorKind::MissingNul, 10, "prefix");
}

/// A Message whose content length field says `length`, followed by `tail`.
fn message_with_length(length: i32, tail: &[u8]) -> Vec<u8> {
    let mut bytes = b"M\x01\x00\x00\x00\x00\x00\x00\x00\x10p\x00".to_vec();
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend_from_slice(tail);
    bytes
}

#[test]
fn negative_content_length() {
    for length in [-1, -2, i32::MIN] {
        let bytes = message_with_length(length, b"abc");
        let err = decode::<Message<'_>>(&bytes, ctx::v1()).unwrap_err();
        assert_error(
            &err,
            DecodeErrorKind::NegativeLength {
                length: length.into(),
            },
            12,
            "content",
        );
    }
}

#[test]
fn oversized_content_length_allocates_nothing_from_it() {
    let bytes = message_with_length(i32::MAX, b"only a few bytes");
    let (result, allocated) = allocated_by(|| decode::<Message<'_>>(&bytes, ctx::v1()));
    let err = result.unwrap_err();
    let kind = DecodeErrorKind::LengthTooLarge {
        length: i32::MAX as u64,
        available: 16,
    };
    assert_error(&err, kind, 12, "content");
    // Only the boxed error itself: nothing sized by the 2 GiB length.
    assert!(allocated < 512, "decode allocated {allocated} bytes");
}

#[test]
fn trailing_bytes() {
    for case in message_cases() {
        let mut bytes = encode(&case.value, case.ctx).unwrap();
        let end = bytes.len();
        bytes.push(0);
        let err = decode::<Message<'_>>(&bytes, case.ctx).unwrap_err();
        assert_eq!(err.kind(), DecodeErrorKind::TrailingBytes { remaining: 1 });
        assert_eq!(err.offset(), end);
    }
}

/// Every message decodes without allocating: strings and bytes borrow from the input,
/// and repeated parts (tuples, Relation's columns, Truncate's OIDs) are validated views of
/// it. Reading their elements allocates nothing either.
#[test]
fn decoding_a_valid_message_allocates_nothing() {
    for case in all_cases() {
        let bytes = encode(&case.value, case.ctx).unwrap();
        let (message, allocated) = allocated_by(|| {
            let message = decode::<PgOutputMessage<'_>>(&bytes, case.ctx)?;
            let values = match &message {
                PgOutputMessage::Insert(m) => m.new_tuple.columns.iter().count(),
                PgOutputMessage::Relation(m) => m.columns.iter().count(),
                PgOutputMessage::Truncate(m) => m.relation_oids.iter().count(),
                _ => 0,
            };
            Ok::<_, DecodeError>((message, values))
        });
        message.unwrap();
        assert_eq!(
            allocated, 0,
            "{}: decoding allocated {allocated} bytes",
            case.name
        );
    }
}

/// Bytes of `hex` decoded in `ctx`, expecting an error.
#[track_caller]
fn decode_err(hex: &str, ctx: Ctx) -> DecodeError {
    let bytes = unhex(hex);
    match decode::<PgOutputMessage<'_>>(&bytes, ctx) {
        Ok(message) => panic!("{hex} decoded as {message:?}"),
        Err(err) => err,
    }
}

#[test]
fn oversized_counts_allocate_nothing_from_them() {
    let v1 = ctx::v1();
    // Insert whose TupleData claims 65535 columns but has one byte left.
    let (err, allocated) = allocated_by(|| decode_err("490000400a4effff6e", v1));
    assert_error(
        &err,
        DecodeErrorKind::CountTooLarge {
            count: 65_535,
            needed: 65_535,
            available: 1,
        },
        6,
        "columns",
    );
    assert_eq!(err.message(), Some("Insert"));
    assert!(allocated < 512, "allocated {allocated} bytes");
    // Truncate claiming 2^32 - 1 relations: four bytes each.
    let (err, allocated) = allocated_by(|| decode_err("54ffffffff000000400a", v1));
    let kind = DecodeErrorKind::CountTooLarge {
        count: u32::MAX.into(),
        needed: u64::from(u32::MAX) * 4,
        available: 4,
    };
    assert_error(&err, kind, 1, "relation_oids");
    assert!(allocated < 512, "allocated {allocated} bytes");
    // Relation claiming 65535 columns: ten bytes each at least.
    let (err, allocated) = allocated_by(|| decode_err("520000400a7000720064ffff00", v1));
    assert_error(
        &err,
        DecodeErrorKind::CountTooLarge {
            count: 65_535,
            needed: 655_350,
            available: 1,
        },
        10,
        "columns",
    );
    assert_eq!(
        err.to_string(),
        "count 65535 too large at byte 10 in Relation.columns (the elements need at least 655350 bytes, only 1 left)"
    );
    assert!(allocated < 512, "allocated {allocated} bytes");
    // A Relation whose count its bytes could hold at one byte per column, but not at the
    // ten a column takes at least: refused before allocating 40 bytes per claimed column.
    let mut relation = unhex("520000400a7000720064");
    relation.extend_from_slice(&1000u16.to_be_bytes());
    relation.extend_from_slice(&[0; 9_000]);
    let (result, allocated) =
        allocated_by(|| decode::<pgoutput_codec::Relation<'_>>(&relation, v1));
    assert!(matches!(
        result.unwrap_err().kind(),
        DecodeErrorKind::CountTooLarge { count: 1000, .. }
    ));
    assert!(allocated < 512, "allocated {allocated} bytes");
}

/// The minimum wire sizes the counts are checked against, and the bound they give:
/// decoding allocates nothing, and an owned copy never takes more than
/// `size_of::<T>() / MIN_WIRE_LEN` bytes per input byte for a counted part (the README
/// states it).
#[test]
fn heap_during_decode_is_a_small_multiple_of_the_input() {
    use pgoutput_codec::{ColumnValue, Decode, Insert, Oid, Relation, RelationColumn};
    assert_eq!(<ColumnValue<'_> as Decode<'_>>::MIN_WIRE_LEN, 1);
    assert_eq!(<RelationColumn<'_> as Decode<'_>>::MIN_WIRE_LEN, 10);
    assert_eq!(<Oid as Decode<'_>>::MIN_WIRE_LEN, 4);
    assert_eq!(<Insert<'_> as Decode<'_>>::MIN_WIRE_LEN, 8);
    assert_eq!(<Relation<'_> as Decode<'_>>::MIN_WIRE_LEN, 10);
    let ratio = |size: usize, min: usize| size.div_ceil(min);
    let column_ratio = ratio(std::mem::size_of::<ColumnValue<'_>>(), 1);
    let relation_ratio = ratio(std::mem::size_of::<RelationColumn<'_>>(), 10);
    assert_eq!(ratio(std::mem::size_of::<Oid>(), 4), 1);
    assert!(
        column_ratio <= 32 && relation_ratio <= 4,
        "{column_ratio} {relation_ratio}"
    );
    // The worst cases, measured: a row of 65,535 NULLs (one byte each), a Relation of
    // 6,000 one-letter columns, a Truncate of 16,000 relations.
    let v1 = ctx::v1();
    let mut nulls = unhex("490000400a4effff");
    nulls.extend(std::iter::repeat_n(b'n', 65_535));
    let mut relation = unhex("520000400a7000720064");
    relation.extend_from_slice(&6000u16.to_be_bytes());
    for _ in 0..6000 {
        relation.extend_from_slice(b"\x01a\0\0\0\0\x17\xff\xff\xff\xff");
    }
    let mut truncate = unhex("54");
    truncate.extend_from_slice(&16_000u32.to_be_bytes());
    truncate.push(0);
    for oid in 0..16_000u32 {
        truncate.extend_from_slice(&oid.to_be_bytes());
    }
    for (bytes, bound) in [
        (&nulls, column_ratio),
        (&relation, relation_ratio),
        (&truncate, 1),
    ] {
        let (message, allocated) = allocated_by(|| decode::<PgOutputMessage<'_>>(bytes, v1));
        let message = message.unwrap();
        assert_eq!(allocated, 0, "decoding allocated {allocated} bytes");
        // Detached from its input, the value takes at most `bound` bytes per input byte.
        let (owned, allocated) = allocated_by(|| pgoutput_codec::IntoOwned::into_owned(message));
        assert!(
            allocated <= bound * bytes.len(),
            "{allocated} bytes allocated for {} input bytes",
            bytes.len()
        );
        drop(owned);
    }
}

#[test]
fn negative_and_oversized_value_lengths() {
    let v1 = ctx::v1();
    // Insert, one text column of length -1 (which is not NULL here: NULL is 'n').
    let err = decode_err("490000400a4e000174ffffffff", v1);
    assert_error(&err, DecodeErrorKind::NegativeLength { length: -1 }, 9, "0");
    assert_eq!(err.message(), Some("Insert"));
    assert_eq!(
        err.to_string(),
        "negative length -1 at byte 9 in Insert.new_tuple > TupleData.columns > ColumnValue::Text.0"
    );
    let (err, allocated) = allocated_by(|| decode_err("490000400a4e0001627fffffff00", v1));
    let kind = DecodeErrorKind::LengthTooLarge {
        length: i32::MAX as u64,
        available: 1,
    };
    assert_error(&err, kind, 9, "0");
    assert!(allocated < 512, "allocated {allocated} bytes");
}

#[test]
fn unused_flags_must_be_zero() {
    let mut checked = 0;
    for case in all_cases() {
        // The messages whose flags byte PostgreSQL's reader checks.
        let offset = match &case.value {
            PgOutputMessage::Commit(_)
            | PgOutputMessage::Prepare(_)
            | PgOutputMessage::CommitPrepared(_)
            | PgOutputMessage::RollbackPrepared(_)
            | PgOutputMessage::StreamPrepare(_) => 1,
            PgOutputMessage::StreamCommit(_) => 5,
            _ => continue,
        };
        let mut bytes = encode(&case.value, case.ctx).unwrap();
        bytes[offset] = 1;
        let err = decode::<PgOutputMessage<'_>>(&bytes, case.ctx).unwrap_err();
        let kind = DecodeErrorKind::InvalidValue {
            found: 1,
            expected: "0",
        };
        assert_error(&err, kind, offset, "flags");
        checked += 1;
    }
    assert_eq!(checked, 6);
}

#[test]
fn invalid_bytes_in_fixed_positions() {
    let v1 = ctx::v1();
    let on = ctx::streaming(ProtocolVersion::V2, Streaming::On);
    // Stream Start's first_segment is 0 or 1.
    let err = decode_err("53000002e802", on);
    assert_error(
        &err,
        DecodeErrorKind::InvalidValue {
            found: 2,
            expected: "0 (false) or 1 (true)",
        },
        5,
        "first_segment",
    );
    // A column kind that is none of n, u, t, b.
    let err = decode_err("490000400a4e000178", v1);
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'x',
            expected: ColumnValue::TAGS,
        },
        8,
        "tag",
    );
    assert_eq!(err.message(), Some("Insert"));
    // Replica identity other than d, n, f, i.
    let err = decode_err("520000400a70007200780000", v1);
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'x',
            expected: ReplicaIdentity::TAGS,
        },
        9,
        "tag",
    );
    // Insert without 'N' before its tuple.
    let err = decode_err("490000400a4b0000", v1);
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'K',
            expected: TagSet::single(b'N'),
        },
        5,
        "new_tuple",
    );
    // Update with a byte that is none of K, O, N after the relation OID.
    let err = decode_err("550000400a580000", v1);
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'X',
            expected: TagSet::single(b'N'),
        },
        5,
        "new_tuple",
    );
    // Delete needs K or O.
    let err = decode_err("440000400a4e0000", v1);
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'N',
            expected: OldTuple::TAGS,
        },
        5,
        "tag",
    );
    assert_eq!(err.message(), Some("Delete"));
}

#[test]
fn envelope_errors() {
    let v1 = ctx::v1();
    let err = decode::<ServerMessage<'_>>(b"w\0\0\0\0\0\0\0\x01\0\0", v1).unwrap_err();
    assert_eq!(
        (err.message(), err.field(), err.offset()),
        (Some("XLogData"), Some("wal_end"), 9)
    );
    let mut keepalive = encode(
        &PrimaryKeepalive {
            wal_end: pgoutput_codec::Lsn(1),
            send_time: pgoutput_codec::PgTimestamp(2),
            reply_requested: true,
        },
        v1,
    )
    .unwrap();
    keepalive[17] = 2;
    let err = decode::<PrimaryKeepalive>(&keepalive, v1).unwrap_err();
    assert_eq!((err.field(), err.offset()), (Some("reply_requested"), 17));
    // XLogData's payload is whatever remains, even nothing.
    let header = unhex("77000000000000000100000000000000010000000000000002");
    let empty: XLogData<'_> = decode(&header, v1).unwrap();
    assert!(empty.data.is_empty());
}

#[test]
fn protocol_order_violations_are_errors_that_leave_the_session_unchanged() {
    let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On).unwrap();
    let order = |err: DecodeError| match err.kind() {
        DecodeErrorKind::OutOfOrder { reason, .. } => reason,
        other => panic!("expected an order error, got {other:?}"),
    };
    assert_eq!(
        order(decoder.decode(b"E").unwrap_err()),
        "Stream Stop without a Stream Start"
    );
    decoder.decode(&unhex("53000002e801")).unwrap();
    let reason = order(decoder.decode(&unhex("53000002e800")).unwrap_err());
    assert!(
        reason.starts_with("Stream Start inside a stream block"),
        "{reason}"
    );
    let commit = unhex("63000002e800000000016b374d48000000016b374e10000304674534e714");
    let err = decoder.decode(&commit).unwrap_err();
    assert!(order(err.clone()).contains("inside a stream block: Stream Stop comes first"));
    assert!(
        err.to_string()
            .starts_with("message 'c' (0x63) out of order"),
        "{err}"
    );
    let err = decoder.decode(&unhex("41000002e8000002e9")).unwrap_err();
    assert!(order(err.clone()).contains("inside a stream block: Stream Stop comes first"));
    assert!(
        err.to_string()
            .starts_with("message 'A' (0x41) out of order"),
        "{err}"
    );
    // Still inside the block: the Insert carries its xid.
    assert!(decoder.in_stream());
    let insert = unhex("49000002e90000400a4e0000");
    let insert = decoder.decode(&insert).unwrap();
    assert!(matches!(insert, PgOutputMessage::Insert(i) if i.xid.is_some()));
    decoder.decode(b"E").unwrap();
    decoder.decode(&commit).unwrap();
    // Without streaming there are no blocks at all.
    let mut plain = Decoder::new(ProtocolVersion::V1, Streaming::Off).unwrap();
    let err = plain.decode(&unhex("53000002e801")).unwrap_err();
    assert!(order(err.clone()).contains("without streaming"), "{err}");
    assert_eq!(err.to_string(), "message 'S' (0x53) out of order at byte 0 in PgOutputMessage.tag: Stream Start in a session without streaming: negotiate streaming on or parallel");
    // But PostgreSQL 18's unsolicited Stream Abort decodes.
    assert!(plain.decode(&unhex("41000002e8000002e9")).is_ok());
    // A malformed message does not move the session either.
    let mut decoder = Decoder::new(ProtocolVersion::V2, Streaming::On).unwrap();
    assert!(decoder.decode(&unhex("53000002")).is_err());
    assert!(!decoder.in_stream());
}
