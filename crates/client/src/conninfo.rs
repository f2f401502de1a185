//! Connection strings: libpq's `key=value` form and `postgresql://` URIs, with the usual
//! environment variables filling in what they leave out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ClientError;

/// Where and as whom to connect, and how: a parsed libpq connection string.
///
/// Build one with [`ConnInfo::parse`]; every field can then be changed. Its `Debug` form
/// leaves the password out (as tokio-postgres' `Config` does), so a log never shows it.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnInfo {
    /// A host name or IP address, or a directory holding the server's Unix socket (starts
    /// with `/`).
    pub host: String,
    /// The TCP port (also part of the Unix socket's file name).
    pub port: u16,
    /// The user to log in as.
    pub user: String,
    /// The password, for servers that ask for one. When it is `None`, the password file
    /// ([`passfile`](Self::passfile)) is consulted if the server asks.
    pub password: Option<String>,
    /// The password file (`passfile`, `PGPASSFILE`, or `~/.pgpass`): lines of
    /// `host:port:database:user:password`, `*` matching anything.
    pub passfile: Option<PathBuf>,
    /// The database (a logical replication connection is bound to one).
    pub dbname: String,
    /// The `application_name` the server sees (in `pg_stat_replication`).
    pub application_name: String,
    /// The `client_encoding` asked for at start-up (default `UTF8`). `SQL_ASCII` passes
    /// the bytes of a `SQL_ASCII` database through unconverted, which the server would
    /// otherwise refuse to convert.
    pub client_encoding: String,
    /// Command-line options for the server process (`options`, such as `-c
    /// wal_sender_timeout=0`).
    pub options: Option<String>,
    /// How long connecting and logging in may take (`connect_timeout`, whole seconds, at
    /// least 2 as in libpq); `None` waits as long as the operating system does.
    pub connect_timeout: Option<Duration>,
    /// TCP keepalives, so a connection to a vanished server is noticed.
    pub keepalives: Keepalives,
    /// TLS: whether to use it and what to verify.
    pub tls: TlsSettings,
}

/// libpq's `keepalives`, `keepalives_idle`, `keepalives_interval` and `keepalives_count`:
/// on by default, with the operating system's timings unless given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keepalives {
    /// Whether to send keepalives at all (`keepalives=0` turns them off).
    pub enabled: bool,
    /// Idle time before the first probe.
    pub idle: Option<Duration>,
    /// Time between probes.
    pub interval: Option<Duration>,
    /// Probes lost before the connection counts as dead.
    pub count: Option<u32>,
}

impl Default for Keepalives {
    fn default() -> Self {
        Keepalives {
            enabled: true,
            idle: None,
            interval: None,
            count: None,
        }
    }
}

/// libpq's `sslmode`: whether TLS is tried, required, and how far the server's certificate
/// is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// Without TLS first; with TLS if the server refuses that.
    Allow,
    /// With TLS if the server offers it, without if not (libpq's default).
    #[default]
    Prefer,
    /// TLS or nothing; the certificate is checked only when a root certificate is at hand
    /// (`sslrootcert`, or `~/.postgresql/root.crt`), as in libpq.
    Require,
    /// TLS, and a certificate signed by the root certificate.
    VerifyCa,
    /// TLS, a certificate signed by the root certificate, and issued to the host name (or
    /// IP address) connected to.
    VerifyFull,
}

impl SslMode {
    /// Whether a connection without TLS is unacceptable.
    #[must_use]
    pub fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }
}

impl std::fmt::Display for SslMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

impl std::str::FromStr for SslMode {
    type Err = ClientError;

    fn from_str(text: &str) -> Result<Self, ClientError> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(ClientError::Config(format!(
                    "invalid sslmode value: {other:?} (expected disable, allow, prefer, \
                     require, verify-ca or verify-full)"
                )))
            }
        })
    }
}

