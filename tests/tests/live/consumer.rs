//! The consumer API (`client::Consumer`) against the live server: every message of every
//! option set byte for byte (re-encoded, compared with the SQL interface's payloads),
//! feedback reaching the slot, reply requests answered while the consumer is busy for
//! longer than `wal_sender_timeout`, and a resume after the walsender is killed with no
//! transaction lost or repeated.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgoutput_client::{
    ConnInfo, Consumer, ConsumerConfig, Reconnecting, StreamOptions, TransactionKind,
    WholeTransaction,
};
use pgoutput_codec::{Encoder, IntoOwned, Lsn, PgOutputMessage, ProtocolVersion, Streaming};
use pgoutput_tests::pg::Server;

use crate::{peek_slot, Options, Row};

/// The slots these checks consume (created with the workload's others, dropped after).
pub const SLOTS: [&str; 5] = [
    "consumer_busy",
    "consumer_resume",
    "consumer_async",
    "consumer_whole",
    "consumer_whole_async",
];

pub(crate) fn stream_options(options: &Options) -> StreamOptions {
    StreamOptions::new(options.version, &["pub"])
        .streaming(options.streaming)
        .binary(options.binary)
        .messages(true)
        .two_phase(options.two_phase)
}

fn connect_info(server: &Server, application_name: &str) -> Result<ConnInfo, String> {
    let mut info = ConnInfo::parse(Some(&server.conninfo("postgres", None)), |_| None)
        .map_err(|e| e.to_string())?;
    info.application_name = application_name.into();
    Ok(info)
}

/// Reads `expected.len()` events from `consumer`, each re-encoded by a session encoder
/// and compared with the SQL interface's payload; returns the transaction ends seen.
fn read_all(
    consumer: &mut Consumer,
    options: &Options,
    expected: &[Row],
    mut busy: impl FnMut(usize),
) -> Result<Vec<Lsn>, String> {
    let mut encoder =
        Encoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
    let mut ends = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut received = 0;
    while received < expected.len() {
        if Instant::now() > deadline {
            return Err(format!("{received} of {} events in 120 s", expected.len()));
        }
        let Some(event) = consumer
            .next_within(Duration::from_millis(500))
            .map_err(|e| e.to_string())?
        else {
            continue;
        };
        let bytes = encoder.encode(&event.message).map_err(|e| e.to_string())?;
        let want = &expected[received];
        if bytes != want.data {
            return Err(format!(
                "event {received}: the consumer's {:?} re-encodes to {} but the SQL interface sent {}",
                event.message,
                pgoutput_tests::hex(&bytes),
                pgoutput_tests::hex(&want.data)
            ));
        }
        if let (Some(row), Some(table)) = (event.new_row(), event.relation()) {
            if row.len() != table.columns.len() {
                return Err(format!(
                    "a row of {} values for {} columns",
                    row.len(),
                    table.columns.len()
                ));
            }
        }
        if matches!(
            event.message,
            PgOutputMessage::Insert(_) | PgOutputMessage::Update(_) | PgOutputMessage::Delete(_)
        ) && event.relation().is_none()
        {
            return Err(format!("event {received}: a change without its table"));
        }
        if let Some(end) = event.confirmable_lsn() {
            ends.push(end);
        }
        received += 1;
        busy(received);
    }
    Ok(ends)
}

/// Every option set's stream through the consumer, byte for byte; nothing confirmed, so
/// the slots stay as the other checks need them.
pub fn check_every_option_set(server: &Server, sets: &[Options]) -> Result<String, String> {
    let mut events = 0;
    for options in sets {
        let expected = peek_slot(server, options.slot, options)?;
        let info = connect_info(server, "consumer-check")?;
        let config = ConsumerConfig::new(options.slot, stream_options(options));
        let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
        read_all(&mut consumer, options, &expected, |_| {}).map_err(|e| {
            format!(
                "slot {}, proto {}, streaming {}, binary {}: {e}",
                options.slot, options.version, options.streaming, options.binary
            )
        })?;
        events += expected.len();
        consumer.close();
    }
    Ok(format!("{} option sets, {events} events", sets.len()))
}

/// The transaction ends of `rows`, in order: what a reader never cut off sees.
pub(crate) fn transaction_ends(options: &Options, rows: &[Row]) -> Result<Vec<Lsn>, String> {
    let mut decoder = pgoutput_codec::Decoder::new(options.version, options.streaming)
        .map_err(|e| e.to_string())?;
    let mut ends = Vec::new();
    for row in rows {
        let message = decoder.decode(&row.data).map_err(|e| e.to_string())?;
        ends.extend(message.transaction_end_lsn());
    }
    Ok(ends)
}

