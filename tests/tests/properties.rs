//! Property tests driven by `arbitrary`: a seeded generator feeds random bytes to
//! `Unstructured`, so every run checks the same many thousands of inputs and a failure
//! prints the seed that reproduces it.

use arbitrary::{Arbitrary, Unstructured};
use pgoutput_codec::{
    decode, encode, ClientMessage, Ctx, Decoder, Encode, Encoder, Outline, PgOutputMessage,
    ProtocolVersion, ServerMessage, StreamStart, StreamStop, Streaming, Tagged, Xid,
};
use pgoutput_tests::{all_cases, fit_to_context, hex};

/// SplitMix64: small, fast, and good enough to spread test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Every context PostgreSQL can negotiate, inside and outside a stream block.
fn all_contexts() -> Vec<Ctx> {
    let mut out = Vec::new();
    for version in ProtocolVersion::ALL {
        for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
            let Ok(ctx) = Ctx::new(version, streaming) else {
                continue;
            };
            out.push(ctx);
            if let Ok(in_block) = ctx.with_in_stream(true) {
                out.push(in_block);
            }
        }
    }
    out
}

const ITERATIONS: u64 = 20_000;

#[test]
fn encode_then_decode_gives_back_the_message_or_a_context_error() {
    let (mut encoded, mut refused) = (0, 0);
    for seed in 0..ITERATIONS {
        let mut rng = Rng(seed);
        let data = rng.bytes(256);
        let mut u = Unstructured::new(&data);
        let (Ok(ctx), Ok(message)) = (Ctx::arbitrary(&mut u), PgOutputMessage::arbitrary(&mut u))
        else {
            continue;
        };
        match encode(&message, ctx) {
            Ok(bytes) => {
                assert_eq!(bytes.len(), message.encoded_len(ctx), "seed {seed}");
                let decoded: PgOutputMessage<'_> = decode(&bytes, ctx)
                    .unwrap_or_else(|e| panic!("seed {seed}: {message:?} in {ctx}: {e}"));
                assert_eq!(decoded, message, "seed {seed} in {ctx}");
                encoded += 1;
            }
            Err(err) => {
                assert!(
                    err.is_context_error(),
                    "seed {seed}: {message:?} in {ctx}: {err}"
                );
                refused += 1;
            }
        }
    }
    // Both outcomes must really be exercised, or the property says nothing.
    assert!(encoded > ITERATIONS / 4, "only {encoded} messages encoded");
    assert!(refused > ITERATIONS / 20, "only {refused} context errors");
}

/// Decoding arbitrary bytes never panics, and whatever decodes is canonical: it re-encodes
/// to exactly the input.
#[test]
fn arbitrary_bytes_never_panic_and_decoded_bytes_are_canonical() {
    let contexts = all_contexts();
    let mut decoded = 0;
    // Random bytes rarely form a whole message, so this one runs longer.
    for seed in 0..10 * ITERATIONS {
        let mut rng = Rng(seed ^ 0xA5A5);
        let mut bytes = rng.bytes(64);
        // Mostly known tags, so decoding gets past the first byte.
        let tags: Vec<u8> = PgOutputMessage::TAGS.iter().collect();
        if let Some(first) = bytes.first_mut() {
            if rng.below(8) > 0 {
                *first = tags[rng.below(tags.len())];
            }
        }
        let ctx = contexts[rng.below(contexts.len())];
        if let Ok(message) = decode::<PgOutputMessage<'_>>(&bytes, ctx) {
            let again = encode(&message, ctx).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(hex(&again), hex(&bytes), "seed {seed} in {ctx}");
            decoded += 1;
        }
    }
    assert!(decoded > 200, "only {decoded} random inputs decoded");
}

/// Valid messages with random damage: flipped bytes, cuts, insertions.
#[test]
fn mutated_messages_never_panic() {
    let valid: Vec<_> = all_cases()
        .into_iter()
        .map(|case| (encode(&case.value, case.ctx).unwrap(), case.ctx))
        .collect();
    let contexts = all_contexts();
    for seed in 0..ITERATIONS {
        let mut rng = Rng(seed ^ 0x5A5A_0000);
        let (original, original_ctx) = &valid[rng.below(valid.len())];
        let mut bytes = original.clone();
        for _ in 0..=rng.below(3) {
            match rng.below(3) {
                0 if !bytes.is_empty() => {
                    let i = rng.below(bytes.len());
                    bytes[i] ^= 1 << rng.below(8);
                }
                1 => bytes.truncate(rng.below(bytes.len() + 1)),
                _ => {
                    let i = rng.below(bytes.len() + 1);
                    bytes.insert(i, rng.next() as u8);
                }
            }
        }
        // Sometimes the right context, sometimes any.
        let ctx = if rng.below(2) == 0 {
            *original_ctx
        } else {
            contexts[rng.below(contexts.len())]
        };
        // The outline reads a prefix of what decode reads: it never panics, and where
        // the message decodes it says what the message says.
        let outline = Decoder::with_ctx(ctx).outline(&bytes);
        if let Ok(message) = decode::<PgOutputMessage<'_>>(&bytes, ctx) {
            assert_eq!(encode(&message, ctx).unwrap(), bytes, "seed {seed}");
            if let Ok(outline) = outline {
                assert_eq!(outline, Outline::of(&message), "seed {seed}");
            }
        }
    }
}