/// The TLS part of a connection string. As in libpq, TLS is for TCP connections only: a
/// Unix-domain socket never leaves the machine and is used without it whatever the mode.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsSettings {
    /// `sslmode`.
    pub mode: SslMode,
    /// `sslrootcert`: PEM certificates of the authorities to trust; by default
    /// `~/.postgresql/root.crt` when it exists.
    pub root_cert: Option<PathBuf>,
    /// `sslcert`: the client certificate (PEM chain); by default
    /// `~/.postgresql/postgresql.crt` when it exists.
    pub cert: Option<PathBuf>,
    /// `sslkey`: the client certificate's private key (PEM, unencrypted, not readable by
    /// group or others); by default `~/.postgresql/postgresql.key`.
    pub key: Option<PathBuf>,
    /// `sslsni`: send the host name in the handshake (on by default; never for IP
    /// addresses).
    pub sni: bool,
}

impl Default for TlsSettings {
    /// libpq's defaults: `prefer`, no files, SNI on.
    fn default() -> Self {
        TlsSettings {
            mode: SslMode::Prefer,
            root_cert: None,
            cert: None,
            key: None,
            sni: true,
        }
    }
}

impl ConnInfo {
    /// Parses `key=value` pairs (values may be single-quoted) or a
    /// `postgresql://user:password@host:port/dbname?key=value` URI (percent-decoded, `[…]`
    /// around an IPv6 host). The keys are libpq's: `host`, `port`, `user`, `password`,
    /// `passfile`, `dbname`, `application_name`, `client_encoding`, `options`,
    /// `connect_timeout`, `keepalives`, `keepalives_idle`, `keepalives_interval`,
    /// `keepalives_count`, `sslmode`, `sslrootcert`, `sslcert`, `sslkey` and `sslsni`; what
    /// the string leaves out comes from libpq's environment variables (`PGHOST`, `PGPORT`,
    /// `PGUSER`, `PGPASSWORD`, `PGPASSFILE`, `PGDATABASE`, `PGAPPNAME`,
    /// `PGCLIENTENCODING`, `PGOPTIONS`, `PGCONNECT_TIMEOUT`, `PGSSLMODE`, `PGSSLROOTCERT`,
    /// `PGSSLCERT`, `PGSSLKEY`, `PGSSLSNI`) through `env`, and `HOME` for the default
    /// files. Any other key is an error naming it, never ignored; so is a TLS mode this
    /// build cannot honour (without the `tls` feature, only `disable`, `allow` and `prefer`
    /// connect, without TLS).
    ///
    /// # Errors
    ///
    /// [`ClientError::Config`] saying what is wrong with the string or the environment.
    ///
    /// ```
    /// use pgoutput_client::{ClientError, ConnInfo};
    ///
    /// let info = ConnInfo::parse(Some("postgresql://repl@db.example/app?connect_timeout=5"), |_| None)?;
    /// assert_eq!((info.host.as_str(), info.port, info.dbname.as_str()), ("db.example", 5432, "app"));
    ///
    /// let err = ConnInfo::parse(Some("host=db user=repl colour=red"), |_| None).unwrap_err();
    /// assert!(matches!(err, ClientError::Config(_)));
    /// assert!(err.to_string().starts_with(r#"unsupported connection option "colour"; expected one of host, port"#));
    /// # Ok::<(), pgoutput_client::ClientError>(())
    /// ```
    pub fn parse(
        conninfo: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ClientError> {
        let pairs = match conninfo {
            Some(text) => pairs(text)?,
            None => Vec::new(),
        };
        for (key, _) in &pairs {
            if !KEYS.iter().any(|(known, _)| known == key) {
                return Err(ClientError::Config(format!(
                    "unsupported connection option {key:?}; expected one of {}",
                    KEYS.map(|(key, _)| key).join(", ")
                )));
            }
        }
        let get = |key: &str| {
            let var = KEYS
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, var)| *var);
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| var.and_then(&env))
        };
        let home = env("HOME").map(PathBuf::from);
        let in_home = |relative: &str| home.as_ref().map(|home| home.join(relative));
        let existing = |path: Option<PathBuf>| path.filter(|p| p.exists());
        let user = get("user")
            .or_else(|| env("USER"))
            .ok_or_else(|| ClientError::Config("no user: give user= or set PGUSER".into()))?;
        let host = get("host").unwrap_or_else(|| {
            if Path::new("/var/run/postgresql").is_dir() {
                "/var/run/postgresql".into()
            } else {
                "localhost".into()
            }
        });
        if host.contains(',') {
            return Err(ClientError::Config(format!(
                "host={host:?}: several hosts are not supported; give one"
            )));
        }
        let port = match get("port") {
            Some(port) => port
                .parse()
                .map_err(|_| ClientError::Config(format!("invalid port {port:?}")))?,
            None => 5432,
        };
        let dbname = get("dbname").unwrap_or_else(|| user.clone());
        let connect_timeout = match get("connect_timeout") {
            // libpq: zero or negative waits forever; anything else is at least 2 seconds.
            Some(text) => match integer(&text, "connect_timeout")? {
                ..=0 => None,
                seconds => Some(Duration::from_secs(seconds.max(2) as u64)),
            },
            None => None,
        };
        let seconds = |key: &str| -> Result<Option<Duration>, ClientError> {
            get(key)
                .map(|text| Ok(Duration::from_secs(integer(&text, key)?.max(0) as u64)))
                .transpose()
        };
        let keepalives = Keepalives {
            enabled: get("keepalives")
                .map(|text| integer(&text, "keepalives"))
                .transpose()?
                != Some(0),
            idle: seconds("keepalives_idle")?,
            interval: seconds("keepalives_interval")?,
            count: get("keepalives_count")
                .map(|text| integer(&text, "keepalives_count").map(|n| n.max(0) as u32))
                .transpose()?,
        };
        let mode: SslMode = get("sslmode").as_deref().unwrap_or("prefer").parse()?;
        if mode.requires_tls() && !cfg!(feature = "tls") {
            return Err(ClientError::Config(format!(
                "sslmode={mode} needs TLS, which this build leaves out: enable the `tls` \
                 feature of pgoutput-codec (disable, allow and prefer connect without it)"
            )));
        }
        let root_cert = match get("sslrootcert") {
            Some(system) if system == "system" => {
                return Err(ClientError::Config(
                    "sslrootcert=system (the operating system's trusted roots) is not \
                     supported: give the CA certificate's file"
                        .into(),
                ))
            }
            Some(path) => Some(PathBuf::from(path)),
            None => existing(in_home(".postgresql/root.crt")),
        };
        let tls = TlsSettings {
            mode,
            root_cert,
            cert: get("sslcert")
                .map(PathBuf::from)
                .or_else(|| existing(in_home(".postgresql/postgresql.crt"))),
            key: get("sslkey")
                .map(PathBuf::from)
                .or_else(|| in_home(".postgresql/postgresql.key")),
            sni: get("sslsni")
                .map(|text| integer(&text, "sslsni"))
                .transpose()?
                != Some(0),
        };
        Ok(ConnInfo {
            host,
            port,
            user,
            password: get("password"),
            passfile: get("passfile")
                .map(PathBuf::from)
                .or_else(|| in_home(".pgpass")),
            dbname,
            application_name: get("application_name").unwrap_or_else(|| "pgoutput-codec".into()),
            client_encoding: get("client_encoding").unwrap_or_else(|| "UTF8".into()),
            options: get("options"),
            connect_timeout,
            keepalives,
            tls,
        })
    }

    /// `conninfo` (key=value pairs or a URI) as key=value pairs without its password:
    /// what a log line or an error may say of where a program connects. A string that
    /// does not parse is not repeated at all (it may hold a password all the same).
    ///
    /// ```
    /// use pgoutput_client::ConnInfo;
    ///
    /// assert_eq!(
    ///     ConnInfo::redacted("postgresql://app:s3cret@db:5433/shop?sslmode=require"),
    ///     "user=app password=******** host=db port=5433 dbname=shop sslmode=require"
    /// );
    /// assert_eq!(ConnInfo::redacted("host=db password='a b"), "(a connection string that does not parse)");
    /// ```
    #[must_use]
    pub fn redacted(conninfo: &str) -> String {
        let Ok(pairs) = pairs(conninfo) else {
            return "(a connection string that does not parse)".to_owned();
        };
        pairs
            .iter()
            .map(|(key, value)| {
                if key == "password" {
                    format!("{key}=********")
                } else if value.is_empty()
                    || value.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\')
                {
                    format!(
                        "{key}='{}'",
                        value.replace('\\', "\\\\").replace('\'', "\\'")
                    )
                } else {
                    format!("{key}={value}")
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether this connects over a Unix-domain socket (where TLS is never used).
    #[must_use]
    pub fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        /// Stands for a password that is there.
        struct Redacted;
        impl std::fmt::Debug for Redacted {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("_")
            }
        }
        f.debug_struct("ConnInfo")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| Redacted))
            .field("passfile", &self.passfile)
            .field("dbname", &self.dbname)
            .field("application_name", &self.application_name)
            .field("client_encoding", &self.client_encoding)
            .field("options", &self.options)
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalives", &self.keepalives)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A connection string's `keyword = value` pairs, from either form (`key=value ...` or a
/// `postgresql://` URI), in order and unchecked: for a program that shows or rewrites one.
///
/// # Errors
///
/// [`ClientError::Config`] for a string libpq would not parse.
pub fn pairs(conninfo: &str) -> Result<Vec<(String, String)>, ClientError> {
    let text = conninfo.trim();
    if text.starts_with("postgresql://") || text.starts_with("postgres://") {
        parse_uri(text)
    } else {
        parse_key_values(text)
    }
}

/// An integer option, as libpq reads them.
fn integer(text: &str, key: &str) -> Result<i64, ClientError> {
    text.trim()
        .parse()
        .map_err(|_| ClientError::Config(format!("invalid integer value {text:?} for {key}")))
}

/// The connection options this client understands, with the environment variable that
/// stands in for each; any other option is an error, never ignored.
const KEYS: [(&str, Option<&str>); 19] = [
    ("host", Some("PGHOST")),
    ("port", Some("PGPORT")),
    ("user", Some("PGUSER")),
    ("password", Some("PGPASSWORD")),
    ("passfile", Some("PGPASSFILE")),
    ("dbname", Some("PGDATABASE")),
    ("application_name", Some("PGAPPNAME")),
    ("client_encoding", Some("PGCLIENTENCODING")),
    ("options", Some("PGOPTIONS")),
    ("connect_timeout", Some("PGCONNECT_TIMEOUT")),
    ("keepalives", None),
    ("keepalives_idle", None),
    ("keepalives_interval", None),
    ("keepalives_count", None),
    ("sslmode", Some("PGSSLMODE")),
    ("sslrootcert", Some("PGSSLROOTCERT")),
    ("sslcert", Some("PGSSLCERT")),
    ("sslkey", Some("PGSSLKEY")),
    ("sslsni", Some("PGSSLSNI")),
];

/// `postgresql://user:password@host:port/dbname?key=value&…`, percent-decoded, with
/// `[…]` around an IPv6 host; query parameters are connection options like any other.
fn parse_uri(uri: &str) -> Result<Vec<(String, String)>, ClientError> {
    let mut pairs = Vec::new();
    let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
    let (main, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = main.split_once('/').unwrap_or((main, ""));
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if let Some(userinfo) = userinfo {
        let (user, password) = userinfo
            .split_once(':')
            .map_or((userinfo, None), |(u, p)| (u, Some(p)));
        if !user.is_empty() {
            pairs.push(("user".into(), percent_decode(user)?));
        }
        if let Some(password) = password {
            pairs.push(("password".into(), percent_decode(password)?));
        }
    }
    let (host, port) = match hostport.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed.split_once(']').ok_or_else(|| {
                ClientError::Config(format!("invalid URI: unterminated [ in {hostport:?}"))
            })?;
            (host, after.strip_prefix(':'))
        }
        None => hostport
            .rsplit_once(':')
            .map_or((hostport, None), |(h, p)| (h, Some(p))),
    };
    if !host.is_empty() {
        pairs.push(("host".into(), percent_decode(host)?));
    }
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        pairs.push(("port".into(), port.into()));
    }
    if !path.is_empty() {
        pairs.push(("dbname".into(), percent_decode(path)?));
    }
    for parameter in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = parameter.split_once('=').ok_or_else(|| {
            ClientError::Config(format!(
                "invalid URI query parameter {parameter:?}: expected key=value"
            ))
        })?;
        pairs.push((percent_decode(key)?, percent_decode(value)?));
    }
    Ok(pairs)
}

