//! Streams captured from real PostgreSQL 15 and 18 (the CLI tests' data), turned into JSON
//! lines as `pgoutput decode` prints them, replay through the test server to the same
//! bytes for the options they were captured with.

use pgoutput_client::StreamOptions;
use pgoutput_codec::{Decoder, Encoder, IntoOwned, PgOutputMessage, ProtocolVersion, Streaming};
use pgoutput_harness::server::{Publication, RenderedMessage, Script, TestServer};
use pgoutput_tests::unhex;

#[test]
fn captured_streams_replay_byte_for_byte() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/cli/tests/data");
    let mut replayed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let command = text
            .lines()
            .find_map(|l| l.strip_prefix("# pgoutput decode "))
            .expect("the capture says how it was decoded");
        let words: Vec<&str> = command.split_whitespace().collect();
        let arg = |name: &str| words.iter().position(|w| *w == name).map(|i| words[i + 1]);
        let version =
            ProtocolVersion::from_number(arg("--proto-version").unwrap().parse().unwrap()).unwrap();
        let streaming = match arg("--streaming") {
            Some("on") => Streaming::On,
            Some("parallel") => Streaming::Parallel,
            _ => Streaming::Off,
        };
        let header = text.lines().next().unwrap();
        let binary = header.contains("binary true");
        let two_phase = header.contains("two-phase: true");
        let payloads: Vec<Vec<u8>> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(unhex)
            .collect();
        let mut decoder = Decoder::new(version, streaming).unwrap();
        let json: Vec<String> = payloads
            .iter()
            .map(|p| serde_json::to_string(&decoder.decode(p).unwrap()).unwrap())
            .collect();
        let script = Script::from_json_lines(&json.join("\n")).unwrap();
        let server = TestServer::builder()
            .publication(Publication::all_tables("pub"))
            .script(script)
            .start()
            .unwrap();
        let options = StreamOptions::new(version, &["pub"])
            .streaming(streaming)
            .binary(binary)
            .two_phase(two_phase)
            .messages(true);
        let rendered: Vec<Vec<u8>> = server
            .render(&options)
            .unwrap()
            .into_iter()
            .map(|f| f.payload)
            .collect();
        for (i, (got, want)) in rendered.iter().zip(&payloads).enumerate() {
            assert_eq!(
                pgoutput_tests::hex(got),
                pgoutput_tests::hex(want),
                "{}: message {i} differs",
                path.display()
            );
        }
        assert_eq!(rendered.len(), payloads.len(), "{}", path.display());
        replayed += 1;
    }
    assert_eq!(replayed, 7);
}

/// A recording as `pgoutput tail --wal-positions` writes it (protocol 2, streaming on):
/// a streamed transaction with an empty block, a subtransaction's Stream Abort and the
/// Relation pgoutput sends again after it; a TRUNCATE, then the Relation its
/// invalidation makes PostgreSQL send before the next change; an ALTER TABLE's new
/// definition in the middle of a transaction.
const RECORDING: &str = r#"
{"wal_start":"0/2001000","wal_end":"0/2001000","type":"stream_start","xid":700,"first_segment":true}
{"wal_start":"0/0","wal_end":"0/0","type":"relation","xid":700,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}
{"wal_start":"0/2001000","wal_end":"0/2001000","type":"insert","xid":700,"relation_oid":16400,"new_tuple":[{"text":"1"}]}
{"wal_start":"0/2001000","wal_end":"0/2001000","type":"stream_stop"}
{"wal_start":"0/2001080","wal_end":"0/2001080","type":"stream_start","xid":700,"first_segment":false}
{"wal_start":"0/20010A0","wal_end":"0/20010A0","type":"stream_stop"}
{"wal_start":"0/2001100","wal_end":"0/2001100","type":"stream_start","xid":700,"first_segment":false}
{"wal_start":"0/2001100","wal_end":"0/2001100","type":"insert","xid":701,"relation_oid":16400,"new_tuple":[{"text":"2"}]}
{"wal_start":"0/2001100","wal_end":"0/2001100","type":"stream_stop"}
{"wal_start":"0/2001160","wal_end":"0/2001160","type":"stream_abort","xid":700,"subtransaction_xid":701}
{"wal_start":"0/2001180","wal_end":"0/2001180","type":"stream_start","xid":700,"first_segment":false}
{"wal_start":"0/0","wal_end":"0/0","type":"relation","xid":700,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}
{"wal_start":"0/2001180","wal_end":"0/2001180","type":"insert","xid":700,"relation_oid":16400,"new_tuple":[{"text":"3"}]}
{"wal_start":"0/2001180","wal_end":"0/2001180","type":"stream_stop"}
{"wal_start":"0/2001220","wal_end":"0/2001220","type":"stream_commit","xid":700,"flags":0,"commit_lsn":"0/2001200","end_lsn":"0/2001220","commit_timestamp":"2026-12-01 20:00:00+00"}
{"wal_start":"0/2001300","wal_end":"0/2001300","type":"begin","final_lsn":"0/2001350","commit_timestamp":"2026-12-01 20:00:01+00","xid":710}
{"wal_start":"0/2001300","wal_end":"0/2001300","type":"truncate","xid":null,"options":0,"relation_oids":[16400]}
{"wal_start":"0/2001370","wal_end":"0/2001370","type":"commit","flags":0,"commit_lsn":"0/2001350","end_lsn":"0/2001370","commit_timestamp":"2026-12-01 20:00:01+00"}
{"wal_start":"0/2001400","wal_end":"0/2001400","type":"begin","final_lsn":"0/2001450","commit_timestamp":"2026-12-01 20:00:02+00","xid":720}
{"wal_start":"0/0","wal_end":"0/0","type":"relation","xid":null,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1}]}
{"wal_start":"0/2001400","wal_end":"0/2001400","type":"insert","xid":null,"relation_oid":16400,"new_tuple":[{"text":"4"}]}
{"wal_start":"0/0","wal_end":"0/0","type":"relation","xid":null,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1},{"flags":0,"name":"extra","type_oid":23,"type_modifier":-1}]}
{"wal_start":"0/2001420","wal_end":"0/2001420","type":"insert","xid":null,"relation_oid":16400,"new_tuple":[{"text":"5"},{"text":"6"}]}
{"wal_start":"0/2001470","wal_end":"0/2001470","type":"commit","flags":0,"commit_lsn":"0/2001450","end_lsn":"0/2001470","commit_timestamp":"2026-12-01 20:00:02+00"}
"#;