fn wait_for_flush(server: &Server, slot: &str, lsn: Lsn) -> Result<Lsn, String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let flushed = crate::tail::confirmed(server, slot)?;
        if flushed >= lsn {
            return Ok(flushed);
        }
        if Instant::now() > deadline {
            return Err(format!("slot {slot} confirmed {flushed}, not {lsn}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Seconds since the walsender of `application_name` last heard a reply (or started).
fn reply_age(server: &Server, application_name: &str) -> Result<Option<f64>, String> {
    let age = server
        .query_one(&format!(
            "SELECT extract(epoch FROM clock_timestamp() - coalesce(reply_time, backend_start)) \
             FROM pg_stat_replication WHERE application_name = '{application_name}';"
        ))
        .map_err(|e| e.to_string())?;
    Ok(age.trim().parse().ok())
}

/// With `wal_sender_timeout` at 2 s: a consumer busy for 5 s on one event stays
/// connected, its replies never older than the walsender's reply requests allow, and
/// with auto-confirm the slot reaches the last commit.
pub fn check_busy_consumer_and_feedback(server: &Server) -> Result<String, String> {
    let options = Options {
        slot: "consumer_busy",
        version: ProtocolVersion::V1,
        streaming: Streaming::Off,
        binary: false,
        two_phase: false,
    };
    let expected = peek_slot(server, options.slot, &options)?;
    server
        .psql("ALTER SYSTEM SET wal_sender_timeout = '2s'; SELECT pg_reload_conf();")
        .map_err(|e| e.to_string())?;
    let result = (|| {
        let info = connect_info(server, "consumer-busy")?;
        let config = ConsumerConfig::new(options.slot, stream_options(&options)).auto_confirm(true);
        let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
        let mut oldest_reply = 0.0f64;
        let mut busy_error = None;
        let ends = read_all(&mut consumer, &options, &expected, |n| {
            if n != 10 {
                return;
            }
            // Busy for 5 s, looking at how fresh the server's last reply is meanwhile.
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                std::thread::sleep(Duration::from_millis(250));
                match reply_age(server, "consumer-busy") {
                    Ok(Some(age)) => oldest_reply = oldest_reply.max(age),
                    Ok(None) => {
                        let seen = server
                            .psql("SELECT application_name, state FROM pg_stat_replication;")
                            .unwrap_or_default();
                        busy_error = Some(format!("the walsender is gone: {seen:?}"));
                    }
                    Err(e) => busy_error = Some(e),
                }
            }
        })?;
        if let Some(err) = busy_error {
            return Err(format!("while busy: {err}"));
        }
        // Reply requests come at half the timeout (1 s); each is answered at once.
        if oldest_reply >= 1.9 {
            return Err(format!("the last reply was {oldest_reply:.2} s old"));
        }
        let last = *ends.last().ok_or("no transaction")?;
        // Moving past the last event confirms it.
        let _ = consumer.next_within(Duration::from_millis(100));
        consumer.close();
        let flushed = wait_for_flush(server, options.slot, last)?;
        Ok(format!(
            "busy 5 s under a 2 s wal_sender_timeout, replies at most {oldest_reply:.2} s old; \
             slot confirmed {flushed}"
        ))
    })();
    server
        .psql("ALTER SYSTEM RESET wal_sender_timeout; SELECT pg_reload_conf();")
        .map_err(|e| e.to_string())?;
    result
}

/// `config` auto-confirming, with a queue of 4 frames (what comes after a kill comes
/// from the new connection) and reconnecting after 200 ms; and how many times it resumed.
fn reconnecting(config: ConsumerConfig) -> (ConsumerConfig, Arc<AtomicUsize>) {
    let resumed = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&resumed);
    let config = config
        .auto_confirm(true)
        .queue(4)
        .reconnect(Duration::from_millis(200))
        .on_reconnect(move |note| {
            if let Reconnecting::Resumed { .. } = note {
                count.fetch_add(1, Ordering::SeqCst);
            }
        });
    (config, resumed)
}

/// The walsender killed twice mid-stream: the consumer reconnects, resumes after the
/// last whole transaction it delivered, and every transaction arrives exactly once.
pub fn check_resume(server: &Server) -> Result<String, String> {
    let options = Options {
        slot: "consumer_resume",
        version: ProtocolVersion::V2,
        streaming: Streaming::On,
        binary: true,
        two_phase: false,
    };
    let expected = peek_slot(server, options.slot, &options)?;
    let want = transaction_ends(&options, &expected)?;
    let info = connect_info(server, "consumer-resume")?;
    // A short queue: what the consumer gets after a kill comes from the new connection.
    let (config, resumed) =
        reconnecting(ConsumerConfig::new(options.slot, stream_options(&options)));
    let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
    let kill = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication \
                WHERE application_name = 'consumer-resume';";
    let mut ends = Vec::new();
    let mut kills = 0;
    // Each kill lands on a walsender streaming since the last resume.
    let mut kill_at = 2;
    let deadline = Instant::now() + Duration::from_secs(120);
    while ends.len() < want.len() {
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {} transactions in 120 s",
                ends.len(),
                want.len()
            ));
        }
        let Some(event) = consumer
            .next_within(Duration::from_millis(500))
            .map_err(|e| e.to_string())?
        else {
            continue;
        };
        let inside = event.confirmable_lsn().is_none();
        if let Some(end) = event.confirmable_lsn() {
            ends.push(end);
        }
        // Kill the walsender inside a transaction, twice, each time on a connection that
        // has streamed two transactions since its resume.
        if inside && kills < 2 && resumed.load(Ordering::SeqCst) == kills && ends.len() >= kill_at {
            if server.query_one(kill).map_err(|e| e.to_string())?.trim() == "1" {
                kills += 1;
            }
            kill_at = ends.len() + 2;
        }
    }
    if ends != want {
        return Err(format!("transaction ends {ends:?}, expected {want:?}"));
    }
    // The last kill may land after the last transaction was queued: wait for its resume.
    let until = Instant::now() + Duration::from_secs(10);
    while resumed.load(Ordering::SeqCst) < kills && Instant::now() < until {
        if let Some(event) = consumer
            .next_within(Duration::from_millis(100))
            .map_err(|e| e.to_string())?
        {
            return Err(format!("after the last transaction: {:?}", event.message));
        }
    }
    let seen = resumed.load(Ordering::SeqCst);
    if seen != kills {
        return Err(format!("{kills} kills but {seen} resumes"));
    }
    let _ = consumer.next_within(Duration::from_millis(100));
    consumer.close();
    let flushed = wait_for_flush(server, options.slot, *want.last().ok_or("no transaction")?)?;
    Ok(format!(
        "{} transactions exactly once through {kills} killed walsenders; slot confirmed {flushed}",
        want.len()
    ))
}

