//! Fault rules, byte for byte: what a client receives before, within and after the
//! frame a rule names, how the connection ends (FIN or RST), the errors in PostgreSQL's
//! words, the shutdown sequence, a crash that sends confirmed transactions again, and the
//! slot states a test can set.

use std::time::{Duration, Instant};

use pgoutput_client::StreamOptions;
use pgoutput_codec::{Lsn, ProtocolVersion};
use pgoutput_harness::faults::{Action, Fault, MessageKind, Trigger};
use pgoutput_harness::judge::{Ending, Fact, Finding, Probe, Resent};
use pgoutput_harness::server::{Publication, Script, TestServer, Transaction};

use super::raw::{message, query, status_update, End, Msg, Raw, Read1, Target};
use super::t1;

/// Three transactions of three inserts: 15 messages for protocol 1 (the first
/// transaction carries the Relation).
fn script() -> Script {
    let t1 = t1();
    let mut script = Script::new();
    for t in 0..3 {
        let mut transaction = Transaction::new();
        for r in 0..3 {
            let id = (t * 10 + r).to_string();
            transaction = transaction.insert(&t1, [id.as_str(), "v"]);
        }
        script = script.transaction(transaction);
    }
    script
}

pub(super) fn server(faults: &[Fault]) -> TestServer {
    let mut builder = TestServer::builder()
        .publication(Publication::new("p").table(t1()))
        .script(script());
    for fault in faults {
        builder = builder.fault(fault.clone());
    }
    builder.start().expect("the test server starts")
}

/// A real PostgreSQL 15, then 18, each started with `settings` (while installed), with
/// the `server_version` the test server announces for that major.
fn real_15_and_18(
    settings: &'static [&'static str],
) -> impl Iterator<Item = (pgoutput_tests::pg::Server, &'static str)> {
    [("15", "15.15"), ("18", "18.6")]
        .into_iter()
        .map_while(move |(major, version)| {
            let binaries = super::binaries(major)?;
            let pg = pgoutput_tests::pg::Server::start_with_settings(&binaries, settings)
                .expect("PostgreSQL starts");
            Some((pg, version))
        })
}

/// The payloads the script renders to, with their positions.
pub(super) fn expected(server: &TestServer) -> Vec<(Lsn, Vec<u8>)> {
    server
        .render(&StreamOptions::new(ProtocolVersion::V1, &["p"]))
        .unwrap()
        .into_iter()
        .map(|f| (f.lsn, f.payload))
        .collect()
}

/// Logged in, slot `slot` created, streaming from it.
fn streaming(server: &TestServer, slot: &str) -> Raw {
    let target = Target::Ours(server.addr());
    let mut raw = Raw::login(&target, "postgres");
    raw.send(&query(&format!(
        "CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"
    )));
    let created = raw.until_ready(Duration::from_secs(10));
    assert!(created.iter().all(|m| m.tag != b'E'), "{created:?}");
    let started = raw.start(slot, "0/0", "p");
    assert_eq!(started.last().map(|m| m.tag), Some(b'W'), "{started:?}");
    raw
}

/// Everything received until the end, as whole backend messages and the bytes of an
/// unfinished one.
struct Received {
    messages: Vec<(u8, Vec<u8>)>,
    partial: Vec<u8>,
    end: End,
}

impl Received {
    fn read(raw: &mut Raw, timeout: Duration) -> Received {
        let (chunks, end) = raw.bytes_until_end(timeout);
        Received::of_chunks(&chunks, end)
    }

    /// Messages read until `count` XLogData frames have come (the connection still
    /// open); a hang fails after a minute instead of waiting for ever.
    fn until_payloads(raw: &mut Raw, count: usize) -> Received {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut messages = Vec::new();
        let mut payloads = 0;
        while payloads < count {
            assert!(
                Instant::now() < deadline,
                "{payloads} of {count} frames came"
            );
            match raw.read(Duration::from_secs(1)) {
                Read1::Msg(tag, body) => {
                    payloads += usize::from(tag == b'd' && body.first() == Some(&b'w'));
                    messages.push(Msg { tag, body });
                }
                Read1::TimedOut => {}
                Read1::Closed => panic!("closed after {payloads} of {count} frames"),
            }
        }
        Received::of_messages(messages)
    }

    /// What chunks read by [`Raw::bytes_until_end`] hold.
    fn of_chunks(chunks: &[(Instant, Vec<u8>)], end: End) -> Received {
        let bytes: Vec<u8> = chunks.iter().flat_map(|(_, c)| c.iter().copied()).collect();
        let (messages, partial) = split(&bytes);
        Received {
            messages,
            partial,
            end,
        }
    }

    /// Messages read one by one (the connection still open).
    fn of_messages(messages: impl IntoIterator<Item = Msg>) -> Received {
        Received {
            messages: messages.into_iter().map(|m| (m.tag, m.body)).collect(),
            partial: Vec::new(),
            end: End::TimedOut,
        }
    }

    /// The XLogData payloads, with their `dataStart`.
    fn payloads(&self) -> Vec<(Lsn, Vec<u8>)> {
        self.messages
            .iter()
            .filter(|(tag, body)| *tag == b'd' && body.first() == Some(&b'w'))
            .map(|(_, body)| {
                let start = u64::from_be_bytes(body[1..9].try_into().unwrap());
                (Lsn(start), body[25..].to_vec())
            })
            .collect()
    }

    /// The keepalives' reply-requested flags.
    fn reply_requests(&self) -> usize {
        self.messages
            .iter()
            .filter(|(tag, body)| *tag == b'd' && body.first() == Some(&b'k') && body[17] == 1)
            .count()
    }

    /// The messages that are not CopyData, as `tag` and, for errors, severity, code and
    /// message.
    fn others(&self) -> Vec<String> {
        self.messages
            .iter()
            .filter(|(tag, _)| *tag != b'd')
            .map(|(tag, body)| match tag {
                b'E' | b'N' => {
                    let msg = Msg {
                        tag: *tag,
                        body: body.clone(),
                    };
                    let detail = match msg.field(b'D').as_str() {
                        "" => String::new(),
                        detail => format!(" DETAIL: {detail}"),
                    };
                    format!(
                        "{} {} {} {}{detail}",
                        char::from(*tag),
                        msg.field(b'V'),
                        msg.field(b'C'),
                        msg.field(b'M'),
                    )
                }
                b'C' => format!("C {}", String::from_utf8_lossy(&body[..body.len() - 1])),
                tag => char::from(*tag).to_string(),
            })
            .collect()
    }
}

