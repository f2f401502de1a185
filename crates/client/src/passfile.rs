//! The password file (`~/.pgpass`, `PGPASSFILE`, `passfile=`), read as libpq reads it.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// What the password file had to say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A line matched: its password.
    Found(String),
    /// No file, or no line matched.
    NotFound,
    /// The file was not used, and why (libpq warns and goes on without it).
    Ignored(String),
}

/// The password for `host:port:dbname:user` from the file at `path`. Lines are
/// `hostname:port:database:username:password`; `*` matches anything, `\` escapes `:` and
/// `\`, `#` starts a comment line, the first match wins. A Unix-socket directory matches
/// `localhost`. A file readable by group or others is ignored, as libpq does.
pub(crate) fn lookup(path: &Path, host: &str, port: u16, dbname: &str, user: &str) -> Lookup {
    let metadata = match fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Lookup::NotFound,
        Err(e) => return Lookup::Ignored(format!("{}: {e}", path.display())),
    };
    if !metadata.is_file() {
        return Lookup::Ignored(format!("{} is not a plain file", path.display()));
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        return Lookup::Ignored(format!(
            "{} has group or world access; permissions should be u=rw (0600) or less",
            path.display()
        ));
    }
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return Lookup::Ignored(format!("{}: {e}", path.display())),
    };
    let host = if host.is_empty() || host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    let port = port.to_string();
    let wanted = [host, port.as_str(), dbname, user];
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(fields)
        .find(|fields| {
            fields[..4]
                .iter()
                .zip(wanted)
                .all(|(field, want)| field == "*" || field == want)
        })
        .map_or(Lookup::NotFound, |mut fields| {
            Lookup::Found(fields.swap_remove(4))
        })
}

/// A line's five fields, unescaped; `None` for a line with fewer.
fn fields(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.trim_end_matches('\r').chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut()?.extend(chars.next()),
            // The password is everything after the fourth separator.
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str, mode: u32) -> std::path::PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "pgoutput-pgpass-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn first_matching_line_wins_with_wildcards_and_escapes() {
        let path = file(
            "# comment\n\
             db.example:5432:app:other:nope\n\
             db.example:*:app:repl:s\\:e\\\\cret:with:colons\n\
             *:*:*:*:fallback\n",
            0o600,
        );
        assert_eq!(
            lookup(&path, "db.example", 6000, "app", "repl"),
            Lookup::Found("s:e\\cret:with:colons".into())
        );
        assert_eq!(
            lookup(&path, "elsewhere", 5432, "x", "y"),
            Lookup::Found("fallback".into())
        );
        let path = file("localhost:5432:app:repl:local\n", 0o600);
        assert_eq!(
            lookup(&path, "/var/run/postgresql", 5432, "app", "repl"),
            Lookup::Found("local".into())
        );
        assert_eq!(
            lookup(&path, "db.example", 5432, "app", "repl"),
            Lookup::NotFound
        );
        fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_file_others_can_read_is_ignored_and_a_missing_one_is_nothing() {
        let path = file("*:*:*:*:secret\n", 0o644);
        assert!(matches!(
            lookup(&path, "h", 5432, "d", "u"),
            Lookup::Ignored(why) if why.contains("group or world access")
        ));
        fs::remove_file(&path).unwrap();
        assert_eq!(lookup(&path, "h", 5432, "d", "u"), Lookup::NotFound);
    }
}