/// The async consumer on a current-thread tokio runtime: every option set byte for byte,
/// then the walsender killed mid-transaction with every transaction exactly once.
pub fn check_async(server: &Server, sets: &[Options]) -> Result<String, String> {
    use pgoutput_client::tokio::Consumer;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut events = 0;
        for options in sets {
            let expected = peek_slot(server, options.slot, options)?;
            let info = connect_info(server, "consumer-async")?;
            let config = ConsumerConfig::new(options.slot, stream_options(options));
            let mut consumer = Consumer::connect(&info, config)
                .await
                .map_err(|e| e.to_string())?;
            let mut encoder =
                Encoder::new(options.version, options.streaming).map_err(|e| e.to_string())?;
            for (i, want) in expected.iter().enumerate() {
                let event = tokio::time::timeout(Duration::from_secs(60), consumer.next())
                    .await
                    .map_err(|_| format!("event {i}: none within 60 s"))?
                    .map_err(|e| e.to_string())?
                    .ok_or("the stream ended")?;
                let bytes = encoder.encode(&event.message).map_err(|e| e.to_string())?;
                if bytes != want.data {
                    return Err(format!(
                        "slot {}, proto {}, streaming {}: event {i} re-encodes to {} but the SQL \
                         interface sent {}",
                        options.slot,
                        options.version,
                        options.streaming,
                        pgoutput_tests::hex(&bytes),
                        pgoutput_tests::hex(&want.data)
                    ));
                }
            }
            events += expected.len();
            consumer.close().await;
        }
        // A resume, on a slot of its own that has seen the whole workload.
        let options = Options {
            slot: "consumer_async",
            version: ProtocolVersion::V2,
            streaming: Streaming::On,
            binary: false,
            two_phase: false,
        };
        let expected = peek_slot(server, options.slot, &options)?;
        let want = transaction_ends(&options, &expected)?;
        let info = connect_info(server, "consumer-async-resume")?;
        let config = ConsumerConfig::new(options.slot, stream_options(&options))
            .auto_confirm(true)
            .queue(4)
            .reconnect(Duration::from_millis(200));
        let mut consumer = Consumer::connect(&info, config)
            .await
            .map_err(|e| e.to_string())?;
        let mut ends = Vec::new();
        let mut killed = false;
        let mut resumed = false;
        while ends.len() < want.len() {
            let event = tokio::time::timeout(Duration::from_secs(60), consumer.next())
                .await
                .map_err(|_| "no event within 60 s".to_owned())?
                .map_err(|e| e.to_string())?
                .ok_or("the stream ended")?;
            resumed |= event.resumed();
            let end = event.confirmable_lsn();
            if let Some(end) = end {
                ends.push(end);
            } else if !killed && ends.len() == 2 {
                let n = server
                    .query_one(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication \
                         WHERE application_name = 'consumer-async-resume';",
                    )
                    .map_err(|e| e.to_string())?;
                killed = n.trim() == "1";
            }
        }
        if !killed || !resumed || ends != want {
            return Err(format!(
                "killed {killed}, resumed {resumed}: transaction ends {ends:?}, expected {want:?}"
            ));
        }
        // Moving past the last event confirms it; the slot follows.
        let _ = consumer.next_within(Duration::from_millis(100)).await;
        consumer.close().await;
        let flushed = wait_for_flush(server, options.slot, *want.last().ok_or("no transaction")?)?;
        // Busy for 5 s under a 2 s wal_sender_timeout, awaiting something else: the I/O
        // task answers the walsender meanwhile.
        server
            .psql("ALTER SYSTEM SET wal_sender_timeout = '2s'; SELECT pg_reload_conf();")
            .map_err(|e| e.to_string())?;
        let busy = async {
            let info = connect_info(server, "consumer-async-busy")?;
            let plain = Options {
                slot: "plain",
                ..options
            };
            let config = ConsumerConfig::new(plain.slot, stream_options(&plain));
            let mut consumer = Consumer::connect(&info, config)
                .await
                .map_err(|e| e.to_string())?;
            for _ in 0..10 {
                consumer
                    .next()
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("the stream ended")?;
            }
            let mut oldest = 0.0f64;
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let age =
                    reply_age(server, "consumer-async-busy")?.ok_or("the walsender is gone")?;
                oldest = oldest.max(age);
            }
            consumer
                .next()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the stream ended")?;
            consumer.close().await;
            Ok::<f64, String>(oldest)
        }
        .await;
        server
            .psql("ALTER SYSTEM RESET wal_sender_timeout; SELECT pg_reload_conf();")
            .map_err(|e| e.to_string())?;
        let oldest = busy?;
        if oldest >= 1.9 {
            return Err(format!("async, busy: the last reply was {oldest:.2} s old"));
        }
        Ok(format!(
            "{} option sets, {events} events; {} transactions exactly once through a killed \
             walsender, slot confirmed {flushed}; busy 5 s under a 2 s wal_sender_timeout with \
             replies at most {oldest:.2} s old",
            sets.len(),
            want.len()
        ))
    })
}

