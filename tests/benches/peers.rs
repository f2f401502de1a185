//! Side by side with the fastest complete peer, `pg_walstream`: the same bytes through our
//! session decoder and encoder and through `LogicalReplicationParser::parse_wal_message`
//! and `encode_streaming_message`, each doing the whole job (every field and column value
//! in the caller's hands), with a memcpy of the same bytes as the floor.
//!
//! ```text
//! cargo bench -p pgoutput-tests --bench peers            # the timing tables
//! cargo bench -p pgoutput-tests --bench peers -- --quick # fewer rounds
//! cargo bench -p pgoutput-tests --bench peers -- --corpus # the whole-corpus rows only
//! scripts/bench-callgrind                                # instructions per message
//! ```
//!
//! Timings are the best of several rounds (these machines vary by up to 50% from run to
//! run); compare the ratios of one run. Allocations are counted by a counting global
//! allocator over one pass of the whole corpus. `--side NAME --iterations N` runs one side
//! only, for callgrind (see `scripts/bench-callgrind`).

// The counting allocator is the one piece of unsafe: it forwards to the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pg_walstream::{
    encode_streaming_message, LogicalReplicationParser, StreamingReplicationMessage,
};
use pgoutput_codec::{
    ColumnValue, Ctx, Decoder, Encoder, Insert, IntoOwned, PgOutputMessage, ProtocolVersion,
    Streaming, TupleData,
};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One stream of pgoutput payloads and the options it was read with.
struct Stream {
    name: String,
    version: ProtocolVersion,
    streaming: Streaming,
    payloads: Vec<Vec<u8>>,
}

impl Stream {
    fn bytes(&self) -> usize {
        self.payloads.iter().map(Vec::len).sum()
    }
}

/// The real captures: the benchmark's own (`benches/data`: OLTP, bulk load, a transaction
/// streamed in parallel mode, two-phase; PostgreSQL 18, written by the live suite with
/// `PGOUTPUT_BENCH_CAPTURE`) and the CLI tests' (`crates/cli/tests/data`: every message type
/// from PostgreSQL 15 and 18). Each is a `# pgoutput decode --proto-version N --streaming
/// MODE` line, then a payload per line.
fn real_streams() -> Vec<Stream> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = [
        root.join("benches/data"),
        root.join("../crates/cli/tests/data"),
    ]
    .iter()
    .flat_map(|dir| std::fs::read_dir(dir).expect("the captures"))
    .map(|e| e.unwrap().path())
    .filter(|p| p.extension().is_some_and(|e| e == "hex"))
    .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let command = text
                .lines()
                .find(|l| l.starts_with("# pgoutput decode"))
                .expect("the decode command");
            let words: Vec<&str> = command.split_whitespace().collect();
            let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]);
            let version =
                ProtocolVersion::from_number(after("--proto-version").unwrap().parse().unwrap())
                    .unwrap();
            let streaming: Streaming = after("--streaming").unwrap_or("off").parse().unwrap();
            let payloads = text
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(|l| pgoutput_tests::unhex(l.trim()))
                .collect();
            Stream {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                version,
                streaming,
                payloads,
            }
        })
        .collect()
}

