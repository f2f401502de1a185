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
    /// Parses `key=value` pairs (`host`, `port`, `user`, `password`, `dbname`; values may
    /// be single-quoted) or a `postgresql://user:password@host:port/dbname` URI; the usual
    /// `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE` fill in what it leaves out.
    pub fn parse(
        conninfo: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ClientError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        match conninfo.map(str::trim) {
            Some(uri) if uri.starts_with("postgresql://") || uri.starts_with("postgres://") => {
                let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                let (userinfo, hostport) = match authority.rsplit_once('@') {
                    Some((u, h)) => (Some(u), h),
                    None => (None, authority),
                };
                if let Some(userinfo) = userinfo {
                    let (user, password) = userinfo
                        .split_once(':')
                        .map_or((userinfo, None), |(u, p)| (u, Some(p)));
                    pairs.push(("user".into(), user.into()));
                    if let Some(password) = password {
                        pairs.push(("password".into(), password.into()));
                    }
                }
                let (host, port) = hostport
                    .rsplit_once(':')
                    .map_or((hostport, None), |(h, p)| (h, Some(p)));
                if !host.is_empty() {
                    pairs.push(("host".into(), host.into()));
                }
                if let Some(port) = port {
                    pairs.push(("port".into(), port.into()));
                }
                let dbname = path.split('?').next().unwrap_or_default();
                if !dbname.is_empty() {
                    pairs.push(("dbname".into(), dbname.into()));
                }
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
const KEYS: [&str; 6] = [
    "host",
    "port",
    "user",
    "password",
    "dbname",
    "application_name",
];

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
        assert!(ConnInfo::parse(Some("host"), env(&[])).is_err());
    }
}
