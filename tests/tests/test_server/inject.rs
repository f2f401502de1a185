//! The `inject` action on the test server: a message of the rule's own arrives where the
//! rule put it, in an XLogData at that point's position, for the crate's `Consumer` and
//! for psycopg2, and the slot and the judge go on as if it had not been sent.

use std::process::Command;
use std::time::{Duration, Instant};

use pgoutput_client::{ConnInfo, Connection, Consumer, ConsumerConfig, StreamOptions};
use pgoutput_codec::{encode, Ctx, IntoOwned, Lsn, ProtocolVersion};
use pgoutput_harness::faults::{Action, Fault, Trigger};
use pgoutput_harness::server::TestServer;
use pgoutput_tests::poison;

/// The two rules: the logical message after the first transaction's Commit, the Type
/// before the second transaction's first change (its 8th message, after its Begin).
fn rules() -> [Fault; 2] {
    [
        Fault::new(
            Trigger::Commit { transaction: 1 },
            Action::inject(poison::message()),
        ),
        Fault::new(
            Trigger::before_message(8),
            Action::inject(poison::enum_type()),
        ),
    ]
}

/// What a protocol 1 client of `sent` receives once the rules have fired: the logical
/// message after the 6th message at its position, the Type before the 8th at that one's.
fn with_injected(sent: &[(Lsn, Vec<u8>)]) -> Vec<(Lsn, Vec<u8>)> {
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let mut expected = sent.to_vec();
    expected.insert(7, (sent[7].0, encode(&poison::enum_type(), v1).unwrap()));
    expected.insert(6, (sent[5].0, encode(&poison::message(), v1).unwrap()));
    expected
}

/// faults.rs's server (three transactions of three inserts) with the two rules.
fn server() -> TestServer {
    super::faults::server(&rules())
}

#[test]
fn the_crates_consumer_receives_an_injected_message_where_the_rule_put_it() {
    let server = server();
    let expected = with_injected(&super::faults::expected(&server));
    let info = ConnInfo::parse(Some(&server.connection_string()), |_| None).unwrap();
    let mut conn = Connection::connect(&info).unwrap();
    conn.simple_query("CREATE_REPLICATION_SLOT c LOGICAL pgoutput (SNAPSHOT 'nothing')")
        .unwrap();
    let options = StreamOptions::new(ProtocolVersion::V1, &["p"]);
    let config = ConsumerConfig::new("c", options)
        .auto_confirm(true)
        .status_interval(Duration::from_millis(100));
    let mut consumer = Consumer::start(conn, Some(info), config).unwrap();
    let v1 = Ctx::plain(ProtocolVersion::V1);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < expected.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {}",
            got.len(),
            expected.len()
        );
        if let Some(event) = consumer.next_within(Duration::from_millis(200)).unwrap() {
            let message = event.message.into_owned();
            got.push((event.wal_start, encode(&message, v1).unwrap()));
        }
    }
    assert_eq!(got, expected);
    // auto_confirm: the slot reaches the end once the consumer has moved past it.
    assert!(consumer
        .next_within(Duration::from_millis(50))
        .unwrap()
        .is_none());
    let end = server.wal_end();
    assert_eq!(
        server.wait_for_confirmed_flush("c", end, Duration::from_secs(10)),
        Ok(end)
    );
    assert_eq!(server.findings(), []);
    consumer.close();
}

#[test]
fn psycopg2_receives_an_injected_message_where_the_rule_put_it() {
    if !pgoutput_tests::pg::psycopg2_found() {
        return;
    }
    let server = server();
    let sent = super::faults::expected(&server);
    let output = Command::new("python3")
        .args([
            "-c",
            super::psycopg::CLIENT,
            &server.connection_string(),
            &server.wal_end().0.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected: Vec<String> = with_injected(&sent)
        .iter()
        .map(|(lsn, payload)| format!("{} {}", lsn.0, pgoutput_tests::hex(payload)))
        .collect();
    let printed: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(printed, expected);
    assert_eq!(server.findings(), []);
}

#[test]
fn an_injection_at_a_byte_of_a_frame_is_refused() {
    let err = TestServer::builder()
        .fault(Fault::new(
            Trigger::mid_frame(2, 5),
            Action::inject(poison::enum_type()),
        ))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("not at a byte"), "{err}");
    // The JSON form, as the CLI and the control API take it.
    let rule: Fault = serde_json::from_str(
        r#"{"when": {"on": "commit", "transaction": 1},
            "then": {"do": "inject", "message": {"type": "type", "xid": null,
                     "type_oid": 16400, "namespace": "public", "name": "mood"}}}"#,
    )
    .unwrap();
    assert_eq!(rule.then, Action::inject(poison::enum_type()));
}
