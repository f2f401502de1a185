//! The consumer API (`client::Consumer` over `client::Replication`) against the test
//! server: every message of every option set, rows by column name, feedback reaching the
//! slot, reply requests answered while the consumer is busy, and a resume after a
//! dropped connection with no transaction lost or repeated.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgoutput_client::{ConnInfo, Connection, Consumer, ConsumerConfig, Finished, Reconnecting};
use pgoutput_codec::{Decoder, IntoOwned, Lsn, PgOutputMessage, ProtocolVersion};
use pgoutput_harness::faults::{Action, Fault, Trigger};
use pgoutput_harness::server::{Publication, Script, Table, TestServer, Transaction};

use super::option_sets;

fn connect(server: &TestServer) -> (Connection, ConnInfo) {
    let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    (Connection::connect(&info).expect("connects"), info)
}

/// A new slot on `server`, and a consumer of it.
fn consume(server: &TestServer, slot: &str, config: ConsumerConfig) -> Consumer {
    let (mut conn, info) = connect(server);
    conn.simple_query(&format!(
        "CREATE_REPLICATION_SLOT \"{slot}\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
    ))
    .unwrap();
    Consumer::start(conn, Some(info), config).expect("streaming starts")
}

/// What the test server renders for `options`: each message with its position.
fn rendered(
    server: &TestServer,
    options: &pgoutput_client::StreamOptions,
) -> Vec<(Lsn, PgOutputMessage<'static>)> {
    let mut decoder = Decoder::new(options.proto_version, options.streaming).unwrap();
    server
        .render(options)
        .unwrap()
        .iter()
        .map(|m| (m.lsn, decoder.decode(&m.payload).unwrap().into_owned()))
        .collect()
}

#[test]
fn every_message_of_every_option_set_arrives_and_the_slot_follows() {
    let server = super::every_kind_server();
    let end = server.wal_end();
    for (i, options) in option_sets().into_iter().enumerate() {
        let slot = format!("c{i}");
        let expected = rendered(&server, &options);
        let config = ConsumerConfig::new(&slot, options.clone())
            .auto_confirm(true)
            .status_interval(Duration::from_millis(100));
        let mut consumer = consume(&server, &slot, config);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < expected.len() {
            assert!(
                Instant::now() < deadline,
                "{options:?}: {} of {}",
                got.len(),
                expected.len()
            );
            let Some(event) = consumer.next_within(Duration::from_millis(200)).unwrap() else {
                continue;
            };
            // Every change is resolved to its table, and its rows to their columns.
            if let Some(row) = event.new_row().or_else(|| event.old_row()) {
                let table = event.relation().expect("a change's table is known");
                assert_eq!(row.relation(), table);
                assert!(table.name == "t1" || table.name == "t2");
                assert!(row.column("id").is_some(), "{options:?}");
            }
            got.push((event.wal_start, event.message.into_owned()));
        }
        assert_eq!(got, expected, "{options:?}");
        // auto_confirm: the slot reaches the end once the consumer has moved past it.
        assert!(consumer
            .next_within(Duration::from_millis(50))
            .unwrap()
            .is_none());
        assert_eq!(
            server.wait_for_confirmed_flush(&slot, end, Duration::from_secs(10)),
            Ok(end),
            "{options:?}"
        );
        consumer.close();
    }
}

fn accounts() -> Table {
    Table::new(16390, "public", "accounts")
        .key_column("id", 20)
        .column("name", 25)
        .column("balance", 701)
        .column("active", 16)
        .column("photo", 17)
}

