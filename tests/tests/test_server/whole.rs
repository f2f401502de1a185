//! Whole transactions (`next_transaction`) from both consumers, the blocking and the
//! async one, against the test server: every kind of transaction of every option set,
//! each whole, once, in commit order; then the connection cut inside a transaction,
//! mid-frame, inside a stream block and by a server crash, with every transaction still
//! handed out whole and once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgoutput_client::{
    tokio::Consumer as AsyncConsumer, ConnInfo, Connection, Consumer, ConsumerConfig, Reconnecting,
    StreamOptions, TransactionKind, WholeTransaction,
};
use pgoutput_codec::{Decoder, Lsn, ProtocolVersion, Streaming};
use pgoutput_harness::faults::{Action, Fault, MessageKind, Trigger};
use pgoutput_harness::server::{Publication, Script, Table, TestServer, Transaction};

use super::option_sets;

/// What a test sees of one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    kind: TransactionKind,
    streamed: bool,
    end: Option<Lsn>,
    /// Each new row as `table: column=value …` (`~` for an unchanged TOAST value).
    rows: Vec<String>,
}

fn got(transaction: &mut WholeTransaction<'_>) -> Got {
    let mut rows = Vec::new();
    let mut messages = 0;
    while let Some(event) = transaction.next_event().unwrap() {
        messages += 1;
        if let Some(row) = event.new_row() {
            let values: Vec<String> = row
                .iter()
                .map(|column| match column.value::<Option<String>>() {
                    Ok(value) => format!("{}={}", column.name(), value.unwrap_or_default()),
                    Err(err) if err.is_unchanged_toast() => format!("{}=~", column.name()),
                    Err(err) => panic!("{err}"),
                })
                .collect();
            rows.push(format!("{}: {}", row.relation().name, values.join(" ")));
        }
    }
    assert_eq!(messages, transaction.len());
    Got {
        kind: transaction.kind(),
        streamed: transaction.streamed(),
        end: transaction.end_lsn(),
        rows,
    }
}

fn info(server: &TestServer) -> ConnInfo {
    ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap()
}

fn create_slot(server: &TestServer, slot: &str) {
    let mut conn = Connection::connect(&info(server)).unwrap();
    conn.simple_query(&format!(
        "CREATE_REPLICATION_SLOT \"{slot}\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
    ))
    .unwrap();
    conn.close().unwrap();
}

/// The ends of the transactions the server renders for `options`, in order.
fn rendered_ends(server: &TestServer, options: &StreamOptions) -> Vec<Lsn> {
    let mut decoder = Decoder::new(options.proto_version, options.streaming).unwrap();
    server
        .render(options)
        .unwrap()
        .iter()
        .filter_map(|m| decoder.decode(&m.payload).unwrap().transaction_end_lsn())
        .collect()
}

/// `count` transactions from the blocking consumer.
fn blocking(server: &TestServer, config: ConsumerConfig, count: usize) -> Vec<Got> {
    let mut consumer = Consumer::connect(&info(server), config).unwrap();
    let mut all = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while all.len() < count {
        assert!(
            Instant::now() < deadline,
            "{} of {count}: {all:#?}",
            all.len()
        );
        if let Some(mut transaction) = consumer
            .next_transaction_within(Duration::from_millis(200))
            .unwrap()
        {
            all.push(got(&mut transaction));
        }
    }
    // Nothing more comes; asking again confirms the last one (auto-confirm).
    assert!(consumer
        .next_transaction_within(Duration::from_millis(100))
        .unwrap()
        .is_none());
    consumer.close();
    all
}

/// `count` transactions from the async consumer, on a current-thread runtime.
fn asynchronous(server: &TestServer, config: ConsumerConfig, count: usize) -> Vec<Got> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut consumer = AsyncConsumer::connect(&info(server), config).await.unwrap();
        let mut all = Vec::new();
        while all.len() < count {
            let mut transaction =
                tokio::time::timeout(Duration::from_secs(60), consumer.next_transaction())
                    .await
                    .unwrap_or_else(|_| panic!("{} of {count}: {all:#?}", all.len()))
                    .unwrap()
                    .expect("the stream goes on");
            all.push(got(&mut transaction));
        }
        assert!(consumer
            .next_transaction_within(Duration::from_millis(100))
            .await
            .unwrap()
            .is_none());
        consumer.close().await;
        all
    })
}