fn split(mut bytes: &[u8]) -> (Vec<(u8, Vec<u8>)>, Vec<u8>) {
    let mut messages = Vec::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        if bytes.len() < len + 1 {
            break;
        }
        messages.push((bytes[0], bytes[5..=len].to_vec()));
        bytes = &bytes[len + 1..];
    }
    (messages, bytes.to_vec())
}

/// The index in `expected` of transaction `k`'s (1-based) end.
fn end_of(expected: &[(Lsn, Vec<u8>)], k: usize) -> usize {
    expected
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| p[0] == b'C')
        .nth(k - 1)
        .unwrap()
        .0
}

/// The slot a fault ended the stream of is free once the client has seen the end of the
/// connection: a walsender's socket closes only after its exit released the slot, so a
/// consumer that reconnects at once is not refused with 55006 (pg-logical-replication
/// does, and was, on a loaded machine, when the test server sent its FIN first).
fn released_at_the_end(server: &TestServer, slot: &str) {
    let info = server.slots().into_iter().find(|s| s.name == slot).unwrap();
    assert_eq!(info.active_client, None, "{slot} is still held: {info:?}");
}

#[test]
fn a_close_inside_a_transaction_cuts_it_after_the_named_change() {
    let rule = Fault::new(
        Trigger::Change {
            transaction: 2,
            after: 1,
        },
        Action::Close,
    );
    let server = server(&[rule]);
    let expected = expected(&server);
    let mut raw = streaming(&server, "s");
    let got = Received::read(&mut raw, Duration::from_secs(5));
    // Transaction 1 whole, then transaction 2's Begin and first Insert.
    let cut = end_of(&expected, 1) + 3;
    assert_eq!(got.payloads(), expected[..cut]);
    assert_eq!(got.payloads().last().unwrap().1[0], b'I');
    assert_eq!((got.end, got.partial.len()), (End::Eof, 0));
    released_at_the_end(&server, "s");
    // The server's record of what it sent, keepalives aside, is the same.
    let deadline = Instant::now() + Duration::from_secs(5);
    let record = loop {
        let client = server.clients().into_iter().next().unwrap();
        if !client.connected || Instant::now() > deadline {
            break client;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let sent: Vec<(u8, Lsn)> = record
        .sent
        .iter()
        .filter(|m| m.tag != b'k')
        .map(|m| (m.tag, m.lsn))
        .collect();
    let wanted: Vec<(u8, Lsn)> = expected[..cut]
        .iter()
        .map(|(lsn, p)| (p[0], *lsn))
        .collect();
    assert_eq!(sent, wanted);
    assert_eq!(record.ended.as_deref(), Some("closed: fault: closed"));
    // Once: the next session gets everything.
    let mut again = streaming(&server, "s2");
    let all = Received::read(&mut again, Duration::from_millis(500));
    assert_eq!(all.payloads(), expected);
    assert_eq!(all.end, End::TimedOut);
    assert_eq!(server.faults()[0].1, 1);
}

#[test]
fn a_reset_in_the_middle_of_a_frame_leaves_its_first_bytes() {
    let rule = Fault::new(Trigger::mid_frame(3, 10), Action::Reset);
    let server = server(&[rule]);
    let expected = expected(&server);
    let mut raw = streaming(&server, "s");
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_eq!(got.payloads(), expected[..2]);
    assert_eq!(got.end, End::Reset);
    released_at_the_end(&server, "s");
    // The first 10 bytes of the third CopyData: its type, length and XLogData header.
    assert_eq!(got.partial.len(), 10);
    assert_eq!(&got.partial[..1], b"d");
    assert_eq!(got.partial[5], b'w');
}

#[test]
fn a_stall_in_the_middle_of_a_frame_holds_its_rest_then_goes_on() {
    let rule = Fault::new(
        Trigger::Message {
            n: 1,
            kind: Some(MessageKind::of::<pgoutput_codec::Insert<'_>>()),
            before: false,
            byte: Some(12),
        },
        Action::Stall { ms: Some(600) },
    );
    let server = server(&[rule]);
    let expected = expected(&server);
    let mut raw = streaming(&server, "s");
    let (chunks, end) = raw.bytes_until_end(Duration::from_secs(3));
    assert_eq!(end, End::TimedOut);
    let got = Received::of_chunks(&chunks, end);
    assert_eq!(
        got.payloads(),
        expected,
        "the whole stream, after the stall"
    );
    let gap = chunks.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap();
    assert!(gap >= Duration::from_millis(500), "no stall: {gap:?}");
}

#[test]
fn errors_come_in_postgresql_words() {
    let rules = [
        Fault::new(Trigger::Commit { transaction: 1 }, Action::error("57P01")).slot("fatal"),
        Fault::new(Trigger::Time { ms: 200 }, Action::error("55000")).slot("invalid"),
        Fault::new(Trigger::before_message(2), Action::error("53100")).slot("full"),
    ];
    let server = server(&rules);
    let expected = expected(&server);
    let mut raw = streaming(&server, "fatal");
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_eq!(got.payloads(), expected[..=end_of(&expected, 1)]);
    assert_eq!(
        got.others(),
        ["E FATAL 57P01 terminating connection due to administrator command"]
    );
    assert_eq!(got.end, End::Eof);

    // An ERROR ends the streaming, and the session goes on, as a walsender's does.
    let mut raw = streaming(&server, "invalid");
    let mut seen = Vec::new();
    loop {
        match raw.read(Duration::from_secs(5)) {
            Read1::Msg(b'd', _) => {}
            Read1::Msg(b'Z', _) => break,
            Read1::Msg(tag, body) => seen.push(Msg { tag, body }),
            other => panic!("{other:?} after {seen:?}"),
        }
    }
    let got = Received::of_messages(seen);
    assert_eq!(
        got.others(),
        ["E ERROR 55000 can no longer access replication slot \"invalid\" DETAIL: This replication slot has been invalidated due to \"wal_removed\"."]
    );
    let answer = raw.query("IDENTIFY_SYSTEM");
    assert_eq!(answer.last().map(|m| m.tag), Some(b'Z'));

    let mut raw = streaming(&server, "full");
    let got = Received::read(&mut raw, Duration::from_millis(500));
    assert_eq!(got.payloads(), expected[..1]);
    let xid = u32::from_be_bytes(expected[0].1[17..21].try_into().unwrap());
    assert_eq!(
        got.others(),
        [
            format!(
                "E ERROR 53100 could not write to data file for XID {xid}: No space left on device"
            ),
            "Z".into()
        ]
    );
}

#[test]
fn the_shutdown_sequence_waits_for_the_client_to_confirm_what_it_was_sent() {
    let rule = Fault::new(Trigger::Commit { transaction: 1 }, Action::Shutdown);
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t1()))
        .script(script())
        .fault(rule)
        .wal_sender_timeout(Duration::ZERO)
        .start()
        .unwrap();
    let expected = expected(&server);
    let end = server.wal_end();
    let mut raw = streaming(&server, "s");
    // Everything is sent; then keepalives ask for a reply, and the connection stays
    // while the client confirms nothing.
    let got = Received::read(&mut raw, Duration::from_secs(1));
    assert_eq!(got.payloads(), expected);
    assert!(got.reply_requests() >= 1);
    assert_eq!(got.end, End::TimedOut);
    assert!(got.others().is_empty(), "{:?}", got.others());
    raw.send(&status_update(end, 0));
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_eq!(got.others(), ["C COPY 0"]);
    assert_eq!(got.end, End::Eof);
    // The walsender's own end, as the proxy tells it too: not a fault's cut.
    let deadline = Instant::now() + Duration::from_secs(5);
    let ended = loop {
        let ended = server.facts().into_iter().find_map(|(_, fact)| match fact {
            Fact::Ended { how, .. } => Some(how),
            _ => None,
        });
        if ended.is_some() || Instant::now() > deadline {
            break ended;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(ended, Some(Ending::Server));
}

#[test]
fn a_crash_sends_again_what_was_confirmed_after_the_last_checkpoint() {
    let server = server(&[]);
    let expected = expected(&server);
    let first_end = expected[end_of(&expected, 1)].0;
    let second_end = expected[end_of(&expected, 2)].0;
    let mut raw = streaming(&server, "s");
    let got = Received::read(&mut raw, Duration::from_millis(300));
    assert_eq!(got.payloads(), expected);
    raw.send(&status_update(first_end, 0));
    server
        .wait_for_confirmed_flush("s", first_end, Duration::from_secs(5))
        .unwrap();
    server.checkpoint();
    raw.send(&status_update(second_end, 0));
    server
        .wait_for_confirmed_flush("s", second_end, Duration::from_secs(5))
        .unwrap();
    server.crash();
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_ne!(got.end, End::TimedOut, "the connection survived the crash");
    let slot = server.slots().into_iter().find(|s| s.name == "s").unwrap();
    assert_eq!(
        (slot.confirmed_flush_lsn, slot.persisted_lsn),
        (first_end, first_end)
    );
    // After the restart the second transaction, confirmed before the crash, comes again.
    let target = Target::Ours(server.addr());
    let mut raw = Raw::login(&target, "postgres");
    raw.start("s", "0/0", "p");
    let got = Received::read(&mut raw, Duration::from_millis(300));
    // (With a Relation after its Begin: a new session has not seen the table.)
    let mut payloads = got.payloads();
    assert_eq!(payloads.remove(1).1[0], b'R');
    let from_second = end_of(&expected, 1) + 1;
    assert_eq!(payloads, expected[from_second..]);
    // The server records it as a fact of the slot's (a correct consumer skips them),
    // and finds nothing wrong with a consumer that confirmed again what it had.
    raw.send(&status_update(second_end, 0));
    server
        .wait_for_confirmed_flush("s", second_end, Duration::from_secs(5))
        .unwrap();
    raw.send(&message(b'X', &[]));
    drop(raw);
    let resent: Vec<Resent> = server
        .facts()
        .into_iter()
        .filter_map(|(_, f)| match f {
            Fact::Resent(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(resent.len(), 1, "{:?}", server.facts());
    assert_eq!(
        (
            resent[0].count,
            resent[0].first,
            resent[0].last,
            resent[0].confirmed_before
        ),
        (1, second_end, second_end, second_end)
    );
    assert!(server
        .facts()
        .iter()
        .any(|(_, f)| matches!(f, Fact::Crash { confirmed } if *confirmed == second_end)));
    assert_eq!(server.findings(), []);
}

#[test]
fn a_crash_on_a_flush_position_drops_every_connection() {
    let server = server(&[]);
    let expected = expected(&server);
    let first_end = expected[end_of(&expected, 1)].0;
    server
        .add_fault(Fault::new(Trigger::Flush { lsn: first_end }, Action::Crash))
        .unwrap();
    let mut bystander = streaming(&server, "other");
    let mut raw = streaming(&server, "s");
    Received::read(&mut raw, Duration::from_millis(300));
    raw.send(&status_update(first_end, 0));
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_ne!(got.end, End::TimedOut);
    let got = Received::read(&mut bystander, Duration::from_secs(5));
    assert_ne!(got.end, End::TimedOut, "the other connection survived");
    // Nothing was checkpointed since the slot was created: back to its start.
    let slot = server.slots().into_iter().find(|s| s.name == "s").unwrap();
    assert!(slot.confirmed_flush_lsn < first_end);
}

#[test]
fn slot_states_answer_as_postgresql_does() {
    let server = server(&[]);
    let target = Target::Ours(server.addr());
    let mut raw = Raw::login(&target, "postgres");
    for slot in ["gone", "invalid", "held"] {
        raw.query(&format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"));
    }
    let start = |raw: &mut Raw, slot: &str| -> Vec<String> {
        let answer = raw.start(slot, "0/0", "p");
        let got = Received::of_messages(answer);
        got.others()
    };
    assert!(server.drop_slot("gone"));
    assert_eq!(
        start(&mut raw, "gone"),
        [
            "E ERROR 42704 replication slot \"gone\" does not exist",
            "Z"
        ]
    );
    assert!(server.invalidate_slot("invalid"));
    assert_eq!(
        start(&mut raw, "invalid"),
        ["E ERROR 55000 can no longer access replication slot \"invalid\" DETAIL: This replication slot has been invalidated due to \"wal_removed\".", "Z"]
    );
    // Held while its client streams, then for 2 s after it leaves: refused once the
    // server has closed the client's connection (the slot let go), then streamed again
    // once the hold is over (each waited for as an event, not a time).
    let mut first = Raw::login(&target, "postgres");
    first.start("held", "0/0", "p");
    assert!(server.hold_slot("held", Duration::from_secs(2)));
    first.send(&message(b'X', &[]));
    assert_eq!(first.bytes_until_end(Duration::from_secs(60)).1, End::Eof);
    let refused = start(&mut raw, "held");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0].starts_with("E ERROR 55006 replication slot \"held\" is active for PID "));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = start(&mut raw, "held");
        if answer == ["W"] {
            break;
        }
        assert!(answer[0].starts_with("E ERROR 55006 "), "{answer:?}");
        assert!(Instant::now() < deadline, "still held after a minute");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// DROP_REPLICATION_SLOT … WAIT waits for a slot another walsender has for as long as it
/// takes, as PostgreSQL's does (the test server gave up after 10 s): here a slot held for
/// 12 s after its client left.
#[test]
fn drop_replication_slot_wait_waits_for_as_long_as_the_slot_is_held() {
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t1()))
        .start()
        .unwrap();
    let target = Target::Ours(server.addr());
    let mut holder = Raw::login(&target, "postgres");
    holder.query("CREATE_REPLICATION_SLOT held LOGICAL pgoutput");
    holder.start("held", "0/0", "p");
    assert!(server.hold_slot("held", Duration::from_secs(12)));
    holder.send(&message(b'X', &[]));
    assert_eq!(holder.bytes_until_end(Duration::from_secs(60)).1, End::Eof);
    let mut dropper = Raw::login(&target, "postgres");
    // Past the 10 s the helper's query waits for: the answer comes when the hold ends.
    dropper.send(&query("DROP_REPLICATION_SLOT held WAIT"));
    let answer = Received::of_messages(dropper.until_ready(Duration::from_secs(60)));
    assert_eq!(answer.others(), ["C DROP_REPLICATION_SLOT", "Z"]);
    assert!(server.slots().iter().all(|s| s.name != "held"));
}

#[test]
fn postgresql_15_words_an_invalidated_slot_as_15_does() {
    let server = TestServer::builder()
        .server_version("15.15")
        .publication(Publication::new("p").table(t1()))
        .start()
        .unwrap();
    let target = Target::Ours(server.addr());
    let mut raw = Raw::login(&target, "postgres");
    raw.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput");
    assert!(server.invalidate_slot("s"));
    let answer = raw.start("s", "0/0", "p");
    let got = Received::of_messages(answer);
    assert_eq!(
        got.others(),
        ["E ERROR 55000 cannot read from logical replication slot \"s\" DETAIL: This slot has been invalidated because it exceeded the maximum reserved size.", "Z"]
    );
}

#[test]
fn connect_rules_and_scopes_pick_their_connection() {
    let rules = [
        Fault::new(Trigger::Connect { attempt: 2 }, Action::Reset),
        // Only the second START_REPLICATION of slot "s".
        Fault::new(Trigger::message(1), Action::Close)
            .slot("s")
            .connection(2),
        Fault::new(Trigger::message(1), Action::RequestReply)
            .application_name("nobody")
            .times(0),
    ];
    let server = server(&rules);
    let expected = expected(&server);
    let target = Target::Ours(server.addr());
    let mut first = streaming(&server, "s");
    assert_eq!(
        Received::until_payloads(&mut first, expected.len()).payloads(),
        expected
    );
    first.send(&message(b'X', &[]));
    // Its walsender has let the slot go once the server has closed it (a START_REPLICATION
    // before that meets the slot still active, as with PostgreSQL).
    assert_eq!(first.bytes_until_end(Duration::from_secs(60)).1, End::Eof);
    // The second connection is reset before it is read.
    let mut second = Raw::connect(&target);
    let (_, end) = second.bytes_until_end(Duration::from_secs(60));
    assert!(matches!(end, End::Reset | End::Eof), "{end:?}");
    // The third is the slot's second START_REPLICATION: closed after one message.
    let mut third = Raw::login(&target, "postgres");
    third.start("s", "0/0", "p");
    // Read until the server closes it (a minute bounds a hang; the end is what counts).
    let got = Received::read(&mut third, Duration::from_secs(60));
    assert_eq!(got.payloads().len(), 1);
    assert_eq!(got.end, End::Eof);
    assert_eq!(
        got.reply_requests(),
        0,
        "a rule for another application_name fired"
    );
}

#[test]
fn slow_and_reply_request_actions() {
    let rules = [
        Fault::new(
            Trigger::message(1),
            Action::Slow {
                delay_ms: Some(40),
                bytes_per_second: None,
            },
        ),
        Fault::new(Trigger::Commit { transaction: 2 }, Action::RequestReply),
    ];
    let server = server(&rules);
    let expected = expected(&server);
    let mut raw = streaming(&server, "s");
    let started = Instant::now();
    let (chunks, _) = raw.bytes_until_end(Duration::from_secs(3));
    let got = Received::of_chunks(&chunks, End::TimedOut);
    assert_eq!(got.payloads(), expected);
    assert_eq!(got.reply_requests(), 1);
    // Fourteen messages after the first, each 40 ms late.
    let last = chunks.last().unwrap().0;
    assert!(
        last - started >= Duration::from_millis(14 * 40),
        "{:?}",
        last - started
    );
}

#[test]
fn rules_that_cannot_work_are_refused() {
    let server = server(&[]);
    let err = server
        .add_fault(Fault::new(
            Trigger::Connect { attempt: 1 },
            Action::Shutdown,
        ))
        .unwrap_err();
    assert!(err.to_string().contains("on connect only"), "{err}");
    let err = TestServer::builder()
        .fault(Fault::new(
            Trigger::Commit { transaction: 1 },
            Action::error("22P02"),
        ))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("no default message"), "{err}");
}

/// The assertion helper's account, when it fails.
fn account(server: &TestServer) -> String {
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        server.assert_no_findings();
    }));
    match failed {
        Ok(()) => String::new(),
        Err(panic) => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
    }
}