/// Synthetic worst cases, encoded by our encoder: an insert-heavy bulk load of 12-column
/// rows, very wide rows (400 columns), large TOASTed-size values (256 kB), and the
/// smallest messages (Begin/Commit pairs).
fn synthetic_streams() -> Vec<Stream> {
    let v1 = ProtocolVersion::V1;
    let encode_all = |messages: Vec<PgOutputMessage<'static>>| -> Vec<Vec<u8>> {
        let mut encoder = Encoder::new(v1, Streaming::Off).unwrap();
        messages
            .iter()
            .map(|m| encoder.encode(m).unwrap())
            .collect()
    };
    let insert = |columns: Vec<ColumnValue<'static>>| {
        PgOutputMessage::Insert(Insert {
            xid: None,
            relation_oid: pgoutput_codec::Oid(16385),
            new_tuple: TupleData::new(columns),
        })
    };
    let row = |i: usize, width: usize| -> Vec<ColumnValue<'static>> {
        (0..width)
            .map(|c| match c % 4 {
                0 => ColumnValue::Text(i.to_string().into_bytes().into()),
                1 => ColumnValue::Text(format!("name-{i}-{c}").into_bytes().into()),
                2 if i.is_multiple_of(7) => ColumnValue::Null,
                _ => ColumnValue::Text(format!("{}.{:02}", i * 13 % 10_000, c).into_bytes().into()),
            })
            .collect()
    };
    let cases = pgoutput_tests::all_cases();
    let case = |is: fn(&PgOutputMessage<'_>) -> bool| {
        cases
            .iter()
            .find(|c| is(&c.value))
            .map(|c| c.value.clone().into_owned())
            .unwrap()
    };
    let begin = case(|m| matches!(m, PgOutputMessage::Begin(_)));
    let commit = case(|m| matches!(m, PgOutputMessage::Commit(_)));
    let stream = |name: &str, messages| Stream {
        name: name.into(),
        version: v1,
        streaming: Streaming::Off,
        payloads: encode_all(messages),
    };
    vec![
        stream(
            "bulk-insert-12-columns",
            (0..2_000).map(|i| insert(row(i, 12))).collect(),
        ),
        stream(
            "wide-rows-400-columns",
            (0..50).map(|i| insert(row(i, 400))).collect(),
        ),
        stream(
            "toasted-values-256k",
            (0..8)
                .map(|i| {
                    insert(vec![ColumnValue::Text(
                        vec![b'a' + i as u8; 256 * 1024].into(),
                    )])
                })
                .collect(),
        ),
        stream(
            "tiny-begin-commit",
            (0..2_000)
                .map(|i| {
                    if i % 2 == 0 {
                        begin.clone()
                    } else {
                        commit.clone()
                    }
                })
                .collect(),
        ),
    ]
}

/// Decodes a stream with our session decoder, touching every value.
fn ours_decode(stream: &Stream) -> usize {
    let mut decoder = Decoder::new(stream.version, stream.streaming).unwrap();
    let mut seen = 0;
    for payload in &stream.payloads {
        let message = decoder.decode(black_box(payload)).unwrap();
        seen += touch(&message);
        black_box(&message);
    }
    seen
}

/// Reads what a consumer reads: every column value's bytes.
fn touch(message: &PgOutputMessage<'_>) -> usize {
    let tuple = |t: &TupleData<'_>| {
        t.columns
            .iter()
            .map(|c| c.bytes().map_or(0, <[u8]>::len))
            .sum()
    };
    match message {
        PgOutputMessage::Insert(m) => tuple(&m.new_tuple),
        PgOutputMessage::Update(m) => tuple(&m.new_tuple),
        _ => 1,
    }
}

/// Decodes a stream with pg_walstream's parser, touching every value.
fn peer_decode(stream: &Stream) -> usize {
    let mut parser = LogicalReplicationParser::with_protocol_version(stream.version.number());
    let mut seen = 0;
    for payload in &stream.payloads {
        let message = parser.parse_wal_message(black_box(payload)).unwrap();
        seen += peer_touch(&message);
        black_box(&message);
    }
    seen
}

fn peer_touch(message: &StreamingReplicationMessage) -> usize {
    use pg_walstream::LogicalReplicationMessage as M;
    let tuple = |t: &pg_walstream::TupleData| t.columns.iter().map(|c| c.as_bytes().len()).sum();
    match &message.message {
        M::Insert { tuple: data, .. } => tuple(data),
        M::Update { new_tuple, .. } => tuple(new_tuple),
        _ => 1,
    }
}