/// Each message of `rendered` as its type and the `dataStart` of its frame.
fn shape(
    version: ProtocolVersion,
    streaming: Streaming,
    rendered: &[RenderedMessage],
) -> Vec<(String, String)> {
    let mut decoder = Decoder::new(version, streaming).unwrap();
    rendered
        .iter()
        .map(|m| {
            let message = decoder.decode(&m.payload).unwrap();
            (pgoutput_tests::type_name(&message), m.lsn.to_string())
        })
        .collect()
}

fn serve(text: &str) -> TestServer {
    TestServer::builder()
        .publication(Publication::all_tables("pub"))
        .script(Script::from_json_lines(text).unwrap())
        .start()
        .unwrap()
}

#[test]
fn a_recording_replays_with_its_positions_and_blocks() {
    let server = serve(RECORDING);
    let options = StreamOptions::new(ProtocolVersion::V2, &["pub"]).streaming(Streaming::On);
    let rendered = server.render(&options).unwrap();
    let mut encoder = Encoder::new(ProtocolVersion::V2, Streaming::On).unwrap();
    let recorded: Vec<(String, Vec<u8>)> = RECORDING
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            let object = value.as_object_mut().unwrap();
            let lsn = object.remove("wal_start").unwrap();
            object.remove("wal_end");
            let message: PgOutputMessage<'_> = serde_json::from_value(value).unwrap();
            (
                lsn.as_str().unwrap().to_owned(),
                encoder.encode(&message).unwrap(),
            )
        })
        .collect();
    let got: Vec<(String, Vec<u8>)> = rendered
        .iter()
        .map(|m| (m.lsn.to_string(), m.payload.clone()))
        .collect();
    assert_eq!(got, recorded);
}