#[test]
fn a_consumer_that_confirms_a_transaction_at_its_begin_is_caught() {
    // At full speed, with the probe: each transaction is held after its first change
    // until the client answers.
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t1()))
        .script(script())
        .probe(Probe::every(1).wait(Duration::from_secs(30)))
        .start()
        .unwrap();
    let expected = expected(&server);
    let mut raw = streaming(&server, "s");
    // The bug: one past the Begin's final LSN, confirmed as soon as the Begin arrives (a
    // restart there skips the transaction; the final LSN itself would not).
    let begin = loop {
        match raw.read(Duration::from_secs(5)) {
            Read1::Msg(b'd', body) if body[0] == b'w' && body[25] == b'B' => break body,
            Read1::Msg(..) => {}
            other => panic!("{other:?}"),
        }
    };
    let past = Lsn(u64::from_be_bytes(begin[26..34].try_into().unwrap()) + 1);
    raw.send(&status_update(past, 0));
    // The hold ends with its replies (the client answers each request with what it
    // confirmed): the Commit comes only after them, so they have been judged by then.
    loop {
        match raw.read(Duration::from_secs(5)) {
            Read1::Msg(b'd', body) if body[0] == b'w' && body[25] == b'C' => break,
            Read1::Msg(b'd', body) if body[0] == b'k' && body[17] == 1 => {
                raw.send(&status_update(past, 0));
            }
            Read1::Msg(..) => {}
            other => panic!("{other:?}"),
        }
    }
    let findings = server.findings();
    assert!(
        findings.iter().any(|(slot, f)| slot == "s"
            && matches!(f, Finding::ConfirmedUnsent { flush, sent, .. }
                if *flush == past && *sent < past)),
        "{findings:?}"
    );
    let account = account(&server);
    assert!(
        account.contains(&format!("confirmed a flush position of {past}"))
            && account.contains("a restart there skips that transaction"),
        "{account}"
    );
    assert_eq!(server.positions("s").unwrap().probes_answered, 1);
    assert!(expected.len() > 2);
}