/// What a whole transaction holds, as PostgreSQL's own whole (non-streamed) output says
/// it: its kind and end, and its changes with their xids cleared (a streamed
/// transaction's changes carry them).
#[derive(Debug, Clone, PartialEq)]
struct WholeOf {
    kind: TransactionKind,
    end: Option<Lsn>,
    changes: Vec<PgOutputMessage<'static>>,
}

/// A change without the xid a stream block gives it; `None` for what is not a change.
fn change(message: PgOutputMessage<'_>) -> Option<PgOutputMessage<'static>> {
    let mut owned = message.into_owned();
    match &mut owned {
        PgOutputMessage::Insert(m) => m.xid = None,
        PgOutputMessage::Update(m) => m.xid = None,
        PgOutputMessage::Delete(m) => m.xid = None,
        PgOutputMessage::Truncate(m) => m.xid = None,
        PgOutputMessage::Message(m) => m.xid = None,
        _ => return None,
    }
    Some(owned)
}

/// PostgreSQL's whole transactions of `slot` (its peek with streaming off): each one's
/// messages are contiguous there, rolled-back subtransactions and aborted transactions
/// already left out by the server.
fn whole_truth(server: &Server, options: &Options) -> Result<Vec<WholeOf>, String> {
    let plain = Options {
        streaming: Streaming::Off,
        ..*options
    };
    let rows = peek_slot(server, options.slot, &plain)?;
    let mut decoder =
        pgoutput_codec::Decoder::new(plain.version, plain.streaming).map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    let mut open: Option<Vec<PgOutputMessage<'static>>> = None;
    for row in &rows {
        let message = decoder.decode(&row.data).map_err(|e| e.to_string())?;
        let kind = match &message {
            PgOutputMessage::Begin(_) | PgOutputMessage::BeginPrepare(_) => {
                open = Some(Vec::new());
                continue;
            }
            PgOutputMessage::Commit(_) => TransactionKind::Committed,
            PgOutputMessage::Prepare(_) => TransactionKind::Prepared,
            PgOutputMessage::CommitPrepared(_) => TransactionKind::CommitPrepared,
            PgOutputMessage::RollbackPrepared(_) => TransactionKind::RollbackPrepared,
            PgOutputMessage::Message(_) if open.is_none() => TransactionKind::Message,
            _ => {
                if let (Some(changes), Some(change)) = (&mut open, change(message)) {
                    changes.push(change);
                }
                continue;
            }
        };
        let end = message.transaction_end_lsn();
        let changes = match open.take() {
            Some(changes) => changes,
            None => change(message).into_iter().collect(),
        };
        all.push(WholeOf { kind, end, changes });
    }
    Ok(all)
}

/// Whole transactions (`next_transaction`) from both consumers, streamed (protocol 3,
/// two-phase), each walsender killed twice while a large streamed transaction is being
/// sent: every transaction arrives whole and once, in commit order, holding what
/// PostgreSQL's own non-streamed output holds for it.
pub fn check_whole(server: &Server) -> Result<String, String> {
    let mut said = Vec::new();
    for (slot, driver) in [
        ("consumer_whole", "blocking"),
        ("consumer_whole_async", "async"),
    ] {
        let options = Options {
            slot,
            version: ProtocolVersion::V3,
            streaming: Streaming::On,
            binary: true,
            two_phase: true,
        };
        let want = whole_truth(server, &options)?;
        // Kill while each large transaction streams: right after the one before it.
        let big: Vec<usize> = want
            .iter()
            .enumerate()
            .filter(|(_, w)| w.changes.len() > 1000)
            .map(|(i, _)| i)
            .collect();
        if big.len() < 2 {
            return Err(format!("{} large transactions in the workload", big.len()));
        }
        let application_name = format!("consumer-whole-{driver}");
        let info = connect_info(server, &application_name)?;
        let (config, resumed) = reconnecting(ConsumerConfig::new(slot, stream_options(&options)));
        let kill = format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication \
             WHERE application_name = '{application_name}';"
        );
        let mut kills = 0;
        let mut got: Vec<WholeOf> = Vec::new();
        let take = |transaction: &mut WholeTransaction<'_>| -> Result<WholeOf, String> {
            let mut changes = Vec::new();
            while let Some(event) = transaction.next_event().map_err(|e| e.to_string())? {
                changes.extend(change(event.message));
            }
            Ok(WholeOf {
                kind: transaction.kind(),
                end: transaction.end_lsn(),
                changes,
            })
        };
        let after = |got: &[WholeOf], kills: &mut usize| -> Result<(), String> {
            // Each large transaction's predecessor handed out: the walsender is sending
            // it now (a queue of 4 frames holds back the rest).
            if big.contains(&got.len())
                && *kills < 2
                && server.query_one(&kill).map_err(|e| e.to_string())?.trim() == "1"
            {
                *kills += 1;
            }
            Ok(())
        };
        if driver == "blocking" {
            let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
            after(&got, &mut kills)?;
            let deadline = Instant::now() + Duration::from_secs(120);
            while got.len() < want.len() && Instant::now() < deadline {
                if let Some(mut transaction) = consumer
                    .next_transaction_within(Duration::from_millis(500))
                    .map_err(|e| e.to_string())?
                {
                    got.push(take(&mut transaction)?);
                    after(&got, &mut kills)?;
                }
            }
            let _ = consumer.next_transaction_within(Duration::from_millis(100));
            consumer.close();
        } else {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut consumer = pgoutput_client::tokio::Consumer::connect(&info, config)
                    .await
                    .map_err(|e| e.to_string())?;
                after(&got, &mut kills)?;
                while got.len() < want.len() {
                    let mut transaction =
                        tokio::time::timeout(Duration::from_secs(60), consumer.next_transaction())
                            .await
                            .map_err(|_| "no transaction within 60 s".to_owned())?
                            .map_err(|e| e.to_string())?
                            .ok_or("the stream ended")?;
                    got.push(take(&mut transaction)?);
                    after(&got, &mut kills)?;
                }
                let _ = consumer
                    .next_transaction_within(Duration::from_millis(100))
                    .await;
                consumer.close().await;
                Ok::<(), String>(())
            })?;
        }
        if got != want {
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            return Err(format!(
                "{driver}: {} transactions, {} expected; first difference at {first:?}: got \
                 {:?}, expected {:?}",
                got.len(),
                want.len(),
                first.map(|i| (&got[i].kind, got[i].end, got[i].changes.len())),
                first.map(|i| (&want[i].kind, want[i].end, want[i].changes.len())),
            ));
        }
        let resumes = resumed.load(Ordering::SeqCst);
        if kills != 2 || resumes < kills {
            return Err(format!("{driver}: {kills} kills, {resumes} resumes"));
        }
        let last = want
            .iter()
            .filter_map(|w| w.end)
            .max()
            .ok_or("no transaction")?;
        let flushed = wait_for_flush(server, slot, last)?;
        let changes: usize = want.iter().map(|w| w.changes.len()).sum();
        said.push(format!(
            "{driver}: {} transactions ({changes} changes) whole and once through {kills} \
             walsenders killed while large transactions streamed; slot confirmed {flushed}",
            want.len()
        ));
    }
    Ok(said.join("; "))
}