/// What `script()` holds, transaction by transaction, as `options` hands it out.
fn expected(options: &StreamOptions, ends: &[Lsn]) -> Vec<Got> {
    let two_phase = options.two_phase;
    let streamed = options.streaming != Streaming::Off;
    let row = |text: &str| text.to_owned();
    let mut kinds = vec![
        (
            TransactionKind::Committed,
            false,
            vec![
                row("t1: id=1 v=a"),
                row("t1: id=2 v=b"),
                row(r"t2: id=1 b=\x0102 f=1.5"),
            ],
        ),
        (
            TransactionKind::Committed,
            false,
            vec![row("t1: id=1 v=a2")],
        ),
        // The aborted subtransaction's row is dropped; the aborted streamed transaction
        // is not handed out.
        (
            TransactionKind::Committed,
            streamed,
            vec![
                row("t1: id=10 v=s10"),
                row("t1: id=11 v=s11"),
                row("t1: id=12 v=s12"),
                row("t1: id=13 v=s13"),
            ],
        ),
    ];
    if two_phase {
        kinds.push((
            TransactionKind::Prepared,
            false,
            vec![row("t1: id=20 v=prepared")],
        ));
        kinds.push((TransactionKind::CommitPrepared, false, vec![]));
    } else {
        kinds.push((
            TransactionKind::Committed,
            false,
            vec![row("t1: id=20 v=prepared")],
        ));
    }
    kinds.push((TransactionKind::Committed, false, vec![]));
    kinds.push((
        TransactionKind::Committed,
        false,
        vec![row(r"t2: id=2 b=\x0a0b f=3.25"), row("t1: id=13 v=~")],
    ));
    assert_eq!(kinds.len(), ends.len(), "{options:?}");
    kinds
        .into_iter()
        .zip(ends)
        .map(|((kind, streamed, rows), end)| Got {
            kind,
            streamed,
            end: Some(*end),
            rows,
        })
        .collect()
}

#[test]
fn every_kind_of_transaction_of_every_option_set_comes_whole_from_both_consumers() {
    let server = super::every_kind_server();
    let end = server.wal_end();
    for (i, options) in option_sets().into_iter().enumerate() {
        let ends = rendered_ends(&server, &options);
        let want = expected(&options, &ends);
        for (driver, read) in [
            (
                "blocking",
                blocking as fn(&TestServer, ConsumerConfig, usize) -> Vec<Got>,
            ),
            ("async", asynchronous),
        ] {
            let slot = format!("w{i}_{driver}");
            create_slot(&server, &slot);
            let config = ConsumerConfig::new(&slot, options.clone())
                .auto_confirm(true)
                .status_interval(Duration::from_millis(100));
            assert_eq!(
                read(&server, config, want.len()),
                want,
                "{driver}, {options:?}"
            );
            assert_eq!(
                server.wait_for_confirmed_flush(&slot, end, Duration::from_secs(10)),
                Ok(end),
                "{driver}, {options:?}"
            );
        }
    }
}

/// Six transactions on `t (id)`: even ones sent whole (two rows), odd ones streamed in
/// two blocks with an aborted subtransaction between its rows.
fn mixed() -> (Table, Script) {
    let t = Table::new(16385, "public", "t").key_column("id", 23);
    let mut script = Script::new();
    for i in 0..6 {
        let transaction = if i % 2 == 0 {
            Transaction::new()
                .insert(&t, [format!("{i}0")])
                .insert(&t, [format!("{i}1")])
        } else {
            Transaction::new()
                .streamed()
                .insert(&t, [format!("{i}0")])
                .stream_boundary()
                .aborted_subtransaction(|s| s.insert(&t, [format!("{i}99")]))
                .insert(&t, [format!("{i}1")])
        };
        script = script.transaction(transaction);
    }
    (t, script)
}