#[test]
fn a_consumer_that_never_replies_is_caught() {
    let server = TestServer::builder()
        .publication(Publication::new("p").table(t1()))
        .script(script())
        .wal_sender_timeout(Duration::from_millis(600))
        .start()
        .unwrap();
    let mut raw = streaming(&server, "s");
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_eq!(got.end, End::Eof, "dropped after wal_sender_timeout");
    assert!(got.reply_requests() >= 1);
    // The record is written as the connection closes.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.findings().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let account = account(&server);
    assert!(
        account.contains("did not answer a keepalive's reply request within wal_sender_timeout"),
        "{account}"
    );
    assert!(account.contains("never confirmed any of them"), "{account}");
    let client = server
        .clients()
        .into_iter()
        .find(|c| !c.stream_options.is_empty())
        .unwrap();
    assert_eq!(
        client.ended.as_deref(),
        Some("closed: terminating walsender process due to replication timeout")
    );
}

#[test]
fn a_well_behaved_consumer_has_no_findings() {
    let server = server(&[]);
    let end = server.wal_end();
    let mut raw = streaming(&server, "s");
    Received::read(&mut raw, Duration::from_millis(300));
    raw.send(&status_update(end, 0));
    server
        .wait_for_confirmed_flush("s", end, Duration::from_secs(5))
        .unwrap();
    raw.send(&message(b'c', &[]));
    raw.until_ready(Duration::from_secs(5));
    assert_eq!(account(&server), "");
    server.assert_no_findings();
}

