//! Hostile input: truncated, malformed and oversized messages fail with their own error
//! kind, at the right offset, in the right field, without panicking and without allocating
//! from lengths read off the wire.
#![allow(unsafe_code)] // the counting allocator below

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use pgoutput_codec::{
    decode, encode, DecodeError, DecodeErrorKind, Message, PgOutputMessage, ProtocolVersion,
    StreamAbort, Streaming,
};
use pgoutput_tests::{ctx, message_cases, stream_abort_cases, unhex};

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

#[test]
fn every_proper_prefix_fails_with_a_positioned_error() {
    let mut checked = 0;
    for case in message_cases() {
        let bytes = encode(&case.value, case.ctx).unwrap();
        for len in 0..bytes.len() {
            let err = decode::<Message<'_>>(&bytes[..len], case.ctx).unwrap_err();
            assert!(err.offset() <= len, "{}: {err}", case.name);
            assert_eq!(err.message(), Some("Message"), "{}: {err}", case.name);
            assert!(err.field().is_some(), "{}: {err}", case.name);
            let via_enum = decode::<PgOutputMessage<'_>>(&bytes[..len], case.ctx).unwrap_err();
            assert_eq!(via_enum.offset(), err.offset());
            assert!(via_enum.field().is_some());
            checked += 1;
        }
    }
    for case in stream_abort_cases() {
        let bytes = encode(&case.value, case.ctx).unwrap();
        for len in 0..bytes.len() {
            let err = decode::<StreamAbort>(&bytes[..len], case.ctx).unwrap_err();
            assert_eq!(err.message(), Some("StreamAbort"), "{}: {err}", case.name);
            assert!(err.offset() <= len);
            checked += 1;
        }
    }
    assert!(checked > 200, "only {checked} prefixes checked");
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
    let err = decode::<PgOutputMessage<'_>>(b"Zxyz", v1).unwrap_err();
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'Z',
            expected: b"MA",
        },
        0,
        "tag",
    );
    assert_eq!(err.message(), Some("PgOutputMessage"));
    assert_eq!(
        err.to_string(),
        "unknown tag 'Z' (0x5A) at byte 0 in PgOutputMessage.tag; expected one of 'M' (0x4D), 'A' (0x41)"
    );
    let err = decode::<Message<'_>>(b"A\0\0\0\x01\0\0\0\x01", v1).unwrap_err();
    assert_error(
        &err,
        DecodeErrorKind::UnknownTag {
            found: b'A',
            expected: b"M",
        },
        0,
        "tag",
    );
    let err = decode::<PgOutputMessage<'_>>(b"\x00", v1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown tag 0x00 at byte 0 in PgOutputMessage.tag; expected one of 'M' (0x4D), 'A' (0x41)"
    );
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

#[test]
fn decoding_a_valid_message_allocates_nothing() {
    for case in message_cases() {
        let bytes = encode(&case.value, case.ctx).unwrap();
        let (message, allocated) = allocated_by(|| decode::<PgOutputMessage<'_>>(&bytes, case.ctx));
        assert!(message.is_ok());
        assert_eq!(
            allocated, 0,
            "{}: decoding allocated {allocated} bytes",
            case.name
        );
    }
}