#[test]
fn rows_read_by_column_name_in_text_and_binary() {
    let accounts = accounts();
    let server = TestServer::builder()
        .publication(Publication::new("app").table(accounts.clone()))
        .script(
            Script::new().transaction(
                Transaction::new()
                    .insert(
                        &accounts,
                        [
                            Some("1"),
                            Some("alice"),
                            Some("10.5"),
                            Some("t"),
                            Some("\\x0102"),
                        ],
                    )
                    .insert(&accounts, [Some("2"), None, Some("-3"), Some("f"), None]),
            ),
        )
        .start()
        .unwrap();
    for binary in [false, true] {
        let slot = format!("rows_{binary}");
        let options =
            pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["app"]).binary(binary);
        let mut consumer = consume(&server, &slot, ConsumerConfig::new(&slot, options));
        let mut rows = Vec::new();
        while rows.len() < 2 {
            let Some(event) = consumer.next_within(Duration::from_secs(10)).unwrap() else {
                panic!("no insert within 10 s (binary {binary})");
            };
            if let Some(row) = event.new_row() {
                rows.push((
                    row.value::<i64>("id").unwrap(),
                    row.value::<Option<String>>("name").unwrap(),
                    row.value::<f64>("balance").unwrap(),
                    row.value::<bool>("active").unwrap(),
                    row.value::<Option<Vec<u8>>>("photo").unwrap(),
                ));
                // Asked as the wrong type, or a column that is not there: typed errors.
                let err = row.value::<i64>("name").unwrap_err();
                assert!(err.to_string().contains("\"name\""), "{err}");
                assert!(row.value::<i32>("nope").is_err());
                assert_eq!(row.get(0).unwrap().name(), "id");
            }
        }
        assert_eq!(
            rows,
            [
                (1, Some("alice".to_owned()), 10.5, true, Some(vec![1, 2])),
                (2, None, -3.0, false, None)
            ],
            "binary {binary}"
        );
        let name = {
            let event = loop {
                // The Commit comes next.
                if let Some(event) = consumer.next_within(Duration::from_secs(10)).unwrap() {
                    break event;
                }
            };
            event.confirmable_lsn()
        };
        assert_eq!(name, Some(server.wal_end()));
        consumer.close();
    }
}

/// A consumer that takes longer over one event than the server's wal_sender_timeout
/// stays connected: the I/O thread answers reply requests at once and sends status
/// updates on its interval while the consumer is busy.
#[test]
fn feedback_flows_while_the_consumer_is_busy() {
    let (t, script) = super::two_row_transactions(3);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script)
        .wal_sender_timeout(Duration::from_millis(1500))
        .fault(Fault::new(Trigger::message(3), Action::RequestReply).times(1))
        .start()
        .unwrap();
    let options = pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("busy", options).status_interval(Duration::from_millis(300));
    let mut consumer = consume(&server, "busy", config);
    let mut commits = 0;
    while commits < 3 {
        let event = consumer
            .next_within(Duration::from_secs(10))
            .unwrap()
            .expect("an event");
        if let Some(end) = event.confirmable_lsn() {
            commits += 1;
            // Busy for twice the server's timeout, then done with the transaction.
            std::thread::sleep(Duration::from_millis(3000));
            consumer.confirm(end);
        }
    }
    assert_eq!(
        server.wait_for_confirmed_flush("busy", server.wal_end(), Duration::from_secs(5)),
        Ok(server.wal_end())
    );
    let client = server
        .clients()
        .into_iter()
        .find(|c| {
            c.commands
                .iter()
                .any(|q| q.contains("\"busy\"") && q.starts_with("START"))
        })
        .unwrap();
    assert!(client.connected, "dropped: {:?}", client.ended);
    assert!(!client.replies.is_empty(), "the reply request was answered");
    assert!(
        client.replies.iter().all(|d| *d < Duration::from_secs(1)),
        "replies took {:?}",
        client.replies
    );
    assert_eq!(server.findings(), []);
    consumer.close();
}

