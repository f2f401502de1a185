//! `pgoutput` end to end: the built binary on real captured streams from PostgreSQL 15 and
//! 18 (`tests/data/`, written by the live suite with `PGOUTPUT_LIVE_CAPTURE`) and on broken
//! input. `tail` is tested against live servers by the live suite (`tests/tests/live`).

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn pgoutput(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("pgoutput runs");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || input.write_all(&stdin));
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The captured streams, each with the decode options its header names.
fn captures() -> Vec<(PathBuf, Vec<String>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let content = fs::read_to_string(&path).unwrap();
            let command = content
                .lines()
                .find_map(|l| l.strip_prefix("# pgoutput decode "))
                .expect("a '# pgoutput decode …' line");
            let args = command.split_whitespace().map(str::to_owned).collect();
            (path, args)
        })
        .collect()
}

fn message_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[test]
fn decode_encode_and_check_real_captures() {
    let mut types_by_version: [BTreeSet<String>; 2] = Default::default();
    let captures = captures();
    assert!(captures.len() >= 4, "captures: {captures:?}");
    for (path, options) in &captures {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let input = fs::read(path).unwrap();
        let lines = message_lines(path);

        let decoded = pgoutput(&[&["decode"], &options[..]].concat(), &input);
        assert!(
            decoded.status.success(),
            "{name}: {}",
            text(&decoded.stderr)
        );
        let json = text(&decoded.stdout);
        assert_eq!(json.lines().count(), lines.len(), "{name}");
        let version = usize::from(name.starts_with("pg18"));
        for line in json.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            types_by_version[version].insert(value["type"].as_str().unwrap().to_owned());
        }

        // decode | encode reproduces the input exactly.
        let encoded = pgoutput(&[&["encode"], &options[..]].concat(), json.as_bytes());
        assert!(
            encoded.status.success(),
            "{name}: {}",
            text(&encoded.stderr)
        );
        assert_eq!(
            text(&encoded.stdout).lines().collect::<Vec<_>>(),
            lines,
            "{name}"
        );

        let checked = pgoutput(&[&["check"], &options[..]].concat(), &input);
        assert!(
            checked.status.success(),
            "{name}: {}",
            text(&checked.stdout)
        );
        assert_eq!(
            text(&checked.stdout),
            format!("{} passed, 0 failed\n", lines.len()),
            "{name}"
        );

        // The raw form: 4-byte big-endian length, then the message.
        let mut raw = Vec::new();
        for line in &lines {
            let bytes: Vec<u8> = (0..line.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap())
                .collect();
            raw.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            raw.extend_from_slice(&bytes);
        }
        let from_raw = pgoutput(
            &[&["decode", "--input", "raw"], &options[..]].concat(),
            &raw,
        );
        assert!(
            from_raw.status.success(),
            "{name}: {}",
            text(&from_raw.stderr)
        );
        assert_eq!(text(&from_raw.stdout), json, "{name}");
    }
    for (version, types) in ["15", "18"].iter().zip(&types_by_version) {
        assert_eq!(
            types.len(),
            <pgoutput_codec::PgOutputMessage<'_> as pgoutput_codec::Tagged>::TAGS.len(),
            "PostgreSQL {version} captures hold {types:?}"
        );
    }
}

const BROKEN: &str = "\
# a Stream Abort, then broken lines, then valid ones again
41000002e8000002e9
41 00 00 02 e8 00 00 02 E9
4100zz
410000
5a000000
4d01000000016b374d48707265666978000000000568656c6c
45
4d00000000016b374d48700000000001ff
";

