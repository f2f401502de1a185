//! The README's quick start, run as a user types it: the `sh` block under "Quick start" is
//! read from README.md, its `cargo run` line started in the workspace, its `pg_recvlogical`
//! line run with PostgreSQL 15's programs on `PATH` and stopped with Ctrl-C's signal once
//! it has confirmed past the fault, and each `curl` line's answer compared with what its
//! comment says it prints.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::binaries;

/// The commands of the README's quick start block, in order, each with the comment that
/// follows it on its line (what it prints).
fn quick_start(readme: &str) -> Vec<(String, String)> {
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .expect("README.md has a Quick start section");
    let section = section.split("\n## ").next().unwrap_or(section);
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the Quick start has an sh block");
    block
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            // A comment starts at " # " outside the command's quotes (none of the quick
            // start's quoted arguments holds one).
            match line.split_once("  # ") {
                Some((command, comment)) => (command.trim().to_owned(), comment.trim().to_owned()),
                None => (line.to_owned(), String::new()),
            }
        })
        .collect()
}

/// `command` run by `sh` in `dir` as a process group of its own (so that the signal a
/// terminal's Ctrl-C sends reaches everything it started), with `path` first on `PATH`.
fn shell(command: &str, dir: &Path, path: &Path) -> Command {
    let mut sh = Command::new("sh");
    let paths = std::env::var_os("PATH").unwrap_or_default();
    let mut search = vec![path.to_path_buf()];
    search.extend(std::env::split_paths(&paths));
    sh.arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(search).expect("a PATH"))
        .stdin(Stdio::null())
        .process_group(0);
    sh
}

/// What Ctrl-C does in the terminal the command runs in: SIGINT to its process group.
fn interrupt(child: &Child) {
    let status = Command::new("kill")
        .args(["-INT", "--", &format!("-{}", child.id())])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -INT failed");
}

/// Stops the process group for good when a check fails half way.
struct Group(Option<Child>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

fn curl(args: &[&str]) -> String {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "120"])
        .args(args)
        .output()
        .expect("curl runs");
    assert!(output.status.success(), "curl {args:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn the_readme_quick_start_works_as_written() {
    let Some(pg) = binaries("15") else {
        return;
    };
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let commands = quick_start(&readme);
    let [(serve, _), (recvlogical, _), curls @ ..] = &commands[..] else {
        panic!("the quick start is a server, pg_recvlogical, then curl: {commands:?}");
    };
    assert!(serve.starts_with("cargo run "), "{serve}");
    assert!(recvlogical.starts_with("pg_recvlogical "), "{recvlogical}");
    assert!(!curls.is_empty() && curls.iter().all(|(c, _)| c.starts_with("curl ")));

    // The server: built by cargo on first use, then it says where it listens.
    let mut server = shell(serve, &root, &pg.bin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let stderr = server.stderr.take().expect("piped");
    let mut server = Group(Some(server));
    let (lines, server_said) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    loop {
        // Building the program from a clean checkout takes minutes on two cores.
        match server_said.recv_timeout(Duration::from_secs(900)) {
            Ok(line) => {
                let ready = line.contains("control API on");
                log.push(line);
                if ready {
                    break;
                }
            }
            Err(e) => panic!("the server did not start ({e}): {log:#?}"),
        }
    }

    // The consumer: cut inside transaction 2, it reconnects after 5 s and goes on.
    let consumer = shell(recvlogical, &root, &pg.bin)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let mut consumer = Group(Some(consumer));
    let confirmed = curl(&[
        "-X",
        "POST",
        "127.0.0.1:8080/wait",
        "-d",
        r#"{"slot": "s", "timeout_ms": 60000}"#,
    ]);
    assert!(
        confirmed.contains("confirmed_flush_lsn"),
        "pg_recvlogical did not reach the WAL end: {confirmed}"
    );
    let wait_fired = curl(&["127.0.0.1:8080/faults"]);
    assert!(
        wait_fired.contains(r#""fired":1"#),
        "the fault did not fire: {wait_fired}"
    );
    // Ctrl-C: pg_recvlogical ends its stream and exits.
    let child = consumer.0.take().expect("running");
    interrupt(&child);
    let output = child.wait_with_output().expect("pg_recvlogical exits");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains("disconnected; waiting 5 seconds to try again"),
        "pg_recvlogical was not cut by the fault: {said}"
    );

    for (command, comment) in curls {
        let output = shell(command, &root, &pg.bin)
            .stderr(Stdio::inherit())
            .output()
            .expect("sh runs");
        assert!(output.status.success(), "{command}: {output:?}");
        let printed = String::from_utf8(output.stdout).expect("UTF-8");
        // What the comment says it prints, up to its explanation after " : ".
        let promised = comment.split(" : ").next().unwrap_or_default();
        let squeeze = |s: &str| s.split_whitespace().collect::<String>();
        assert!(
            squeeze(&printed).contains(&squeeze(promised)),
            "{command} printed {printed}, not {promised:?} as the README says"
        );
    }

    // Ctrl-C in the server's terminal: it stops cleanly (the shell around it dies of the
    // signal, as a terminal's would not; what counts is the program's own word).
    let child = server.0.take().expect("running");
    interrupt(&child);
    let _ = child.wait_with_output();
    log.extend(server_said.iter());
    assert!(
        log.iter().any(|line| line == "pgoutput serve: stopping"),
        "the server did not stop cleanly: {log:#?}"
    );
}

#[test]
fn the_quick_start_block_is_read_as_written() {
    let readme = "x\n## Quick start\ntext\n```sh\ncargo run -- serve\n\n# a note\ncurl a   # []\ncurl b  # \"fired\": 1\n```\n## Next\n```sh\nno\n```\n";
    assert_eq!(
        quick_start(readme),
        [
            ("cargo run -- serve".to_owned(), String::new()),
            ("curl a".to_owned(), "[]".to_owned()),
            ("curl b".to_owned(), "\"fired\": 1".to_owned()),
        ]
    );
}