/// Connections dropped mid-transaction (twice) and the server ending the stream: the
/// consumer reconnects, resumes after the last whole transaction it delivered, and every
/// transaction arrives whole exactly once; a partial one is marked `resumed`.
#[test]
fn a_resume_after_a_dropped_connection_loses_and_repeats_nothing() {
    let (t, script) = super::two_row_transactions(6);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script)
        .fault(Fault::new(
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::Close,
        ))
        .fault(Fault::new(
            Trigger::Change {
                transaction: 4,
                after: 1,
            },
            Action::Reset,
        ))
        .start()
        .unwrap();
    // Once the consumer has confirmed everything, the walsender shuts down.
    let end = server.wal_end();
    server
        .add_fault(Fault::new(Trigger::Flush { lsn: end }, Action::Shutdown))
        .unwrap();
    let notes = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&notes);
    let options = pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("resume", options)
        .auto_confirm(true)
        .reconnect(Duration::from_millis(50))
        .on_reconnect(move |note| {
            log.lock().unwrap().push(match note {
                Reconnecting::Lost {
                    error: Some(err), ..
                } => format!("lost: {err}"),
                Reconnecting::Lost { error: None, .. } => "the server ended the stream".into(),
                Reconnecting::Retrying { error, .. } => format!("retrying: {error}"),
                Reconnecting::Resumed { after } => format!("resumed after {after}"),
            })
        });
    let mut consumer = consume(&server, "resume", config);
    let mut committed = super::Committed::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed.done.len() < 6 {
        assert!(
            Instant::now() < deadline,
            "got {committed:?}, notes {:?}",
            notes.lock().unwrap()
        );
        let Some(event) = consumer.next_within(Duration::from_millis(200)).unwrap() else {
            continue;
        };
        committed.see(&event);
    }
    assert_eq!(committed.done, super::Committed::expected(6));
    assert_eq!(committed.resumed, 2, "{:?}", notes.lock().unwrap());
    // The shutdown once everything is confirmed ends the stream; the consumer reconnects
    // after the end, and nothing comes twice.
    let deadline = Instant::now() + Duration::from_secs(15);
    while notes
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n.starts_with("resumed"))
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "{:?}", notes.lock().unwrap());
        if let Some(event) = consumer.next_within(Duration::from_millis(100)).unwrap() {
            panic!("after the whole script: {:?}", event.message);
        }
    }
    assert_eq!(
        server.wait_for_confirmed_flush("resume", server.wal_end(), Duration::from_secs(10)),
        Ok(server.wal_end())
    );
    let notes = notes.lock().unwrap().clone();
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.starts_with("resumed after"))
            .count(),
        3,
        "{notes:?}"
    );
    // Nothing confirmed that was not sent, no reply late, nothing sent twice; the two
    // connections cut before their first status update are judged with the slot's
    // others, which confirmed everything.
    assert_eq!(server.findings(), []);
    assert_eq!(consumer.finished(), None);
    consumer.close();
}

/// Without reconnecting, a lost connection is the consumer's error, and an end position
/// ends the stream where pg_recvlogical --endpos would.
#[test]
fn without_reconnecting_a_loss_is_an_error_and_an_end_position_ends_it() {
    let close = Fault::new(
        Trigger::Change {
            transaction: 3,
            after: 1,
        },
        Action::Close,
    );
    let server = super::two_row_server(3, [close.slot("lost")]);
    let options = pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let mut consumer = consume(
        &server,
        "lost",
        ConsumerConfig::new("lost", options.clone()),
    );
    let err = loop {
        match consumer.next_within(Duration::from_secs(10)) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("no loss within 10 s"),
            Err(err) => break err,
        }
    };
    assert!(err.is_transient(), "{err}");
    assert_eq!(consumer.finished(), Some(Finished::Closed));
    // The first transaction's Commit is the end position: it is the last event.
    let first_commit = server.events()[0].end_lsn();
    let config = ConsumerConfig::new("ends", options).end_lsn(first_commit);
    let mut consumer = consume(&server, "ends", config);
    let mut last = None;
    while let Some(event) = consumer.next().unwrap() {
        last = Some(event.wal_start);
    }
    assert_eq!(last, Some(first_commit));
    assert_eq!(consumer.finished(), Some(Finished::EndPosition));
}

/// A consumer closed while its I/O thread waits to resume (the connection lost, the loss
/// not read yet) or for room in its queue: the close ends both waits.
#[test]
fn a_consumer_closed_while_it_waits_to_resume_closes() {
    for queue in [4, 100_000] {
        // A server each: the fault fires once.
        let server = super::cut_inside(150);
        let (lost, losses) = std::sync::mpsc::channel();
        let options = pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["p"]);
        let slot = format!("closing{queue}");
        let config = ConsumerConfig::new(&slot, options)
            .queue(queue)
            .reconnect(Duration::from_millis(50))
            .on_reconnect(move |note| {
                if let Reconnecting::Lost { .. } = note {
                    let _ = lost.send(());
                }
            });
        let mut consumer = consume(&server, &slot, config);
        // One event read, then nothing: with a short queue the I/O thread waits for
        // room; with a long one it reads on to the cut and waits to resume.
        assert!(consumer.next().unwrap().is_some());
        if queue > 4 {
            losses.recv().unwrap();
        }
        let (closed, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            consumer.close();
            let _ = closed.send(());
        });
        // A guard against a hang, not a timing: a close returns as soon as it can.
        assert_eq!(
            done.recv_timeout(Duration::from_secs(60)),
            Ok(()),
            "queue {queue}"
        );
    }
}