/// Whole sessions: random sequences of messages with stream blocks, encoded by the session
/// encoder, decode back identically with the session decoder, which tracks the blocks.
#[test]
fn sessions_round_trip() {
    let mut messages_checked = 0;
    let mut blocks = 0;
    for seed in 0..2_000u64 {
        let mut rng = Rng(seed ^ 0x5E55_1011);
        let data = rng.bytes(4096);
        let mut u = Unstructured::new(&data);
        let Ok(options) = Ctx::arbitrary(&mut u) else {
            continue;
        };
        let options = options.with_in_stream(false).unwrap();
        let mut encoder = Encoder::with_ctx(options);
        let mut decoder = Decoder::with_ctx(options);
        let mut outliner = Decoder::with_ctx(options);
        let mut sent = Vec::new();
        let mut frames = Vec::new();
        for _ in 0..rng.below(40) {
            let streaming = options.streaming() != Streaming::Off;
            let mut message = match rng.below(10) {
                0 if streaming && !encoder.in_stream() => {
                    blocks += 1;
                    PgOutputMessage::StreamStart(StreamStart {
                        xid: Xid(744),
                        first_segment: rng.below(2) == 0,
                    })
                }
                1 if encoder.in_stream() => PgOutputMessage::StreamStop(StreamStop),
                _ => match PgOutputMessage::arbitrary(&mut u) {
                    Ok(message) => message,
                    Err(_) => break,
                },
            };
            // Keep to what the protocol allows here, as a real server does.
            let tag = message.tag();
            let allowed = match tag {
                b'S' => streaming && !encoder.in_stream(),
                b'E' => encoder.in_stream(),
                b'c' | b'A' | b'p' => !encoder.in_stream(),
                _ => true,
            };
            if !allowed {
                continue;
            }
            fit_to_context(&mut message, encoder.ctx());
            let bytes = encoder
                .encode(&message)
                .unwrap_or_else(|e| panic!("seed {seed}: {message:?} in {}: {e}", encoder.ctx()));
            frames.push(bytes);
            sent.push(message);
        }
        for (frame, message) in frames.iter().zip(&sent) {
            let decoded = decoder.decode(frame).unwrap_or_else(|e| {
                panic!("seed {seed}: {} in {}: {e}", hex(frame), decoder.ctx())
            });
            assert_eq!(&decoded, message, "seed {seed}");
            // The outline follows the session as the decoder does, and says the same.
            let outline = outliner
                .outline(frame)
                .unwrap_or_else(|e| panic!("seed {seed}: outline of {}: {e}", hex(frame)));
            assert_eq!(outline, Outline::of(message), "seed {seed}");
            messages_checked += 1;
        }
        assert_eq!(decoder.ctx(), encoder.ctx(), "seed {seed}");
        assert_eq!(outliner.ctx(), encoder.ctx(), "seed {seed}");
    }
    assert!(
        messages_checked > 10_000,
        "only {messages_checked} messages"
    );
    assert!(blocks > 500, "only {blocks} stream blocks");
}

#[test]
fn envelope_round_trips_and_never_panics() {
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let (mut server, mut client) = (0, 0);
    for seed in 0..ITERATIONS {
        let mut rng = Rng(seed ^ 0xE4E1_0BE0);
        let data = rng.bytes(128);
        let mut u = Unstructured::new(&data);
        if let Ok(message) = ServerMessage::arbitrary(&mut u) {
            let bytes = encode(&message, v1).unwrap();
            assert_eq!(decode::<ServerMessage<'_>>(&bytes, v1).unwrap(), message);
            server += 1;
        }
        if let Ok(message) = ClientMessage::arbitrary(&mut u) {
            let bytes = encode(&message, v1).unwrap();
            assert_eq!(decode::<ClientMessage>(&bytes, v1).unwrap(), message);
            client += 1;
        }
        let _ = decode::<ServerMessage<'_>>(&data, v1);
        let _ = decode::<ClientMessage>(&data, v1);
    }
    assert!(
        server > 1000 && client > 1000,
        "{server} server, {client} client messages"
    );
}