#[test]
fn a_recording_renders_for_a_client_that_does_not_stream_by_pgoutputs_rules() {
    let server = serve(RECORDING);
    let rendered = server
        .render(&StreamOptions::new(ProtocolVersion::V1, &["pub"]))
        .unwrap();
    let expected = [
        // The streamed transaction whole: its aborted subtransaction is gone, and so is
        // the Relation sent again after the abort (the session has it); its empty block
        // is nothing here.
        ("begin", "0/2001000"),
        ("relation", "0/0"),
        ("insert", "0/2001000"),
        ("insert", "0/2001180"),
        ("commit", "0/2001220"),
        ("begin", "0/2001300"),
        ("truncate", "0/2001300"),
        ("commit", "0/2001370"),
        // After the TRUNCATE's invalidation, and with ALTER TABLE's new definition.
        ("begin", "0/2001400"),
        ("relation", "0/0"),
        ("insert", "0/2001400"),
        ("relation", "0/0"),
        ("insert", "0/2001420"),
        ("commit", "0/2001470"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(t, l)| ((*t).to_owned(), (*l).to_owned()))
        .collect();
    assert_eq!(
        shape(ProtocolVersion::V1, Streaming::Off, &rendered),
        expected
    );
}

/// A streamed transaction that is prepared reaches a streaming client without
/// `two_phase` as its blocks, then a Stream Commit at `COMMIT PREPARED` (PostgreSQL
/// skips the PREPARE and commits it as an ordinary streamed transaction).
#[test]
fn a_streamed_prepared_transaction_commits_as_a_stream_without_two_phase() {
    let table = pgoutput_harness::server::Table::new(16400, "public", "t").key_column("id", 23);
    let script = Script::new()
        .transaction(
            pgoutput_harness::server::Transaction::new()
                .streamed()
                .insert(&table, ["1"])
                .prepare("g"),
        )
        .commit_prepared("g");
    let server = TestServer::builder()
        .publication(Publication::new("pub").table(table))
        .script(script)
        .start()
        .unwrap();
    let options = StreamOptions::new(ProtocolVersion::V2, &["pub"]).streaming(Streaming::On);
    let kinds: Vec<String> = shape(
        ProtocolVersion::V2,
        Streaming::On,
        &server.render(&options).unwrap(),
    )
    .into_iter()
    .map(|(kind, _)| kind)
    .collect();
    assert_eq!(
        kinds,
        [
            "stream_start",
            "relation",
            "insert",
            "stream_stop",
            "stream_commit"
        ]
    );
}

/// A value of a type the server cannot convert (a composite, an unknown user type) is an
/// error naming the column for a client that wants the other form; an enum (marked as
/// tail marks it) and a domain over a built-in type convert.
#[test]
fn values_convert_by_their_types_or_fail_naming_the_column() {
    let text = r#"
{"type":"begin"}
{"type":"type","xid":null,"type_oid":16500,"namespace":"public","name":"mood","enum":true}
{"type":"type","xid":null,"type_oid":16501,"namespace":"","name":"numeric"}
{"type":"relation","xid":null,"relation_oid":16400,"namespace":"public","relation_name":"t","replica_identity":"default","columns":[{"flags":1,"name":"id","type_oid":23,"type_modifier":-1},{"flags":0,"name":"feeling","type_oid":16500,"type_modifier":-1},{"flags":0,"name":"price","type_oid":16501,"type_modifier":-1}]}
{"type":"insert","relation_oid":16400,"new_tuple":[{"text":"1"},{"text":"ok"},{"text":"10.50"}]}
{"type":"commit"}
"#;
    let binary = StreamOptions::new(ProtocolVersion::V1, &["pub"]).binary(true);
    let rendered = serve(text).render(&binary).unwrap();
    let mut decoder = Decoder::new(ProtocolVersion::V1, Streaming::Off).unwrap();
    let insert = rendered
        .iter()
        .map(|m| decoder.decode(&m.payload).unwrap().into_owned())
        .find_map(|m| match m {
            PgOutputMessage::Insert(insert) => Some(insert),
            _ => None,
        })
        .unwrap();
    let values: Vec<Vec<u8>> = insert
        .new_tuple
        .columns
        .iter()
        .map(|v| match v {
            pgoutput_codec::ColumnValue::Binary(b) => b.as_bytes().to_vec(),
            other => panic!("{other:?} is not binary"),
        })
        .collect();
    // int4 1; the label; numeric_send('10.50'): 2 digits, weight 0, positive, scale 2.
    assert_eq!(
        values,
        [
            vec![0, 0, 0, 1],
            b"ok".to_vec(),
            vec![0, 2, 0, 0, 0, 0, 0, 2, 0, 10, 0x13, 0x88],
        ]
    );
    let unknown = text.replace(",\"enum\":true", "");
    let err = serve(&unknown).render(&binary).unwrap_err();
    assert_eq!(
        err.to_string(),
        "column \"feeling\" of table public.t holds a text value of type 16500 that has no binary form here (a composite, or a type this server does not know), and the client asked for binary values"
    );
}

/// A recorded keepalive moves the server's WAL end past the last change, as PostgreSQL's
/// did (and sends no frame); inside a transaction it is refused.
#[test]
fn a_recorded_keepalive_moves_the_wal_end() {
    let text = format!("{RECORDING}{{\"type\":\"keepalive\",\"wal_end\":\"0/2002000\"}}\n");
    let server = serve(&text);
    assert_eq!(server.wal_end().to_string(), "0/2002000");
    let options = StreamOptions::new(ProtocolVersion::V2, &["pub"]).streaming(Streaming::On);
    assert_eq!(
        server.render(&options).unwrap(),
        serve(RECORDING).render(&options).unwrap()
    );
    let inside = "{\"type\":\"begin\"}\n{\"type\":\"keepalive\",\"wal_end\":\"0/2002000\"}\n";
    let err = Script::from_json_lines(inside).unwrap_err();
    assert_eq!(
        (err.line, err.message.as_str()),
        (2, "a keepalive inside a transaction or stream block")
    );
}
