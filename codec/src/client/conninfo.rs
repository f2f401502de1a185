//! Connection strings: libpq's `key=value` form and `postgresql://` URIs, with the usual
//! environment variables filling in what they leave out.

use std::path::Path;

use super::ClientError;

/// Where and as whom to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// A host name, or a directory holding the server's Unix socket (starts with `/`).
    pub host: String,
    /// The TCP port (also part of the Unix socket's file name).
    pub port: u16,
    /// The user to log in as.
    pub user: String,
    /// The password, for servers that ask for one.
    pub password: Option<String>,
    /// The database (a logical replication connection is bound to one).
    pub dbname: String,
    /// The `application_name` the server sees (in `pg_stat_replication`).
    pub application_name: String,
}

impl ConnInfo {
    /// Parses `key=value` pairs (`host`, `port`, `user`, `password`, `dbname`,
    /// `application_name`, `sslmode`; values may be single-quoted) or a
    /// `postgresql://user:password@host:port/dbname?key=value` URI (percent-decoded, `[…]`
    /// around an IPv6 host); `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
    /// `PGAPPNAME` and `PGSSLMODE` fill in what it leaves out. Any other option is an
    /// error, and so is an `sslmode` that needs TLS, which this client does not have yet.
    pub fn parse(
        conninfo: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ClientError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        match conninfo.map(str::trim) {
            Some(uri) if uri.starts_with("postgresql://") || uri.starts_with("postgres://") => {
                pairs = parse_uri(uri)?;
            }
            Some(text) => pairs = parse_key_values(text)?,
            None => {}
        }
        let get = |key: &str, var: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .or_else(|| env(var))
        };
        let user = get("user", "PGUSER")
            .or_else(|| env("USER"))
            .ok_or_else(|| ClientError::Config("no user: give user= or set PGUSER".into()))?;
        let host = get("host", "PGHOST").unwrap_or_else(|| {
            if Path::new("/var/run/postgresql").is_dir() {
                "/var/run/postgresql".into()
            } else {
                "localhost".into()
            }
        });
        let port = match get("port", "PGPORT") {
            Some(port) => port
                .parse()
                .map_err(|_| ClientError::Config(format!("invalid port {port:?}")))?,
            None => 5432,
        };
        let password = get("password", "PGPASSWORD");
        let dbname = get("dbname", "PGDATABASE").unwrap_or_else(|| user.clone());
        for (key, _) in &pairs {
            if !KEYS.contains(&key.as_str()) {
                return Err(ClientError::Config(format!(
                    "unsupported connection option {key:?}; expected one of {}",
                    KEYS.join(", ")
                )));
            }
        }
        // This client has no TLS yet: modes that may go without it are honoured as
        // such, modes that need it are refused rather than silently ignored.
        match get("sslmode", "PGSSLMODE").as_deref() {
            None | Some("disable" | "allow" | "prefer") => {}
            Some(mode @ ("require" | "verify-ca" | "verify-full")) => {
                return Err(ClientError::Config(format!(
                    "sslmode={mode} needs TLS, which this client does not support yet \
                     (disable, allow and prefer connect without it)"
                )))
            }
            Some(other) => {
                return Err(ClientError::Config(format!(
                    "invalid sslmode value: {other:?}"
                )))
            }
        }
        let application_name =
            get("application_name", "PGAPPNAME").unwrap_or_else(|| "pgoutput-codec".into());
        Ok(ConnInfo {
            host,
            port,
            user,
            password,
            dbname,
            application_name,
        })
    }
}

/// The connection options this client understands; any other is an error, never ignored.
const KEYS: [&str; 7] = [
    "host",
    "port",
    "user",
    "password",
    "dbname",
    "application_name",
    "sslmode",
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

/// `%XX` escapes to bytes; the result must be UTF-8.
fn percent_decode(text: &str) -> Result<String, ClientError> {
    let invalid = || ClientError::Config(format!("invalid percent-encoding in {text:?}"));
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = tail.get(..2).ok_or_else(invalid)?;
            let hex = std::str::from_utf8(hex).map_err(|_| invalid())?;
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| invalid())?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| invalid())
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
                "invalid connection string: expected '=' after {key:?}"
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

    #[test]
    fn key_value_strings() {
        let info = ConnInfo::parse(
            Some("host=/tmp/pg port=5499 user=tailer password='se cret' dbname=app"),
            env(&[]),
        )
        .unwrap();
        assert_eq!(
            info,
            ConnInfo {
                host: "/tmp/pg".into(),
                port: 5499,
                user: "tailer".into(),
                password: Some("se cret".into()),
                dbname: "app".into(),
                application_name: "pgoutput-codec".into(),
            }
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
        assert!(ConnInfo::parse(Some("sslmode=require user=x"), env(&[])).is_err());
        // A TLS request is never ignored, in a URI or the environment either.
        assert!(ConnInfo::parse(Some("postgresql://u@h/db?sslmode=require"), env(&[])).is_err());
        assert!(ConnInfo::parse(Some("postgresql://u@h?sslmode=verify-full"), env(&[])).is_err());
        assert!(ConnInfo::parse(Some("user=x"), env(&[("PGSSLMODE", "require")])).is_err());
        assert!(ConnInfo::parse(Some("postgresql://u@h/db?sslmode=disable"), env(&[])).is_ok());
        assert!(ConnInfo::parse(Some("postgresql://u@h/db?colour=red"), env(&[])).is_err());
        assert!(ConnInfo::parse(Some("user=x sslmode=sometimes"), env(&[])).is_err());
        assert!(ConnInfo::parse(Some("host"), env(&[])).is_err());
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
        assert!(ConnInfo::parse(Some("postgresql://u@h/db%zz"), env(&[])).is_err());
    }
}