/// `%XX` escapes to bytes, checked as libpq's `conninfo_uri_decode` checks them (two hex
/// digits after every `%`, never `%00`); the result must be UTF-8.
fn percent_decode(text: &str) -> Result<String, ClientError> {
    let error = |what: &str| ClientError::Config(format!("{what}: {text:?}"));
    for (at, _) in text.match_indices('%') {
        match text.get(at + 1..at + 3) {
            Some("00") => return Err(error("forbidden value %00 in percent-encoded value")),
            Some(digits) if digits.bytes().all(|b| b.is_ascii_hexdigit()) => {}
            _ => return Err(error("invalid percent-encoded token")),
        }
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| error("percent-decoded value is not UTF-8"))
}

/// `key=value key2='quoted value'`.
fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, ClientError> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && !c.is_whitespace())).collect();
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(ClientError::Config(format!(
                "missing \"=\" after {key:?} in connection info string"
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => {
                        return Err(ClientError::Config(
                            "invalid connection string: unterminated quote".into(),
                        ))
                    }
                }
            }
        } else {
            value.extend(std::iter::from_fn(|| chars.next_if(|c| !c.is_whitespace())));
        }
        pairs.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    /// The message of the configuration error `conninfo` (with `vars` as the environment)
    /// is refused with; panics if it is accepted or refused otherwise.
    fn refused(conninfo: &str, vars: &'static [(&'static str, &'static str)]) -> String {
        match ConnInfo::parse(Some(conninfo), env(vars)) {
            Err(ClientError::Config(message)) => message,
            other => panic!("{conninfo:?} should be a configuration error, got {other:?}"),
        }
    }

    #[test]
    fn debug_output_and_redacted_strings_leave_the_password_out() {
        let info =
            ConnInfo::parse(Some("host=db user=u password=hunter2 dbname=x"), |_| None).unwrap();
        let debug = format!("{info:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("password: Some(_)"),
            "{debug}"
        );
        let shown = ConnInfo::redacted("host=db user='a b' password='hunter 2' dbname=x");
        assert_eq!(shown, "host=db user='a b' password=******** dbname=x");
    }

    #[test]
    fn key_value_strings() {
        let info = ConnInfo::parse(
            Some("host=/tmp/pg port=5499 user=tailer password='se cret' dbname=app"),
            env(&[]),
        )
        .unwrap();
        assert_eq!(
            (
                info.host.as_str(),
                info.port,
                info.user.as_str(),
                info.password.as_deref(),
                info.dbname.as_str(),
                info.application_name.as_str(),
                info.client_encoding.as_str(),
            ),
            (
                "/tmp/pg",
                5499,
                "tailer",
                Some("se cret"),
                "app",
                "pgoutput-codec",
                "UTF8"
            )
        );
        assert_eq!(info.tls, TlsSettings::default());
        assert_eq!(info.keepalives, Keepalives::default());
        assert_eq!(
            (info.connect_timeout, info.passfile, info.options),
            (None, None, None)
        );
    }

    #[test]
    fn uris_and_environment() {
        let info = ConnInfo::parse(Some("postgresql://u:p@db.example:6000/app"), env(&[])).unwrap();
        assert_eq!(
            (
                info.host.as_str(),
                info.port,
                info.user.as_str(),
                info.password.as_deref(),
                info.dbname.as_str()
            ),
            ("db.example", 6000, "u", Some("p"), "app")
        );
        let info = ConnInfo::parse(
            None,
            env(&[
                ("PGHOST", "h"),
                ("PGPORT", "7"),
                ("PGUSER", "x"),
                ("PGPASSWORD", "y"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (
                info.host.as_str(),
                info.port,
                info.user.as_str(),
                info.dbname.as_str()
            ),
            ("h", 7, "x", "x")
        );
        // A TLS request is never ignored, in a URI or the environment either.
        let mode = |conninfo, vars| ConnInfo::parse(Some(conninfo), env(vars)).map(|i| i.tls.mode);
        if cfg!(feature = "tls") {
            assert_eq!(
                mode("postgresql://u@h/db?sslmode=require", &[]).unwrap(),
                SslMode::Require
            );
            assert_eq!(
                mode("postgresql://u@h?sslmode=verify-full", &[]).unwrap(),
                SslMode::VerifyFull
            );
            assert_eq!(
                mode("user=x", &[("PGSSLMODE", "verify-ca")]).unwrap(),
                SslMode::VerifyCa
            );
        } else {
            const NO_TLS: &str = "sslmode=require needs TLS, which this build leaves out: enable \
                the `tls` feature of pgoutput-codec (disable, allow and prefer connect without it)";
            assert_eq!(refused("sslmode=require user=x", &[]), NO_TLS);
            assert_eq!(refused("postgresql://u@h/db?sslmode=require", &[]), NO_TLS);
            assert_eq!(refused("user=x", &[("PGSSLMODE", "require")]), NO_TLS);
        }
        assert_eq!(
            mode("postgresql://u@h/db?sslmode=disable", &[]).unwrap(),
            SslMode::Disable
        );
        assert_eq!(mode("user=x", &[]).unwrap(), SslMode::Prefer);
        assert_eq!(refused("user=x sslrootcert=system", &[]),
            "sslrootcert=system (the operating system's trusted roots) is not supported: give the CA certificate's file");
        let err = ConnInfo::parse(Some("postgresql://u@h/db?colour=red"), env(&[])).unwrap_err();
        assert!(err.to_string().contains("\"colour\""), "{err}");
        assert_eq!(
            refused("host=a,b user=x", &[]),
            "host=\"a,b\": several hosts are not supported; give one"
        );
        assert_eq!(refused("user=x sslmode=sometimes", &[]),
            "invalid sslmode value: \"sometimes\" (expected disable, allow, prefer, require, verify-ca or verify-full)");
        assert_eq!(
            refused("host", &[]),
            "missing \"=\" after \"host\" in connection info string"
        );
    }

    #[test]
    fn uris_are_percent_decoded_and_take_ipv6_hosts() {
        let info = ConnInfo::parse(
            Some("postgresql://us%40er:p%3Ass@[::1]:6543/my%20db?application_name=app"),
            env(&[]),
        )
        .unwrap();
        assert_eq!(
            (
                info.user.as_str(),
                info.password.as_deref(),
                info.host.as_str(),
                info.port,
                info.dbname.as_str(),
                info.application_name.as_str()
            ),
            ("us@er", Some("p:ss"), "::1", 6543, "my db", "app")
        );
        assert_eq!(
            refused("postgresql://u@h/db%zz", &[]),
            "invalid percent-encoded token: \"db%zz\""
        );
    }

    #[test]
    fn timeouts_keepalives_encoding_and_files() {
        let info = ConnInfo::parse(
            Some(
                "user=x connect_timeout=1 keepalives_idle=30 keepalives_interval=5 \
                 keepalives_count=3 client_encoding=SQL_ASCII options='-c wal_sender_timeout=0' \
                 sslrootcert=/ca.pem sslcert=/c.pem sslkey=/c.key sslsni=0",
            ),
            env(&[("HOME", "/home/x")]),
        )
        .unwrap();
        // libpq's minimum of 2 seconds.
        assert_eq!(info.connect_timeout, Some(Duration::from_secs(2)));
        assert_eq!(
            (
                info.keepalives.enabled,
                info.keepalives.idle,
                info.keepalives.interval,
                info.keepalives.count
            ),
            (
                true,
                Some(Duration::from_secs(30)),
                Some(Duration::from_secs(5)),
                Some(3)
            )
        );
        assert_eq!(info.client_encoding, "SQL_ASCII");
        assert_eq!(info.options.as_deref(), Some("-c wal_sender_timeout=0"));
        assert_eq!(info.tls.root_cert.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(info.tls.cert.as_deref(), Some(Path::new("/c.pem")));
        assert_eq!(info.tls.key.as_deref(), Some(Path::new("/c.key")));
        assert!(!info.tls.sni);
        assert_eq!(info.passfile.as_deref(), Some(Path::new("/home/x/.pgpass")));
        let info = ConnInfo::parse(
            Some("user=x keepalives=0 connect_timeout=0"),
            env(&[("PGPASSFILE", "/p"), ("PGCLIENTENCODING", "LATIN1")]),
        )
        .unwrap();
        assert!(!info.keepalives.enabled);
        assert_eq!(info.connect_timeout, None);
        assert_eq!(info.passfile.as_deref(), Some(Path::new("/p")));
        assert_eq!(info.client_encoding, "LATIN1");
        assert_eq!(
            refused("user=x connect_timeout=soon", &[]),
            "invalid integer value \"soon\" for connect_timeout"
        );
    }
}