/// Encodes (session encoder) into one reused buffer.
fn ours_encode(stream: &Stream, messages: &[PgOutputMessage<'static>], buf: &mut Vec<u8>) -> usize {
    let mut encoder = Encoder::new(stream.version, stream.streaming).unwrap();
    let mut total = 0;
    for message in messages {
        buf.clear();
        encoder.encode_into(black_box(message), buf).unwrap();
        total += buf.len();
    }
    total
}

fn peer_encode(
    stream: &Stream,
    messages: &[StreamingReplicationMessage],
    buf: &mut BytesMut,
) -> usize {
    let version = stream.version.number() as u8;
    let mut total = 0;
    for message in messages {
        buf.clear();
        encode_streaming_message(black_box(message), version, buf);
        total += buf.len();
    }
    total
}

fn memcpy(stream: &Stream, buf: &mut Vec<u8>) -> usize {
    let mut total = 0;
    for payload in &stream.payloads {
        buf.clear();
        buf.extend_from_slice(black_box(payload));
        total += buf.len();
    }
    total
}

/// A payload, the stream it came in and the context it was sent in.
type Sent<'s> = (&'s Stream, &'s Vec<u8>, Ctx);

/// A stream with its messages decoded ahead, for the encoders.
struct Prepared<'s> {
    stream: &'s Stream,
    ours: Vec<PgOutputMessage<'static>>,
    peer: Vec<StreamingReplicationMessage>,
}

fn prepare(stream: &Stream) -> Prepared<'_> {
    let mut decoder = Decoder::new(stream.version, stream.streaming).unwrap();
    let mut parser = LogicalReplicationParser::with_protocol_version(stream.version.number());
    let ours = stream
        .payloads
        .iter()
        .map(|p| decoder.decode(p).unwrap().into_owned())
        .collect();
    let peer = stream
        .payloads
        .iter()
        .map(|p| parser.parse_wal_message(p).unwrap())
        .collect();
    Prepared { stream, ours, peer }
}

/// How many times `work` must run to take at least 50 ms.
fn calibrate(work: &mut impl FnMut() -> usize) -> u32 {
    let mut repeat = 1;
    loop {
        let started = Instant::now();
        for _ in 0..repeat {
            black_box(work());
        }
        if started.elapsed() >= Duration::from_millis(50) {
            return repeat;
        }
        repeat *= 2;
    }
}

/// The time of one run of `work`, averaged over `repeat` runs.
fn time(repeat: u32, work: &mut impl FnMut() -> usize) -> Duration {
    let started = Instant::now();
    for _ in 0..repeat {
        black_box(work());
    }
    started.elapsed() / repeat
}

/// The best time of `rounds` rounds of `work`, each repeated until it took 50 ms.
fn best(rounds: usize, mut work: impl FnMut() -> usize) -> Duration {
    let repeat = calibrate(&mut work);
    (0..rounds).map(|_| time(repeat, &mut work)).min().unwrap()
}