/// The ecosystem's types (`with-…` features) read from what PostgreSQL itself sends, in a
/// text and a binary session: the values the test server's check reads, the same way.
pub fn check_typed(server: &Server) -> Result<String, String> {
    use pgoutput_tests::typed::{expected, typed, COLUMNS, ROWS};
    let columns: Vec<String> = COLUMNS
        .iter()
        .map(|(name, _, ty)| format!("{name} {ty}"))
        .collect();
    let rows: Vec<String> = ROWS
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let values: Vec<String> = row.iter().map(|v| format!("'{v}'")).collect();
            format!("({i}, {})", values.join(", "))
        })
        .collect();
    // A database of its own: the workload's publication is FOR ALL TABLES.
    server
        .psql("CREATE DATABASE typed_db;")
        .map_err(|e| e.to_string())?;
    server
        .psql(&format!(
            "\\c typed_db
             CREATE TABLE typed (id int PRIMARY KEY, {});
             CREATE PUBLICATION typed_pub FOR TABLE typed;
             SELECT pg_create_logical_replication_slot('typed_text', 'pgoutput') IS NOT NULL;
             SELECT pg_create_logical_replication_slot('typed_binary', 'pgoutput') IS NOT NULL;
             INSERT INTO typed VALUES {};",
            columns.join(", "),
            rows.join(", ")
        ))
        .map_err(|e| e.to_string())?;
    let end: Lsn = server
        .query_one("SELECT pg_current_wal_insert_lsn();")
        .map_err(|e| e.to_string())?
        .trim()
        .parse()
        .map_err(|e| format!("{e}"))?;
    let result = (|| {
        for (slot, binary) in [("typed_text", false), ("typed_binary", true)] {
            let options = StreamOptions::new(ProtocolVersion::V1, &["typed_pub"]).binary(binary);
            let mut info = connect_info(server, "consumer-typed")?;
            info.dbname = "typed_db".into();
            let config = ConsumerConfig::new(slot, options).end_lsn(end);
            let mut consumer = Consumer::connect(&info, config).map_err(|e| e.to_string())?;
            let mut got = Vec::new();
            let mut sent_binary = false;
            while let Some(event) = consumer.next().map_err(|e| e.to_string())? {
                if let Some(row) = event.new_row() {
                    sent_binary |= matches!(
                        row.column("n").map(|c| c.raw().clone()),
                        Some(pgoutput_codec::ColumnValue::Binary(_))
                    );
                    got.push(typed(&row));
                }
            }
            consumer.close();
            if sent_binary != binary {
                return Err(format!("{slot}: binary values {sent_binary}"));
            }
            if got != expected() {
                return Err(format!("{slot}: read {got:#?}, expected {:#?}", expected()));
            }
        }
        Ok(format!(
            "numeric, uuid, date, time, timestamp, timestamptz, jsonb and json as Decimal, \
             Uuid, chrono and serde_json values, {} rows, the same from text and binary",
            ROWS.len()
        ))
    })();
    let _ = server.psql(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
         WHERE database = 'typed_db'; DROP DATABASE typed_db;",
    );
    result
}
