//! psycopg2's LogicalReplicationConnection: create and drop a slot, stream, send_feedback.

use std::process::Command;

use pgoutput_client::StreamOptions;
use pgoutput_codec::ProtocolVersion;
use pgoutput_harness::server::{Auth, TestServer};

use super::{publication, script};

/// Creates slot "psy", streams it to the position given, confirms it, drops the slot from a
/// new connection (waiting for the first one's walsender to let it go) and prints each
/// message's `data_start` and payload.
pub(super) const CLIENT: &str = r#"
import sys, psycopg2, psycopg2.extras
dsn, end = sys.argv[1], int(sys.argv[2])
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.create_replication_slot("psy", output_plugin="pgoutput")
cur.start_replication(slot_name="psy", decode=False, options={"proto_version": "1", "publication_names": "p"})
out = []
def consume(msg):
    out.append("%d %s" % (msg.data_start, msg.payload.hex()))
    if msg.data_start == end:
        msg.cursor.send_feedback(flush_lsn=end, write_lsn=end, force=True)
        raise psycopg2.extras.StopReplication()
try:
    cur.consume_stream(consume)
except psycopg2.extras.StopReplication:
    pass
conn.close()
conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
# WAIT: the walsender of the connection just closed releases the slot once it has seen the
# close, which may be after this connection asks (PostgreSQL's as ours).
conn.cursor().execute('DROP_REPLICATION_SLOT "psy" WAIT')
print("\n".join(out))
"#;

#[test]
fn psycopg2_streams_and_confirms() {
    if !super::psycopg2_found() {
        return;
    }
    let server = TestServer::builder()
        .auth(Auth::scram("rep", "pw"))
        .publication(publication())
        .script(script())
        .start()
        .unwrap();
    let end = server.wal_end();
    let output = Command::new("python3")
        .args([
            "-c",
            CLIENT,
            &format!("{} password=pw", server.connection_string()),
            &end.0.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = server
        .render(&StreamOptions::new(ProtocolVersion::V1, &["p"]))
        .unwrap()
        .iter()
        .map(|message| {
            format!(
                "{} {}",
                message.lsn.0,
                pgoutput_tests::hex(&message.payload)
            )
        })
        .collect();
    assert_eq!(printed, expected);
    // send_feedback's flush position reached the server before the slot was dropped.
    let client = server
        .clients()
        .into_iter()
        .find(|c| !c.stream_options.is_empty())
        .unwrap();
    assert!(client
        .status_updates
        .iter()
        .any(|u| u.update.flush_lsn == end));
    assert!(server.slots().is_empty());
    assert!(server
        .commands()
        .contains(&"DROP_REPLICATION_SLOT \"psy\" WAIT".to_owned()));
}

/// Streams slot "psy" until the server ends the connection; prints how many messages
/// came, then what psycopg2 said.
const UNTIL_THE_END: &str = r#"
import select, sys, psycopg2, psycopg2.extras
conn = psycopg2.connect(sys.argv[1], connection_factory=psycopg2.extras.LogicalReplicationConnection)
cur = conn.cursor()
cur.create_replication_slot("psy", output_plugin="pgoutput")
cur.start_replication(slot_name="psy", decode=False, options={"proto_version": "1", "publication_names": "p"})
count = 0
try:
    while True:
        msg = cur.read_message()
        if msg is None:
            select.select([cur], [], [], 0.05)
        else:
            count += 1
except psycopg2.Error as e:
    print(count)
    print(type(e).__name__, str(e).strip().replace("\n", " "))
"#;

#[test]
fn psycopg2_under_faults() {
    use pgoutput_harness::faults::{Action, Fault, Trigger};
    if !super::psycopg2_found() {
        return;
    }
    let cases = [
        // psycopg2's words for a connection lost during the copy.
        (
            Trigger::message(4),
            Action::Close,
            4,
            "DatabaseError error with status PGRES_COPY_BOTH",
        ),
        (
            Trigger::mid_frame(3, 10),
            Action::Reset,
            2,
            "DatabaseError error with status PGRES_COPY_BOTH",
        ),
        (
            Trigger::message(4),
            Action::error("57P01"),
            4,
            "AdminShutdown terminating connection due to administrator command",
        ),
        (
            Trigger::message(4),
            Action::error("55000"),
            4,
            "ObjectNotInPrerequisiteState can no longer access replication slot \"psy\"",
        ),
    ];
    for (when, then, count, says) in cases {
        let server = TestServer::builder()
            .publication(publication())
            .script(script())
            .fault(Fault::new(when, then.clone()))
            .start()
            .unwrap();
        let output = Command::new("python3")
            .args(["-c", UNTIL_THE_END, &server.connection_string()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{then:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut lines = stdout.lines();
        assert_eq!(
            lines.next(),
            Some(count.to_string().as_str()),
            "{then:?}: {stdout}"
        );
        let error = lines.next().unwrap_or_default();
        assert!(error.contains(says), "{then:?}: {error}");
    }
}