#[test]
fn cut_inside_a_transaction_mid_frame_inside_a_stream_block_and_by_a_crash_every_transaction_comes_whole_once(
) {
    for driver in ["blocking", "async"] {
        let (t, script) = mixed();
        let server = TestServer::builder()
            .publication(Publication::new("p").table(t))
            .script(script)
            // The first connection is cut inside the first transaction.
            .fault(
                Fault::new(
                    Trigger::Change {
                        transaction: 1,
                        after: 1,
                    },
                    Action::Close,
                )
                .connection(1),
            )
            // The second mid-frame, in the streamed transaction's first change.
            .fault(
                Fault::new(
                    Trigger::Message {
                        n: 3,
                        kind: Some(MessageKind::of::<pgoutput_codec::Insert<'_>>()),
                        before: false,
                        byte: Some(34),
                    },
                    Action::Reset,
                )
                .connection(2),
            )
            // The third inside that streamed transaction's second block.
            .fault(
                Fault::new(
                    Trigger::StreamBlock {
                        transaction: 1,
                        block: 2,
                    },
                    Action::Close,
                )
                .connection(3),
            )
            // The fourth by a crash, after two more transactions.
            .fault(Fault::new(Trigger::Commit { transaction: 2 }, Action::Crash).connection(4))
            .start()
            .unwrap();
        let options = StreamOptions::new(ProtocolVersion::V2, &["p"]).streaming(Streaming::On);
        let ends = rendered_ends(&server, &options);
        create_slot(&server, "cut");
        let resumes = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&resumes);
        let config = ConsumerConfig::new("cut", options)
            .auto_confirm(true)
            .status_interval(Duration::from_millis(100))
            .reconnect(Duration::from_millis(50))
            .on_reconnect(move |note| {
                if let Reconnecting::Resumed { .. } = note {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            });
        let all = match driver {
            "blocking" => blocking(&server, config, 6),
            _ => asynchronous(&server, config, 6),
        };
        let want: Vec<Got> = (0..6)
            .map(|i| Got {
                kind: TransactionKind::Committed,
                streamed: i % 2 == 1,
                end: Some(ends[i]),
                rows: vec![format!("t: id={i}0"), format!("t: id={i}1")],
            })
            .collect();
        assert_eq!(all, want, "{driver}");
        assert_eq!(
            resumes.load(Ordering::SeqCst),
            4,
            "{driver}: every cut resumed"
        );
        let end = server.wal_end();
        assert_eq!(
            server.wait_for_confirmed_flush("cut", end, Duration::from_secs(10)),
            Ok(end),
            "{driver}"
        );
        assert_eq!(server.findings(), [], "{driver}");
    }
}

/// `confirm_now` reports a position at once, as pg_recvlogical does after a flush: with
/// status updates an hour apart, the slot still reaches each transaction's end as soon as
/// the consumer confirms it (both consumers).
#[test]
fn confirm_now_reports_the_position_at_once() {
    let (t, script) = super::two_row_transactions(2);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script)
        .start()
        .unwrap();
    let ends = rendered_ends(&server, &StreamOptions::new(ProtocolVersion::V1, &["p"]));
    let config = |slot: &str| {
        ConsumerConfig::new(slot, StreamOptions::new(ProtocolVersion::V1, &["p"]))
            .status_interval(Duration::from_secs(3600))
    };
    // A wait on the slot's position, not a timing: the server's own reply request comes
    // only after half of its 60 s wal_sender_timeout.
    let reached =
        |slot: &str, end: Lsn| server.wait_for_confirmed_flush(slot, end, Duration::from_secs(20));
    create_slot(&server, "now");
    let mut consumer = Consumer::connect(&info(&server), config("now")).unwrap();
    for end in &ends {
        let transaction = consumer.next_transaction().unwrap().unwrap();
        assert_eq!(transaction.end_lsn(), Some(*end));
        consumer.confirm_now(*end);
        assert_eq!(reached("now", *end), Ok(*end), "blocking");
    }
    consumer.close();
    create_slot(&server, "now_async");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    std::thread::scope(|scope| {
        runtime.block_on(async {
            let mut consumer = AsyncConsumer::connect(&info(&server), config("now_async"))
                .await
                .unwrap();
            for &end in &ends {
                let transaction = consumer.next_transaction().await.unwrap().unwrap();
                assert_eq!(transaction.end_lsn(), Some(end));
                consumer.confirm_now(end);
                assert!(consumer.idle());
                // The server's wait blocks: on a thread of its own, the runtime free to
                // run the consumer's I/O task meanwhile.
                let waiter = scope.spawn(move || reached("now_async", end));
                while !waiter.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                assert_eq!(waiter.join().unwrap(), Ok(end), "async");
            }
            consumer.close().await;
        });
    });
}
