//! pg_recvlogical 15 and 18: create a slot, stream to `--endpos` for each protocol version
//! and streaming mode they support, exit 0, and write exactly the scripted payloads.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgoutput_client::StreamOptions;
use pgoutput_codec::{ProtocolVersion, Streaming};
use pgoutput_harness::server::{Auth, TestServer};

use super::{binaries, publication, script};

fn run(bin: &Path, args: &[String], password: Option<&str>) -> std::process::Output {
    let mut command = Command::new(bin.join("pg_recvlogical"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(password) = password {
        command.env("PGPASSWORD", password);
    }
    let mut child = command.spawn().expect("pg_recvlogical runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().unwrap();
            panic!(
                "pg_recvlogical {args:?} hung: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn recvlogical(
    major: &str,
    server_version: &str,
    sets: &[StreamOptions],
    auth: Option<(&str, &str)>,
) {
    let Some(binaries) = binaries(major) else {
        return;
    };
    let mut builder = TestServer::builder()
        .server_version(server_version)
        // A slot per option set: more than PostgreSQL's default of 10.
        .max_replication_slots(64)
        .publication(publication())
        .script(script());
    if let Some((user, password)) = auth {
        builder = builder.auth(Auth::scram(user, password));
    }
    let server = builder.start().unwrap();
    let password = auth.map(|(_, p)| p);
    let dsn = server.connection_string();
    let end = server.wal_end();
    let dir = std::env::temp_dir().join(format!(
        "pgoutput-recvlogical-{major}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, options) in sets.iter().enumerate() {
        let slot = format!("rl{major}_{i}");
        let mut create = vec![
            "-d".to_owned(),
            dsn.clone(),
            "--slot".into(),
            slot.clone(),
            "--create-slot".into(),
            "--plugin".into(),
            "pgoutput".into(),
        ];
        if options.two_phase {
            create.push(if major == "15" {
                "--two-phase".into()
            } else {
                "--enable-two-phase".into()
            });
        }
        let output = run(&binaries.bin, &create, password);
        assert!(
            output.status.success(),
            "create: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let file = dir.join(format!("{slot}.out"));
        let mut start = vec![
            "-d".to_owned(),
            dsn.clone(),
            "--slot".into(),
            slot.clone(),
            "--start".into(),
            "--no-loop".into(),
            "--endpos".into(),
            end.to_string(),
            "-f".into(),
            file.display().to_string(),
            "-o".into(),
            format!("proto_version={}", options.proto_version.number()),
            "-o".into(),
            "publication_names=p".into(),
        ];
        match options.streaming {
            Streaming::Off => {}
            Streaming::On => start.extend(["-o".into(), "streaming=on".into()]),
            Streaming::Parallel => start.extend(["-o".into(), "streaming=parallel".into()]),
        }
        if options.binary {
            start.extend(["-o".into(), "binary=true".into()]);
        }
        let output = run(&binaries.bin, &start, password);
        assert!(
            output.status.success(),
            "pg_recvlogical {major} with {options:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        // pg_recvlogical writes each payload followed by a newline.
        let expected: Vec<u8> = server
            .render(options)
            .unwrap()
            .into_iter()
            .flat_map(|f| f.payload.into_iter().chain([b'\n']))
            .collect();
        let written = std::fs::read(&file).unwrap();
        assert!(
            written == expected,
            "pg_recvlogical {major} with {options:?}: the bytes differ"
        );
        assert_eq!(server.confirmed_flush_lsn(&slot), Some(end), "{options:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let commands = server.commands();
    assert!(commands.iter().any(|c| c == "SHOW data_directory_mode"));
    assert!(commands.iter().any(|c| c == "IDENTIFY_SYSTEM"));
}

/// Every protocol version up to `max` with every streaming mode it allows, text and
/// binary, and with a two-phase slot from protocol 3 on.
fn sets(max: ProtocolVersion) -> Vec<StreamOptions> {
    let mut sets = Vec::new();
    for version in ProtocolVersion::ALL.into_iter().filter(|v| *v <= max) {
        for streaming in [Streaming::Off, Streaming::On, Streaming::Parallel] {
            if version < streaming.min_version() {
                continue;
            }
            for binary in [false, true] {
                let options = StreamOptions::new(version, &["p"])
                    .streaming(streaming)
                    .binary(binary);
                if version >= ProtocolVersion::V3 {
                    sets.push(options.clone().two_phase(true));
                }
                sets.push(options);
            }
        }
    }
    sets
}

#[test]
fn pg_recvlogical_15_over_scram() {
    recvlogical(
        "15",
        "15.20",
        &sets(ProtocolVersion::V3),
        Some(("rep", "pw")),
    );
}

#[test]
fn pg_recvlogical_18_over_scram() {
    recvlogical(
        "18",
        "18.6",
        &sets(ProtocolVersion::V4),
        Some(("rep", "pw")),
    );
}
