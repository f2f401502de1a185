//! The async consumer (`client::tokio::Consumer`) against the test server, on a
//! single-threaded tokio runtime: every message of every option set, rows by column
//! name, feedback while the consumer awaits something else for longer than
//! `wal_sender_timeout`, a resume after dropped connections with every transaction
//! exactly once, and an end position.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pgoutput_client::tokio::Consumer;
use pgoutput_client::{ConnInfo, ConsumerConfig, Finished, Reconnecting, StreamOptions};
use pgoutput_codec::{Decoder, IntoOwned, Lsn, PgOutputMessage, ProtocolVersion};
use pgoutput_harness::faults::{Action, Fault, Trigger};
use pgoutput_harness::judge::Finding;
use pgoutput_harness::server::{Publication, TestServer};

use super::option_sets;

fn info(server: &TestServer) -> ConnInfo {
    ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap()
}

fn rendered(server: &TestServer, options: &StreamOptions) -> Vec<(Lsn, PgOutputMessage<'static>)> {
    let mut decoder = Decoder::new(options.proto_version, options.streaming).unwrap();
    server
        .render(options)
        .unwrap()
        .iter()
        .map(|m| (m.lsn, decoder.decode(&m.payload).unwrap().into_owned()))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn every_message_of_every_option_set_arrives_and_the_slot_follows() {
    let server = super::every_kind_server();
    let end = server.wal_end();
    for (i, options) in option_sets().into_iter().enumerate() {
        let slot = format!("a{i}");
        let expected = rendered(&server, &options);
        let config = ConsumerConfig::new(&slot, options.clone())
            .create_slot(true)
            .auto_confirm(true)
            .status_interval(Duration::from_millis(100));
        let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
        let mut got = Vec::new();
        while got.len() < expected.len() {
            let event = tokio::time::timeout(Duration::from_secs(20), consumer.next())
                .await
                .expect("an event within 20 s")
                .unwrap()
                .expect("the stream goes on");
            if let Some(row) = event.new_row().or_else(|| event.old_row()) {
                assert!(row.column("id").is_some(), "{options:?}");
            }
            got.push((event.wal_start, event.message.into_owned()));
        }
        assert_eq!(got, expected, "{options:?}");
        assert!(consumer
            .next_within(Duration::from_millis(50))
            .await
            .unwrap()
            .is_none());
        // The slot is polled between turns of the I/O task.
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.confirmed_flush_lsn(&slot) != Some(end) {
            assert!(
                Instant::now() < deadline,
                "{options:?}: slot at {:?}",
                server.confirmed_flush_lsn(&slot)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        consumer.close().await;
    }
}

/// The consumer awaits something else for 3 s, twice the server's timeout, after each
/// transaction: the I/O task answers the reply request at once and keeps the status
/// updates going, so the connection stays and the slot follows.
#[tokio::test(flavor = "current_thread")]
async fn feedback_flows_while_the_consumer_awaits_something_else() {
    let (t, script) = super::two_row_transactions(3);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script)
        .wal_sender_timeout(Duration::from_millis(1500))
        .fault(Fault::new(Trigger::message(3), Action::RequestReply))
        .start()
        .unwrap();
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("busy", options)
        .create_slot(true)
        .status_interval(Duration::from_millis(300));
    let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
    let mut commits = 0;
    while commits < 3 {
        let event = consumer
            .next_within(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("an event");
        if let Some(end) = event.confirmable_lsn() {
            commits += 1;
            tokio::time::sleep(Duration::from_secs(3)).await;
            consumer.confirm(end);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.confirmed_flush_lsn("busy") != Some(server.wal_end()) {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = server
        .clients()
        .into_iter()
        .find(|c| {
            c.commands
                .iter()
                .any(|q| q.starts_with("START_REPLICATION SLOT \"busy\""))
        })
        .unwrap();
    assert!(client.connected, "dropped: {:?}", client.ended);
    assert!(!client.replies.is_empty());
    assert!(
        client.replies.iter().all(|d| *d < Duration::from_secs(1)),
        "{:?}",
        client.replies
    );
    consumer.close().await;
}

/// A close and a reset mid-transaction, then a walsender shutdown once all is confirmed:
/// every transaction arrives whole exactly once.
#[tokio::test(flavor = "current_thread")]
async fn a_resume_after_a_dropped_connection_loses_and_repeats_nothing() {
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
    let end = server.wal_end();
    server
        .add_fault(Fault::new(Trigger::Flush { lsn: end }, Action::Shutdown))
        .unwrap();
    let notes = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&notes);
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("resume", options)
        .create_slot(true)
        .auto_confirm(true)
        .reconnect(Duration::from_millis(50))
        .on_reconnect(move |note| {
            if let Reconnecting::Resumed { after } = note {
                log.lock().unwrap().push(*after);
            }
        });
    let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
    let mut committed = super::Committed::default();
    while committed.done.len() < 6 {
        let event = consumer
            .next_within(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("an event");
        committed.see(&event);
    }
    assert_eq!(committed.done, super::Committed::expected(6));
    assert_eq!(committed.resumed, 2);
    // The shutdown ends the stream; the consumer reconnects after the end, nothing more.
    let deadline = Instant::now() + Duration::from_secs(15);
    while notes.lock().unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "{:?}", notes.lock().unwrap());
        if let Some(event) = consumer
            .next_within(Duration::from_millis(100))
            .await
            .unwrap()
        {
            panic!("after the whole script: {:?}", event.message);
        }
    }
    assert!(server
        .findings()
        .iter()
        .all(|(_, f)| matches!(f, Finding::NeverConfirmed { .. })));
    consumer.close().await;
}

#[tokio::test(flavor = "current_thread")]
async fn an_end_position_ends_the_stream_and_a_loss_without_reconnecting_is_an_error() {
    let (t, script) = super::two_row_transactions(3);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t))
        .script(script)
        .fault(
            Fault::new(
                Trigger::Change {
                    transaction: 3,
                    after: 1,
                },
                Action::Close,
            )
            .slot("lost"),
        )
        .start()
        .unwrap();
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let first_commit = server.events()[0].end_lsn();
    let config = ConsumerConfig::new("ends", options.clone())
        .create_slot(true)
        .end_lsn(first_commit);
    let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
    let mut last = None;
    while let Some(event) = consumer.next().await.unwrap() {
        last = Some(event.wal_start);
    }
    assert_eq!(last, Some(first_commit));
    assert_eq!(consumer.finished(), Some(Finished::EndPosition));
    consumer.close().await;
    let config = ConsumerConfig::new("lost", options).create_slot(true);
    let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
    let err = loop {
        match consumer.next_within(Duration::from_secs(10)).await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("no loss within 10 s"),
            Err(err) => break err,
        }
    };
    assert!(err.is_transient(), "{err}");
}

/// The async consumer closed while its I/O task waits to resume (the loss not read yet):
/// the close ends the wait.
#[tokio::test(flavor = "current_thread")]
async fn a_consumer_closed_while_it_waits_to_resume_closes() {
    let server = super::cut_inside(150);
    let (lost, mut losses) = tokio::sync::mpsc::unbounded_channel();
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let mut conn = pgoutput_client::Connection::connect(&info(&server)).unwrap();
    conn.simple_query("CREATE_REPLICATION_SLOT \"closing\" LOGICAL pgoutput (SNAPSHOT 'nothing')")
        .unwrap();
    let config = ConsumerConfig::new("closing", options)
        .queue(100_000)
        .reconnect(Duration::from_millis(50))
        .on_reconnect(move |note| {
            if let Reconnecting::Lost { .. } = note {
                let _ = lost.send(());
            }
        });
    let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
    assert!(consumer.next().await.unwrap().is_some());
    losses.recv().await.unwrap();
    // A guard against a hang, not a timing: a close returns as soon as it can.
    tokio::time::timeout(Duration::from_secs(60), consumer.close())
        .await
        .expect("the close returns");
}

/// A walsender gone silent for good, its socket open: the I/O task asks for a reply at
/// half the receive timeout, gives the connection up at the whole of it, and resumes on
/// a new one with every transaction once.
#[tokio::test(flavor = "current_thread")]
async fn a_silent_connection_is_given_up_at_the_receive_timeout() {
    let stall = Fault::new(
        Trigger::Change {
            transaction: 2,
            after: 1,
        },
        Action::Stall { ms: None },
    );
    let server = super::two_row_server(4, [stall]);
    let notes = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&notes);
    let config = ConsumerConfig::new("silent", StreamOptions::new(ProtocolVersion::V1, &["p"]))
        .create_slot(true)
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
    let mut consumer = Consumer::connect(&info(&server), config).await.unwrap();
    let mut committed = super::Committed::default();
    while committed.done.len() < 4 {
        let event = consumer
            .next_within(Duration::from_secs(20))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("stalled: {committed:?}, {:?}", notes.lock().unwrap()));
        committed.see(&event);
    }
    assert_eq!(committed.done, super::Committed::expected(4));
    let notes = notes.lock().unwrap().clone();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("sent nothing for 300ms"), "{notes:?}");
    consumer.close().await;
}