#[test]
fn broken_input_is_reported_by_line_and_the_rest_still_processed() {
    let args = ["--proto-version", "2", "--streaming", "on"];
    let decoded = pgoutput(&[&["decode"], &args[..]].concat(), BROKEN.as_bytes());
    assert_eq!(decoded.status.code(), Some(1));
    let stderr = text(&decoded.stderr);
    let expected_errors = [
        "line 4: invalid hex: 'z' is not a hex digit",
        "line 5: unexpected end of input at byte 1 in StreamAbort.xid (needed 4, had 2)",
        "line 6: unknown tag 'Z' (0x5A) at byte 0 in PgOutputMessage.tag; expected one of",
        "line 7: length 5 too large at byte 17 in Message.content (only 4 bytes left)",
        "line 8: message 'E' (0x45) out of order at byte 0 in PgOutputMessage.tag: Stream Stop without a Stream Start",
    ];
    for error in expected_errors {
        assert!(stderr.contains(error), "missing {error:?} in\n{stderr}");
    }
    assert_eq!(stderr.lines().count(), expected_errors.len(), "{stderr}");
    // The valid lines around them still decoded (spaces and upper case allowed in hex).
    let stdout = text(&decoded.stdout);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(
        stdout
            .lines()
            .last()
            .unwrap()
            .contains(r#""prefix":"p","content":{"hex":"ff"}"#),
        "{stdout}"
    );

    let checked = pgoutput(&[&["check"], &args[..]].concat(), BROKEN.as_bytes());
    assert_eq!(checked.status.code(), Some(1));
    let report = text(&checked.stdout);
    assert!(report.ends_with("3 passed, 5 failed\n"), "{report}");
    assert!(report.contains("line 4: invalid hex"), "{report}");

    let truncated_raw = [0, 0, 0, 9, b'A', 0, 0];
    let raw = pgoutput(
        &["decode", "--proto-version", "1", "--input", "raw"],
        &truncated_raw,
    );
    assert_eq!(raw.status.code(), Some(1));
    assert!(
        text(&raw.stderr).contains("message 1: input ended after 3 of the 9 bytes"),
        "{}",
        text(&raw.stderr)
    );
}

#[test]
fn encode_reports_bad_json_and_context_errors_by_line() {
    let input = "\
{\"type\":\"stream_abort\",\"xid\":1,\"subtransaction_xid\":2,\"abort_lsn\":null,\"abort_timestamp\":null}
{\"type\":\"no_such_message\"}
not json
{\"type\":\"stream_abort\",\"xid\":1,\"subtransaction_xid\":2,\"abort_lsn\":\"0/1\",\"abort_timestamp\":\"2000-01-01 00:00:00+00\"}
{\"type\":\"stream_stop\"}
";
    let encoded = pgoutput(
        &["encode", "--proto-version", "4", "--streaming", "on"],
        input.as_bytes(),
    );
    assert_eq!(encoded.status.code(), Some(1));
    assert_eq!(text(&encoded.stdout), "410000000100000002\n");
    let stderr = text(&encoded.stderr);
    assert!(
        stderr.contains("line 2: invalid JSON message: unknown variant `no_such_message`"),
        "{stderr}"
    );
    assert!(stderr.contains("line 3: invalid JSON message"), "{stderr}");
    assert!(stderr.contains("line 4: StreamAbort.abort_lsn is Some, but the wire carries it only when protocol version is 4 or higher and streaming is parallel"), "{stderr}");
    assert!(
        stderr.contains(
            "line 5: message 'E' (0x45) cannot be sent here: Stream Stop without a Stream Start"
        ),
        "{stderr}"
    );
}

#[test]
fn every_subcommand_has_help_and_bad_arguments_fail() {
    for sub in [&[][..], &["decode"], &["encode"], &["check"], &["tail"]] {
        let help = pgoutput(&[sub, &["--help"]].concat(), b"");
        assert!(help.status.success(), "{sub:?}");
        assert!(text(&help.stdout).contains("Usage: pgoutput"), "{sub:?}");
    }
    let bad = pgoutput(&["decode", "--proto-version", "5"], b"");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("5 is not in 1..=4"),
        "{}",
        text(&bad.stderr)
    );
    let bad = pgoutput(
        &["decode", "--proto-version", "1", "--streaming", "on"],
        b"",
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        text(&bad.stderr).contains("streaming on needs protocol version 2"),
        "{}",
        text(&bad.stderr)
    );
    let unreachable = pgoutput(
        &[
            "tail",
            "host=/nonexistent port=1 user=x",
            "--slot",
            "s",
            "--publication",
            "p",
        ],
        b"",
    );
    assert_eq!(unreachable.status.code(), Some(2));
    assert!(
        text(&unreachable.stderr).contains("/nonexistent/.s.PGSQL.1"),
        "{}",
        text(&unreachable.stderr)
    );
}

/// A length prefix cut off at the end of raw input is reported (with the message's
/// number), not taken for a clean end.
#[test]
fn a_cut_off_length_prefix_is_an_error() {
    let mut input = vec![0, 0, 0, 1, b'E'];
    input.extend_from_slice(&[0, 0]);
    let raw = pgoutput(
        &[
            "decode",
            "--proto-version",
            "2",
            "--streaming",
            "on",
            "--input",
            "raw",
        ],
        &input,
    );
    assert_eq!(raw.status.code(), Some(1));
    let stderr = text(&raw.stderr);
    assert!(
        stderr.contains("message 2: input ended inside the 4-byte length prefix (2 bytes of it)"),
        "{stderr}"
    );
}

/// A misspelled field is an error naming it and the line, not a silently dropped value.
#[test]
fn encode_refuses_unknown_fields() {
    let input = "{\"type\":\"delete\",\"xid\":null,\"relation_oid\":16394,\"old_tupel\":{\"key\":[{\"text\":\"42\"}]}}\n";
    let encoded = pgoutput(&["encode", "--proto-version", "1"], input.as_bytes());
    assert_eq!(encoded.status.code(), Some(1));
    assert_eq!(text(&encoded.stdout), "");
    let stderr = text(&encoded.stderr);
    assert!(
        stderr.contains("line 1: invalid JSON message: unknown field `old_tupel`"),
        "{stderr}"
    );
}

/// A line that is not UTF-8 is reported by number; the lines after it still go through.
#[test]
fn a_non_utf8_line_spoils_only_itself() {
    let mut input = b"{\"type\":\"stream_stop\"}\n".to_vec();
    input.extend_from_slice(b"{\"type\":\"origin\",\"origin_lsn\":\"0/1\",\"name\":\"\xff\"}\n");
    input.extend_from_slice(b"{\"type\":\"commit\",\"flags\":0,\"commit_lsn\":\"0/1\",\"end_lsn\":\"0/2\",\"commit_timestamp\":\"2000-01-01 00:00:00+00\"}\n");
    let encoded = pgoutput(&["encode", "--proto-version", "1"], &input);
    assert_eq!(encoded.status.code(), Some(1));
    let stderr = text(&encoded.stderr);
    assert!(
        stderr.contains("line 2: not UTF-8 (invalid byte at column 45)"),
        "{stderr}"
    );
    assert_eq!(
        text(&encoded.stdout).lines().count(),
        1,
        "the commit on line 3"
    );
    let decoded = pgoutput(&["decode", "--proto-version", "1"], b"45\n\xff\n45\n");
    let stderr = text(&decoded.stderr);
    assert!(stderr.contains("line 2: not UTF-8"), "{stderr}");
}

/// `pgoutput decode … | head -1`, and the same for encode and check: a reader that has
/// what it wanted closes the pipe, and the command ends quietly with status 0.
#[test]
fn every_command_ends_quietly_on_a_closed_stdout() {
    use std::io::{BufRead, BufReader};
    // A Begin (final LSN 0/1000, xid 7), far more lines than a pipe holds.
    let begin = "420000000000001000000000000000000100000007\n";
    let json = r#"{"type":"begin","final_lsn":"0/1000","commit_timestamp":"2000-01-01 00:00:00.000001+00","xid":7}"#;
    let dir = std::env::temp_dir().join(format!("pgoutput-closed-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let hex_file = dir.join("begins.hex");
    let json_file = dir.join("begins.jsonl");
    fs::write(&hex_file, begin.repeat(200_000)).unwrap();
    fs::write(&json_file, format!("{json}\n").repeat(200_000)).unwrap();
    let hex_path = hex_file.to_str().unwrap();
    let json_path = json_file.to_str().unwrap();
    for args in [
        ["decode", "--proto-version", "1", hex_path],
        ["encode", "--proto-version", "1", json_path],
        ["check", "--proto-version", "1", hex_path],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pgoutput"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pgoutput runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        lines.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?} printed nothing");
        drop(lines);
        let output = child.wait_with_output().unwrap();
        assert_eq!(text(&output.stderr), "", "{args:?}");
        assert!(output.status.success(), "{args:?}: {:?}", output.status);
    }
    fs::remove_dir_all(&dir).unwrap();
}

/// `pgoutput proxy` listens on loopback unless told otherwise in so many words (and then
/// warns), and its log never shows the upstream's password.
#[test]
fn the_proxy_listens_on_loopback_unless_told_and_never_prints_the_password() {
    use std::io::{BufRead, BufReader};
    let refused = pgoutput(
        &[
            "proxy",
            "--listen",
            "0.0.0.0:0",
            "--upstream",
            "host=127.0.0.1 port=1",
        ],
        b"",
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("not a loopback address"),
        "{}",
        text(&refused.stderr)
    );
    for (listen, remote) in [("127.0.0.1:0", false), ("0.0.0.0:0", true)] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pgoutput"));
        command.args([
            "proxy",
            "--listen",
            listen,
            "--upstream",
            "postgresql://app:hunter2@127.0.0.1:1/db?sslmode=disable",
        ]);
        if remote {
            command.arg("--listen-remote");
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        assert!(first.starts_with("pgoutput proxy: listening on"), "{first}");
        assert!(!first.contains("hunter2"), "{first}");
        assert!(first.contains("password=********"), "{first}");
        if remote {
            let warning = lines.next().unwrap().unwrap();
            assert!(
                warning.contains("warning: listening on 0.0.0.0"),
                "{warning}"
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