/// Ours and the peer's, measured back to back in each of `rounds` rounds: the best time of
/// each, and the median of the rounds' ratios (peer / ours). These machines drift by up to
/// 50% over seconds; a ratio taken within one round is what drift cannot skew.
fn side_by_side(
    rounds: usize,
    mut ours: impl FnMut() -> usize,
    mut peer: impl FnMut() -> usize,
) -> (Duration, Duration, f64) {
    let (repeat_ours, repeat_peer) = (calibrate(&mut ours), calibrate(&mut peer));
    let mut best = (Duration::MAX, Duration::MAX);
    let mut ratios: Vec<f64> = (0..rounds)
        .map(|_| {
            let ours = time(repeat_ours, &mut ours);
            let peer = time(repeat_peer, &mut peer);
            best = (best.0.min(ours), best.1.min(peer));
            peer.as_secs_f64() / ours.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    (best.0, best.1, ratios[ratios.len() / 2])
}

fn allocations(work: impl FnOnce() -> usize) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    black_box(work());
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

struct Row {
    name: String,
    messages: usize,
    bytes: usize,
    ours: Duration,
    peer: Duration,
    floor: Duration,
    /// The median of the rounds' ratios (see `side_by_side`).
    ratio: f64,
}

impl Row {
    fn new(
        stream: &Stream,
        floor: Duration,
        (ours, peer, ratio): (Duration, Duration, f64),
    ) -> Row {
        Row {
            name: stream.name.clone(),
            messages: stream.payloads.len(),
            bytes: stream.bytes(),
            ours,
            peer,
            floor,
            ratio,
        }
    }
}

/// The rows, one per stream, then `whole`: the real corpus measured as one run.
fn print_table(title: &str, rows: &[Row], whole: &Row) {
    println!("\n{title}");
    println!(
        "{:<40} {:>6} {:>9} {:>9} {:>8} {:>9} {:>10} {:>7}",
        "stream", "msgs", "ours ns", "peer ns", "memcpy", "ours MB/s", "ours msg/s", "ratio"
    );
    for row in rows.iter().chain([whole]) {
        let per = |d: Duration| d.as_nanos() as f64 / row.messages as f64;
        println!(
            "{:<40} {:>6} {:>9.1} {:>9.1} {:>8.1} {:>9.0} {:>10.0} {:>6.2}x",
            row.name,
            row.messages,
            per(row.ours),
            per(row.peer),
            per(row.floor),
            row.bytes as f64 / row.ours.as_secs_f64() / 1e6,
            row.messages as f64 / row.ours.as_secs_f64(),
            row.ratio,
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args[i + 1].clone())
    };
    let mut streams = real_streams();
    let real = streams.len();
    // One side for callgrind measures the real corpus only; spare it the synthetic setup.
    if arg("--side").is_none() {
        streams.extend(synthetic_streams());
    }
    let prepared: Vec<Prepared<'_>> = streams.iter().map(prepare).collect();

    // One side only, for callgrind: run it `iterations` times over the real corpus.
    if let Some(side) = arg("--side") {
        let iterations: usize = arg("--iterations").map_or(10, |n| n.parse().unwrap());
        let (mut vec_buf, mut bytes_buf) = (
            Vec::with_capacity(1 << 20),
            BytesMut::with_capacity(1 << 20),
        );
        let mut total = 0;
        for _ in 0..iterations {
            for p in &prepared[..real] {
                total += match side.as_str() {
                    "none" => 0,
                    "ours-decode" => ours_decode(p.stream),
                    "peer-decode" => peer_decode(p.stream),
                    "ours-encode" => ours_encode(p.stream, &p.ours, &mut vec_buf),
                    "peer-encode" => peer_encode(p.stream, &p.peer, &mut bytes_buf),
                    "memcpy" => memcpy(p.stream, &mut vec_buf),
                    other => panic!("unknown side {other}"),
                };
            }
        }
        let messages: usize = prepared[..real]
            .iter()
            .map(|p| p.stream.payloads.len())
            .sum();
        println!("{side}: {total} (messages per iteration: {messages})");
        return;
    }

    let rounds = if args.iter().any(|a| a == "--quick") {
        3
    } else {
        9
    };
    let mut decode_rows = Vec::new();
    let mut encode_rows = Vec::new();
    let (mut vec_buf, mut bytes_buf) = (
        Vec::with_capacity(1 << 20),
        BytesMut::with_capacity(1 << 20),
    );
    // `--corpus`: the whole-corpus rows only (a quick before/after check).
    let per_stream = !args.iter().any(|a| a == "--corpus");
    for p in prepared.iter().filter(|_| per_stream) {
        let stream = p.stream;
        let floor = best(rounds, || memcpy(stream, &mut vec_buf));
        decode_rows.push(Row::new(
            stream,
            floor,
            side_by_side(rounds, || ours_decode(stream), || peer_decode(stream)),
        ));
        encode_rows.push(Row::new(
            stream,
            floor,
            side_by_side(
                rounds,
                || ours_encode(stream, &p.ours, &mut vec_buf),
                || peer_encode(stream, &p.peer, &mut bytes_buf),
            ),
        ));
    }
    // The whole real corpus as one run: the figure the targets are about.
    let corpus = &prepared[..real];
    let whole = |(ours, peer, ratio), floor| Row {
        name: "real captures, as one run".to_owned(),
        messages: corpus.iter().map(|p| p.stream.payloads.len()).sum(),
        bytes: corpus.iter().map(|p| p.stream.bytes()).sum(),
        ours,
        peer,
        floor,
        ratio,
    };
    let floor = best(rounds, || {
        corpus.iter().map(|p| memcpy(p.stream, &mut vec_buf)).sum()
    });
    let whole_decode = whole(
        side_by_side(
            rounds,
            || corpus.iter().map(|p| ours_decode(p.stream)).sum(),
            || corpus.iter().map(|p| peer_decode(p.stream)).sum(),
        ),
        floor,
    );
    let whole_encode = whole(
        side_by_side(
            rounds,
            || {
                corpus
                    .iter()
                    .map(|p| ours_encode(p.stream, &p.ours, &mut vec_buf))
                    .sum()
            },
            || {
                corpus
                    .iter()
                    .map(|p| peer_encode(p.stream, &p.peer, &mut bytes_buf))
                    .sum()
            },
        ),
        floor,
    );
    print_table(
        "decode (session decoder vs parse_wal_message), ns per message",
        &decode_rows,
        &whole_decode,
    );
    print_table(
        "encode into a reused buffer (session encoder vs encode_streaming_message), ns per message",
        &encode_rows,
        &whole_encode,
    );

    if !per_stream {
        return;
    }

    // Per message type, over the real captures: each type's messages decoded on their own
    // (in the context, or parser state, they were sent in).
    let mut by_type: BTreeMap<(char, bool), Vec<Sent<'_>>> = BTreeMap::new();
    for stream in &streams[..real] {
        let mut decoder = Decoder::new(stream.version, stream.streaming).unwrap();
        for payload in &stream.payloads {
            let ctx = decoder.ctx();
            decoder.decode(payload).unwrap();
            by_type
                .entry((char::from(payload[0]), ctx.in_stream()))
                .or_default()
                .push((stream, payload, ctx));
        }
    }
    println!("\ndecode by message type (real captures), ns per message");
    println!(
        "{:<6} {:>9} {:>6} {:>9} {:>9} {:>7}",
        "tag", "in block", "msgs", "ours ns", "peer ns", "ratio"
    );
    for ((tag, in_block), group) in &by_type {
        let ours = || {
            group
                .iter()
                .map(|(_, payload, ctx)| {
                    let m: PgOutputMessage<'_> =
                        pgoutput_codec::decode(black_box(payload), *ctx).unwrap();
                    touch(&m)
                })
                .sum()
        };
        let peer = || {
            let mut parser =
                LogicalReplicationParser::with_protocol_version(group[0].0.version.number());
            if *in_block {
                // Put the parser inside a stream block, as it was when the message came.
                parser.parse_wal_message(b"S\0\0\x02\xe8\x01").unwrap();
            }
            group
                .iter()
                .map(|(_, payload, _)| {
                    peer_touch(&parser.parse_wal_message(black_box(payload)).unwrap())
                })
                .sum()
        };
        let (ours, peer, ratio) = side_by_side(rounds, ours, peer);
        let per = |d: Duration| d.as_nanos() as f64 / group.len() as f64;
        println!(
            "{:<6} {:>9} {:>6} {:>9.1} {:>9.1} {:>6.2}x",
            format!("'{tag}'"),
            in_block,
            group.len(),
            per(ours),
            per(peer),
            ratio
        );
    }

    // Allocations per message over one pass of the real corpus (buffers warmed first).
    let messages: usize = streams[..real].iter().map(|s| s.payloads.len()).sum();
    let per_message = |n: u64| n as f64 / messages as f64;
    let ours_decode_allocs = allocations(|| streams[..real].iter().map(ours_decode).sum());
    let peer_decode_allocs = allocations(|| streams[..real].iter().map(peer_decode).sum());
    let ours_encode_allocs = allocations(|| {
        prepared[..real]
            .iter()
            .map(|p| ours_encode(p.stream, &p.ours, &mut vec_buf))
            .sum()
    });
    let peer_encode_allocs = allocations(|| {
        prepared[..real]
            .iter()
            .map(|p| peer_encode(p.stream, &p.peer, &mut bytes_buf))
            .sum()
    });
    println!("\nallocations per message (real captures, {messages} messages)");
    println!(
        "decode: ours {:.2}, pg_walstream {:.2}",
        per_message(ours_decode_allocs),
        per_message(peer_decode_allocs)
    );
    println!(
        "encode into a warm buffer: ours {:.2}, pg_walstream {:.2}",
        per_message(ours_encode_allocs),
        per_message(peer_encode_allocs)
    );
}