/// A consumer that has confirmed all it was given and is not asking for the next event
/// (busy elsewhere, or about to close): its I/O thread answers a reply request at an idle
/// WAL end with that WAL end, as the consumer side would once it read the keepalive; so
/// the probe finds nothing against it, and its close leaves the slot there too.
#[test]
fn a_caught_up_consumer_busy_elsewhere_answers_an_idle_reply_request_with_the_wal_end() {
    let t = Table::new(16385, "public", "t").key_column("id", 23);
    // A table outside the publication: its transaction moves the WAL end, and sends
    // nothing.
    let other = Table::new(16390, "public", "other").key_column("id", 23);
    let script = Script::new()
        .transaction(Transaction::new().insert(&t, ["1"]))
        .transaction(Transaction::new().insert(&other, ["2"]));
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .table(other)
        .script(script)
        .start()
        .unwrap();
    server.set_probe(Some(pgoutput_harness::judge::Probe::every(1)));
    let wal_end = server.wal_end();
    let options = pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("busy", options).status_interval(Duration::from_secs(3600));
    let mut consumer = consume(&server, "busy", config);
    let end = loop {
        let event = consumer.next().unwrap().expect("the stream goes on");
        if let Some(end) = event.confirmable_lsn() {
            break end;
        }
    };
    assert!(end < wal_end);
    consumer.confirm(end);
    // Nothing more is asked of the consumer: the I/O thread alone answers.
    assert_eq!(
        server.wait_for_confirmed_flush("busy", wal_end, Duration::from_secs(20)),
        Ok(wal_end)
    );
    assert_eq!(server.findings(), []);
    consumer.close();
}

/// A walsender that falls silent for good, its socket left open (a half-open
/// connection): the consumer asks for a reply at half its receive timeout, gives the
/// connection up at the whole of it, and resumes on a new one with nothing lost or
/// repeated. A server that answers the asking is never given up on.
#[test]
fn a_silent_connection_is_given_up_at_the_receive_timeout_and_a_quiet_one_is_not() {
    let stall = Fault::new(
        Trigger::Change {
            transaction: 2,
            after: 1,
        },
        Action::Stall { ms: None },
    );
    let server = super::two_row_server(4, [stall.slot("silent")]);
    let notes = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&notes);
    let options = pgoutput_client::StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("silent", options.clone())
        .auto_confirm(true)
        .receive_timeout(Some(Duration::from_millis(300)))
        .reconnect(Duration::from_millis(50))
        .on_reconnect(move |note| {
            if let Reconnecting::Lost {
                error: Some(err), ..
            } = note
            {
                log.lock().unwrap().push(err.to_string());
            }
        });
    let mut consumer = consume(&server, "silent", config);
    let mut committed = super::Committed::default();
    while committed.done.len() < 4 {
        let event = consumer
            .next_within(Duration::from_secs(20))
            .unwrap()
            .unwrap_or_else(|| panic!("stalled: {committed:?}, {:?}", notes.lock().unwrap()));
        committed.see(&event);
    }
    assert_eq!(committed.done, super::Committed::expected(4));
    let notes = notes.lock().unwrap().clone();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("sent nothing for 300ms"), "{notes:?}");
    consumer.close();

    // Quiet but alive: nothing to send, and each asking answered at once. Three askings
    // on one connection are three silences it outlived.
    let config = ConsumerConfig::new("quiet", options)
        .receive_timeout(Some(Duration::from_millis(200)))
        .reconnect(Duration::from_millis(50));
    let consumer = consume(&server, "quiet", config);
    let asked = |client: &pgoutput_harness::server::ClientInfo| {
        client
            .status_updates
            .iter()
            .filter(|u| u.update.reply_requested)
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let quiet: Vec<_> = server
            .clients()
            .into_iter()
            .filter(|c| c.commands.iter().any(|q| q.contains("\"quiet\"")))
            .collect();
        assert!(quiet.len() <= 2, "given up on: {quiet:?}");
        // The first is the one that made the slot; the second streams.
        if quiet.last().is_some_and(|c| asked(c) >= 3) {
            assert!(quiet.last().unwrap().connected);
            break;
        }
        assert!(Instant::now() < deadline, "{quiet:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    consumer.close();
}
