//! The consumer under test as a process the trial starts, restarts when it exits, and
//! kills for the scenarios that kill it: a shell command in a process group of its own
//! (so a kill reaches what it started), told where to connect in environment variables.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

/// The environment variables a consumer under test reads (documented in docs/trial.md).
pub mod env {
    /// A libpq connection string through the proxy (`host=127.0.0.1 port=… user=…
    /// dbname=… sslmode=disable`).
    pub const DSN: &str = "PGOUTPUT_TRIAL_DSN";
    pub const HOST: &str = "PGOUTPUT_TRIAL_HOST";
    pub const PORT: &str = "PGOUTPUT_TRIAL_PORT";
    pub const USER: &str = "PGOUTPUT_TRIAL_USER";
    pub const PASSWORD: &str = "PGOUTPUT_TRIAL_PASSWORD";
    pub const DBNAME: &str = "PGOUTPUT_TRIAL_DBNAME";
    /// The slot to stream from (made by the trial).
    pub const SLOT: &str = "PGOUTPUT_TRIAL_SLOT";
    /// The publication to stream.
    pub const PUBLICATION: &str = "PGOUTPUT_TRIAL_PUBLICATION";
    /// The JSON-lines file to append one line to per applied row change.
    pub const SINK: &str = "PGOUTPUT_TRIAL_SINK";
    /// With a sink of tables (`--sink-database`): the libpq connection string of the
    /// database to write the rows to, where the trial made the tables.
    pub const SINK_DATABASE: &str = "PGOUTPUT_TRIAL_SINK_DATABASE";
    /// The scenario's name (for logs).
    pub const SCENARIO: &str = "PGOUTPUT_TRIAL_SCENARIO";
}

/// Where the consumer connects and what it is told.
#[derive(Debug, Clone, Default)]
pub struct Assignment {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: String,
    pub slot: String,
    pub publication: String,
    pub sink: std::path::PathBuf,
    pub sink_database: Option<String>,
    pub scenario: String,
}

impl Assignment {
    /// The libpq connection string of [`env::DSN`].
    #[must_use]
    pub fn dsn(&self) -> String {
        let password = self
            .password
            .as_ref()
            .map(|p| {
                format!(
                    " password='{}'",
                    p.replace('\\', "\\\\").replace('\'', "\\'")
                )
            })
            .unwrap_or_default();
        format!(
            "host={} port={} user={} dbname={}{password} sslmode=disable",
            self.host, self.port, self.user, self.dbname
        )
    }
}

/// A running consumer: how often it was started and how it last ended.
#[derive(Debug)]
pub struct Supervised {
    command: String,
    assignment: Assignment,
    log: std::path::PathBuf,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
    /// How many times it exited on its own (not killed by the trial).
    pub exits: u32,
    /// How it last exited on its own.
    pub last_exit: Option<ExitStatus>,
}

impl Supervised {
    /// Starts `command` (run by `sh -c`) with the assignment in its environment, its
    /// output appended to `log`.
    ///
    /// # Errors
    ///
    /// Why it could not be started.
    pub fn start(command: &str, assignment: Assignment, log: &Path) -> std::io::Result<Supervised> {
        let mut supervised = Supervised {
            command: command.to_owned(),
            assignment,
            log: log.to_owned(),
            child: None,
            starts: 0,
            exits: 0,
            last_exit: None,
        };
        supervised.spawn()?;
        Ok(supervised)
    }

    /// A consumer the trial did not start (one already running, attached to): nothing to
    /// restart or stop; it cannot be killed.
    #[must_use]
    pub fn attached() -> Supervised {
        Supervised {
            // No command: nothing to start.
            command: String::new(),
            assignment: Assignment::default(),
            log: std::path::PathBuf::new(),
            child: None,
            starts: 0,
            exits: 0,
            last_exit: None,
        }
    }

    fn spawn(&mut self) -> std::io::Result<()> {
        if self.command.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "an attached consumer cannot be started",
            ));
        }
        let out = File::options().create(true).append(true).open(&self.log)?;
        let err = out.try_clone()?;
        let a = &self.assignment;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(&self.command)
            .env(env::DSN, a.dsn())
            .env(env::HOST, &a.host)
            .env(env::PORT, a.port.to_string())
            .env(env::USER, &a.user)
            .env(env::DBNAME, &a.dbname)
            .env(env::SLOT, &a.slot)
            .env(env::PUBLICATION, &a.publication)
            .env(env::SINK, &a.sink)
            .env(env::SCENARIO, &a.scenario)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        match &a.password {
            Some(password) => command.env(env::PASSWORD, password),
            None => command.env_remove(env::PASSWORD),
        };
        match &a.sink_database {
            Some(conninfo) => command.env(env::SINK_DATABASE, conninfo),
            None => command.env_remove(env::SINK_DATABASE),
        };
        self.child = Some(command.spawn()?);
        self.starts += 1;
        Ok(())
    }

    /// If it has exited on its own: counted, and started again. `true` when it had.
    ///
    /// # Errors
    ///
    /// Why it could not be started again.
    pub fn restart_if_exited(&mut self) -> std::io::Result<bool> {
        let Some(child) = self.child.as_mut() else {
            return Ok(false);
        };
        let Some(status) = child.try_wait()? else {
            return Ok(false);
        };
        self.exits += 1;
        self.last_exit = Some(status);
        self.child = None;
        self.spawn()?;
        Ok(true)
    }

    /// SIGKILL to its process group, then started again.
    ///
    /// # Errors
    ///
    /// Why it could not be started again.
    pub fn kill_and_restart(&mut self) -> std::io::Result<()> {
        self.signal("KILL", Duration::from_secs(10));
        self.spawn()
    }

    /// SIGTERM to its process group; SIGKILL if it has not exited after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if !self.signal("TERM", grace) {
            self.signal("KILL", Duration::from_secs(10));
        }
    }

    /// Sends `signal` to the process group and waits up to `wait` for every process of
    /// it to exit (the shell dies at once, while what it started may still be cleaning
    /// up); `true` when they did (or nothing was running).
    fn signal(&mut self, signal: &str, wait: Duration) -> bool {
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        let group = child.id();
        kill(signal, group);
        let deadline = Instant::now() + wait;
        let mut shell_gone = false;
        loop {
            if !shell_gone {
                shell_gone = !matches!(child.try_wait(), Ok(None));
            }
            if shell_gone && !group_alive(group) {
                self.child = None;
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            // Processes exiting: no event to wait on without unsafe (waitpid with a
            // timeout); a short poll.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The last `lines` lines of its output, for a report.
    #[must_use]
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// `kill -SIGNAL -- -GROUP` (kill(1), not libc: the crate forbids unsafe): whether it
/// reached a process.
fn kill(signal: &str, group: u32) -> bool {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{group}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Whether a process of `group` is still running. From `/proc` where there is one: an
/// exited process whose parent has gone waits there as a zombie until init reaps it
/// (which a container's init may do only every second or two), and `kill -0` counts it.
fn group_alive(group: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return kill("0", group);
    };
    entries.flatten().any(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<u32>().ok());
        pgrp == Some(group) && state != Some("Z")
    })
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}