/// pg_recvlogical (of `major`) streaming slot `slot` into `file` until the server ends
/// the connection (`--no-loop`): its exit status and standard error.
fn pg_recvlogical(
    major: &str,
    server: &TestServer,
    slot: &str,
    file: &std::path::Path,
) -> Option<(bool, String)> {
    let binaries = super::binaries(major)?;
    let run = |args: &[&str]| {
        let mut child = std::process::Command::new(binaries.bin.join("pg_recvlogical"))
            .args(["-d", &server.connection_string(), "--slot", slot])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("pg_recvlogical {args:?} hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = child.wait_with_output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    if !server.slots().iter().any(|s| s.name == slot) {
        let (created, stderr) = run(&["--create-slot", "--plugin", "pgoutput"]);
        assert!(created, "{stderr}");
    }
    let file = file.to_str().unwrap();
    Some(run(&[
        "--start",
        "--no-loop",
        "-s",
        "1",
        "-F",
        "0",
        "-f",
        file,
        "-o",
        "proto_version=1",
        "-o",
        "publication_names=p",
    ]))
}

/// pg_recvlogical's file: each payload and a newline.
fn written(payloads: &[(Lsn, Vec<u8>)]) -> Vec<u8> {
    payloads
        .iter()
        .flat_map(|(_, p)| p.iter().copied().chain([b'\n']))
        .collect()
}

#[test]
fn pg_recvlogical_under_faults() {
    for major in ["15", "18"] {
        let dir =
            std::env::temp_dir().join(format!("pgoutput-rl-faults-{major}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // (The first transaction is six messages: Begin, Relation, three Inserts, Commit.)
        let cases: [(&str, Trigger, Action, usize, &str); 7] = [
            (
                "close inside transaction 2",
                Trigger::Change {
                    transaction: 2,
                    after: 1,
                },
                Action::Close,
                8,
                "server closed the connection unexpectedly",
            ),
            (
                "reset in the third frame",
                Trigger::mid_frame(3, 10),
                Action::Reset,
                2,
                // libpq words ECONNRESET so too.
                "server closed the connection unexpectedly",
            ),
            (
                "reset inside transaction 3",
                Trigger::Change {
                    transaction: 3,
                    after: 2,
                },
                Action::Reset,
                14,
                "server closed the connection unexpectedly",
            ),
            (
                "close in the eighth frame",
                Trigger::mid_frame(8, 20),
                Action::Close,
                7,
                "server closed the connection unexpectedly",
            ),
            (
                "57P01 after transaction 1",
                Trigger::Commit { transaction: 1 },
                Action::error("57P01"),
                6,
                "terminating connection due to administrator command",
            ),
            (
                "55000 inside transaction 2",
                Trigger::Change {
                    transaction: 2,
                    after: 1,
                },
                Action::error("55000"),
                8,
                "replication slot \"s\"",
            ),
            (
                "shutdown after transaction 1",
                Trigger::Commit { transaction: 1 },
                Action::Shutdown,
                16,
                "disconnected",
            ),
        ];
        for (name, when, then, messages, says) in cases {
            let server = TestServer::builder()
                .server_version(if major == "15" { "15.15" } else { "18.6" })
                .publication(Publication::new("p").table(t1()))
                .script(script())
                .fault(Fault::new(when, then))
                .start()
                .unwrap();
            let expected = expected(&server);
            let file = dir.join("out");
            let _ = std::fs::remove_file(&file);
            let Some((ok, stderr)) = pg_recvlogical(major, &server, "s", &file) else {
                return;
            };
            assert!(
                !ok,
                "{major} {name}: pg_recvlogical --no-loop exits 1 on the end: {stderr}"
            );
            assert!(stderr.contains(says), "{major} {name}: {stderr}");
            assert_eq!(
                std::fs::read(&file).unwrap(),
                written(&expected[..messages]),
                "{major} {name}: {stderr}"
            );
            if name.starts_with("shutdown") {
                // It confirmed everything before the server let it go.
                assert_eq!(server.confirmed_flush_lsn("s"), Some(server.wal_end()));
                assert!(!stderr.contains("unexpected termination"), "{stderr}");
            }
        }

        // A crash after it confirmed everything: the slot goes back to its last
        // checkpoint (its creation), and the next run appends every transaction again.
        let server = TestServer::builder()
            .server_version(if major == "15" { "15.15" } else { "18.6" })
            .publication(Publication::new("p").table(t1()))
            .script(script())
            .start()
            .unwrap();
        let expected = expected(&server);
        let end = server.wal_end();
        let file = dir.join("out");
        let _ = std::fs::remove_file(&file);
        let crasher = {
            std::thread::scope(|scope| {
                let waiter = scope.spawn(|| {
                    server
                        .wait_for_confirmed_flush("s", end, Duration::from_secs(20))
                        .map(|_| server.crash())
                });
                let run = pg_recvlogical(major, &server, "s", &file);
                (waiter.join().unwrap(), run)
            })
        };
        let (confirmed, run) = crasher;
        let Some((ok, stderr)) = run else { return };
        assert!(confirmed.is_ok() && !ok, "{major}: {stderr}");
        assert!(server.confirmed_flush_lsn("s") < Some(end));
        let (ok, stderr) = {
            let server = &server;
            std::thread::scope(|scope| {
                // Once it has everything again, the next status update ends its run.
                let stopper = scope.spawn(|| {
                    let _ = server.wait_for_confirmed_flush("s", end, Duration::from_secs(20));
                    server
                        .add_fault(Fault::new(Trigger::Flush { lsn: end }, Action::Close))
                        .unwrap();
                });
                let run = pg_recvlogical(major, server, "s", &file).unwrap();
                stopper.join().unwrap();
                run
            })
        };
        assert!(!ok, "{stderr}");
        let mut twice = written(&expected);
        twice.extend(written(&expected));
        assert_eq!(
            std::fs::read(&file).unwrap(),
            twice,
            "{major}: every transaction again"
        );
        assert!(
            server
                .facts()
                .iter()
                .any(|(_, f)| matches!(f, Fact::Resent(r) if r.count == 3)),
            "{:?}",
            server.facts()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_crates_client_tells_each_fault_apart() {
    use pgoutput_client::{ClientError, ConnInfo, Connection, CopyEvent};
    let cases: [(Trigger, Action, &str); 5] = [
        (
            Trigger::Change {
                transaction: 2,
                after: 1,
            },
            Action::Close,
            "closed",
        ),
        (Trigger::mid_frame(3, 10), Action::Reset, "reset"),
        (
            Trigger::Commit { transaction: 1 },
            Action::error("57P01"),
            "57P01",
        ),
        (
            Trigger::Commit { transaction: 1 },
            Action::error("55000"),
            "55000",
        ),
        (Trigger::Commit { transaction: 1 }, Action::Shutdown, "end"),
    ];
    for (when, then, want) in cases {
        let server = server(&[Fault::new(when, then)]);
        let end = server.wal_end();
        let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
        let mut conn = Connection::connect(&info).unwrap();
        conn.simple_query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
            .unwrap();
        conn.start_replication(
            "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')",
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut confirmed = false;
        let got = loop {
            assert!(Instant::now() < deadline, "{want}: no end");
            match conn.recv_copy_data(Duration::from_millis(100)) {
                Ok(CopyEvent::Data(frame)) => {
                    // Confirm everything once a keepalive says where the WAL ends.
                    if frame[0] == b'k' && !confirmed && want == "end" {
                        let wal_end = Lsn(u64::from_be_bytes(frame[1..9].try_into().unwrap()));
                        if wal_end >= end {
                            conn.send_copy_data(&status_update(wal_end, 0)[5..])
                                .unwrap();
                            confirmed = true;
                        }
                    }
                }
                Ok(CopyEvent::Idle) => {}
                Ok(CopyEvent::End) => break "end".to_owned(),
                Err(ClientError::Closed) => break "closed".to_owned(),
                Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    break "reset".to_owned()
                }
                Err(err) => match err.server_error() {
                    Some(server_error) => break server_error.code.clone(),
                    None => break format!("{err:?}"),
                },
            }
        };
        assert_eq!(got, want);
    }
}

#[test]
fn a_reset_inside_a_stream_block() {
    // The streamed transaction of the shared script, to a client that streams.
    let server = TestServer::builder()
        .publication(super::publication())
        .script(super::script())
        .fault(Fault::new(
            Trigger::StreamBlock {
                transaction: 3,
                block: 1,
            },
            Action::Reset,
        ))
        .start()
        .unwrap();
    let options =
        StreamOptions::new(ProtocolVersion::V2, &["p"]).streaming(pgoutput_codec::Streaming::On);
    let expected: Vec<Vec<u8>> = server
        .render(&options)
        .unwrap()
        .into_iter()
        .map(|f| f.payload)
        .collect();
    let target = Target::Ours(server.addr());
    let mut raw = Raw::login(&target, "postgres");
    raw.query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput");
    raw.send(&query(
        "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '2', publication_names 'p', streaming 'on')",
    ));
    let got = Received::read(&mut raw, Duration::from_secs(5));
    assert_eq!(got.end, End::Reset);
    let payloads: Vec<Vec<u8>> = got.payloads().into_iter().map(|(_, p)| p).collect();
    // Everything up to and including the third transaction's first Stream Start.
    let first_block = expected.iter().position(|p| p[0] == b'S').unwrap();
    assert_eq!(payloads, expected[..=first_block]);
}

#[test]
fn a_byte_rate_and_the_other_error_wordings() {
    let rate = Fault::new(
        Trigger::before_message(1),
        Action::Slow {
            delay_ms: None,
            bytes_per_second: Some(2_000),
        },
    )
    .slot("slow");
    // An ErrorResponse after the first transaction, on slot `slot`.
    let error_on = |slot: &str, code: &str, message: Option<&str>| {
        Fault::new(
            Trigger::Commit { transaction: 1 },
            Action::Error {
                code: code.into(),
                message: message.map(str::to_owned),
            },
        )
        .slot(slot)
    };
    let busy = error_on("busy", "55006", None);
    let internal = error_on("internal", "XX000", None);
    let own = error_on("own", "57P03", Some("the database system is starting up"));
    let server = server(&[rate, busy, internal, own]);
    let expected = expected(&server);
    // 15 messages in about 800 bytes of frames: at 2,000 bytes a second, 0.4 s or more.
    let mut raw = streaming(&server, "slow");
    let started = Instant::now();
    let (chunks, _) = raw.bytes_until_end(Duration::from_secs(3));
    let got = Received::of_chunks(&chunks, End::TimedOut);
    assert_eq!(got.payloads(), expected);
    let sent: usize = got.messages.iter().map(|(_, b)| b.len() + 5).sum();
    let took = chunks.last().unwrap().0 - started;
    assert!(
        took >= Duration::from_secs_f64(sent as f64 / 2_000.0 * 0.8),
        "{sent} bytes in {took:?}"
    );
    let others = |slot: &str| {
        let mut raw = streaming(&server, slot);
        Received::read(&mut raw, Duration::from_millis(500)).others()
    };
    let busy = others("busy");
    assert!(
        busy[0].starts_with("E ERROR 55006 replication slot \"busy\" is active for PID "),
        "{busy:?}"
    );
    assert_eq!(
        others("internal"),
        [
            "E ERROR XX000 could not find record while sending logically-decoded data: missing contrecord",
            "Z"
        ]
    );
    assert_eq!(
        others("own"),
        ["E FATAL 57P03 the database system is starting up"]
    );
}

/// A slot PostgreSQL 15 and 18 really invalidated (`max_slot_wal_keep_size` exceeded) and
/// one the test server was told to invalidate answer START_REPLICATION alike: SQLSTATE,
/// message and detail.
#[test]
fn invalidated_slots_answer_as_postgresql_15_and_18_do() {
    for (pg, version) in real_15_and_18(&["max_slot_wal_keep_size = 1MB", "wal_keep_size = 0"]) {
        pg.psql(
            "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t;
             SELECT count(*) FROM pg_create_logical_replication_slot('gone', 'pgoutput');",
        )
        .unwrap();
        // Three WAL segments past the slot, then a checkpoint removes them.
        let deadline = Instant::now() + Duration::from_secs(60);
        while pg
            .query_one("SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'gone';")
            .unwrap()
            != "lost"
        {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL {version} kept the slot"
            );
            pg.psql(
                "INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g
                   ON CONFLICT (id) DO UPDATE SET v = excluded.v;
                 SELECT pg_switch_wal(); CHECKPOINT;",
            )
            .unwrap();
        }
        let answer = |target: &Target| -> Vec<String> {
            let mut raw = Raw::login(target, "postgres");
            raw.start("gone", "0/0", "p")
                .iter()
                .map(|m| format!("{} DETAIL: {}", m.summary(), m.field(b'D')))
                .collect()
        };
        let theirs = answer(&Target::of(&pg));
        let ours = TestServer::builder()
            .server_version(version)
            .publication(Publication::new("p").table(t1()))
            .start()
            .unwrap();
        let target = Target::Ours(ours.addr());
        let mut raw = Raw::login(&target, "postgres");
        raw.query("CREATE_REPLICATION_SLOT gone LOGICAL pgoutput");
        assert!(ours.invalidate_slot("gone"));
        assert_eq!(answer(&target), theirs, "PostgreSQL {version}");
        assert!(theirs[0].contains("55000"), "{theirs:?}");
    }
}

#[test]
fn the_crates_client_after_a_crash_gets_what_it_confirmed_again() {
    use pgoutput_client::{ConnInfo, Connection, CopyEvent};
    let server = server(&[]);
    let expected = expected(&server);
    let end = server.wal_end();
    let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    let start = "START_REPLICATION SLOT s LOGICAL 0/0 (proto_version '1', publication_names 'p')";
    let stream = |conn: &mut Connection, confirm: bool| {
        let mut payloads = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(
                Instant::now() < deadline,
                "stuck after {} messages",
                payloads.len()
            );
            match conn.recv_copy_data(Duration::from_millis(100)) {
                Ok(CopyEvent::Data(frame)) if frame[0] == b'w' => {
                    payloads.push(frame[25..].to_vec())
                }
                Ok(CopyEvent::Data(frame)) => {
                    let wal_end = Lsn(u64::from_be_bytes(frame[1..9].try_into().unwrap()));
                    if confirm && wal_end >= end {
                        conn.send_copy_data(&status_update(end, 0)[5..]).unwrap();
                        return (payloads, None);
                    }
                    if !confirm && payloads.len() == expected.len() {
                        return (payloads, None);
                    }
                }
                Ok(_) => {}
                Err(err) => return (payloads, Some(err)),
            }
        }
    };
    let mut conn = Connection::connect(&info).unwrap();
    conn.simple_query("CREATE_REPLICATION_SLOT s LOGICAL pgoutput")
        .unwrap();
    conn.start_replication(start).unwrap();
    let (first, _) = stream(&mut conn, true);
    assert_eq!(first.len(), expected.len());
    server
        .wait_for_confirmed_flush("s", end, Duration::from_secs(5))
        .unwrap();
    server.crash();
    let (_, lost) = stream(&mut conn, false);
    assert!(lost.is_some(), "the crash did not end the connection");
    let mut again = Connection::connect(&info).unwrap();
    again.start_replication(start).unwrap();
    let (second, _) = stream(&mut again, false);
    let payloads: Vec<Vec<u8>> = expected.into_iter().map(|(_, p)| p).collect();
    assert_eq!((first, second), (payloads.clone(), payloads));
}

/// A status update's record says when the server read it, not only the client's
/// `send_time` (here 0, as a client with a broken clock or one that never fills it in
/// sends).
#[test]
fn status_updates_record_when_they_arrived() {
    let server = server(&[]);
    let expected = expected(&server);
    let mut raw = streaming(&server, "s");
    Received::until_payloads(&mut raw, expected.len());
    let end = server.wal_end();
    let before = pgoutput_codec::PgTimestamp::now();
    raw.send(&status_update(end, 0));
    assert_eq!(
        server.wait_for_confirmed_flush("s", end, Duration::from_secs(60)),
        Ok(end)
    );
    let after = pgoutput_codec::PgTimestamp::now();
    let client = &server.clients()[0];
    let update = client.status_updates.last().unwrap();
    assert_eq!(update.update.flush_lsn, end);
    assert_eq!(update.update.send_time, pgoutput_codec::PgTimestamp(0));
    assert!(
        before <= update.received_at && update.received_at <= after,
        "{before:?} <= {:?} <= {after:?}",
        update.received_at
    );
}

/// The limits' errors carry the words, HINT included, of the version the server
/// announces: PostgreSQL 17 put GUC names in quotes.
#[test]
fn limits_are_worded_as_postgresql_15_and_18_word_them() {
    use super::raw::startup_packet;
    for (pg, version) in real_15_and_18(&["max_replication_slots = 1", "max_wal_senders = 1"]) {
        let answer = |target: &Target| -> Vec<String> {
            let mut raw = Raw::login(target, "postgres");
            let mut out = Vec::new();
            for slot in ["one", "two"] {
                let made = raw.query(&format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"));
                out.extend(made.iter().map(super::raw::Msg::summary));
            }
            raw.query("DROP_REPLICATION_SLOT one");
            // A second walsender while the first is connected.
            let mut extra = Raw::connect(target);
            extra.send(&startup_packet("postgres"));
            out.extend(
                extra
                    .until_ready(Duration::from_secs(60))
                    .iter()
                    .map(super::raw::Msg::summary),
            );
            out
        };
        let theirs = answer(&Target::of(&pg));
        let ours = TestServer::builder()
            .server_version(version)
            .max_replication_slots(1)
            .max_wal_senders(1)
            .start()
            .unwrap();
        assert_eq!(
            answer(&Target::Ours(ours.addr())),
            theirs,
            "PostgreSQL {version}"
        );
        assert!(
            theirs
                .iter()
                .any(|l| l.contains("53400") && l.contains("HINT")),
            "{theirs:?}"
        );
        assert!(theirs.iter().any(|l| l.contains("53300")), "{theirs:?}");
    }
}

/// START_REPLICATION again in a session whose stream ended with CopyDone: PostgreSQL
/// answers CopyBothResponse and ends the copy at once, sending nothing (the walsender's
/// CopyDone flags, `streamingDoneSending` and `streamingDoneReceiving`, stay set for the
/// session), on the same slot or another; the session goes on.
#[test]
fn a_second_start_after_copy_done_as_postgresql_15_and_18_answer_it() {
    for (pg, version) in real_15_and_18(&[]) {
        pg.psql("CREATE TABLE t1 (id int PRIMARY KEY, v text); CREATE PUBLICATION p FOR TABLE t1;")
            .unwrap();
        let answer = |target: &Target, write: &dyn Fn()| -> Vec<String> {
            let mut raw = Raw::login(target, "postgres");
            let mut out = Vec::new();
            for slot in ["again", "again_other"] {
                let made = raw.query(&format!("CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput"));
                out.extend(made.iter().map(Msg::summary));
            }
            write();
            out.extend(raw.start("again", "0/0", "p").iter().map(Msg::summary));
            raw.send(&message(b'c', &[]));
            // Whatever data came before the CopyDone, then how the copy ended.
            let ended = raw.until_ready(Duration::from_secs(60));
            out.extend(ended.iter().filter(|m| m.tag != b'd').map(Msg::summary));
            for slot in ["again", "again_other"] {
                out.extend(raw.start(slot, "0/0", "p").iter().map(Msg::summary));
                let rest = raw.until_ready(Duration::from_secs(60));
                out.extend(rest.iter().map(Msg::summary));
            }
            out.extend(raw.query("IDENTIFY_SYSTEM").iter().map(Msg::summary));
            out
        };
        let theirs = answer(&Target::of(&pg), &|| {
            pg.psql("INSERT INTO t1 VALUES (1, 'v');").unwrap();
        });
        let ours = TestServer::builder()
            .server_version(version)
            .publication(Publication::new("p").table(t1()))
            .start()
            .unwrap();
        let mine = answer(&Target::Ours(ours.addr()), &|| {
            ours.append(pgoutput_harness::server::Event::Transaction(
                Transaction::new().insert(&t1(), ["1", "v"]),
            ))
            .unwrap();
        });
        assert_eq!(mine, theirs, "PostgreSQL {version}");
    }
}
