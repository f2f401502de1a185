//! The ErrorResponse a server or the proxy sends in PostgreSQL's words: its SQLSTATE (named as
//! PostgreSQL's `errcodes.txt` names them, so that every code has one home), message and detail.

use std::borrow::Cow;

pub use super::sqlstate;

/// An error the server reports to a client: its SQLSTATE and message, worded as
/// PostgreSQL words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// The SQLSTATE (one of [`sqlstate`]'s, or a fault rule's own).
    pub code: Cow<'static, str>,
    pub message: String,
    /// The DETAIL field, where PostgreSQL sends one.
    pub detail: Option<String>,
    /// The HINT field, where PostgreSQL sends one.
    pub hint: Option<String>,
}

/// An [`SqlError`] with `code` and `message`.
pub fn error(code: &'static str, message: impl Into<String>) -> SqlError {
    SqlError {
        code: Cow::Borrowed(code),
        message: message.into(),
        detail: None,
        hint: None,
    }
}

impl SqlError {
    /// The error with a DETAIL field.
    pub fn with_detail(mut self, detail: impl Into<String>) -> SqlError {
        self.detail = Some(detail.into());
        self
    }

    /// The error with a HINT field.
    pub fn with_hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }
}

/// A setting's name as PostgreSQL's messages spell it: in quotes from 17 on.
pub fn setting_name(name: &str, major: u32) -> String {
    if major >= 17 {
        format!("\"{name}\"")
    } else {
        name.to_owned()
    }
}

/// The FATAL for a client past the server's connection limit.
pub fn too_many_clients() -> SqlError {
    error(
        sqlstate::TOO_MANY_CONNECTIONS,
        "sorry, too many clients already",
    )
}

/// The FATAL for a client that asked for an encryption it had already been answered
/// about (`ProcessStartupPacket` then reads the request code as a protocol version it
/// does not support); servers before 18 support 3.0 only, 18 up to 3.2.
pub fn unsupported_protocol(code: u32, major: u32) -> SqlError {
    error(
        sqlstate::FEATURE_NOT_SUPPORTED,
        format!(
            "unsupported frontend protocol {}.{}: server supports 3.0 to 3.{}",
            code >> 16,
            code & 0xFFFF,
            if major >= 18 { 2 } else { 0 }
        ),
    )
}

/// The FATAL for a client that `pg_hba.conf` has no line for; PostgreSQL's own words for
/// a server whose lines all say `hostssl`, to a client that came without encryption.
pub fn no_hba_entry(host: &str, user: &str, database: Option<&str>) -> SqlError {
    let message = match database {
        Some(database) => format!(
            "no pg_hba.conf entry for host \"{host}\", user \"{user}\", database \"{database}\", no encryption"
        ),
        None => format!(
            "no pg_hba.conf entry for replication connection from host \"{host}\", user \"{user}\", no encryption"
        ),
    };
    error(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, message)
}

/// The ERROR for a slot there is none of: 42704 (`ReplicationSlotAcquire`, and every
/// command that names a slot).
pub fn slot_missing(slot: &str) -> SqlError {
    error(
        sqlstate::UNDEFINED_OBJECT,
        format!("replication slot \"{slot}\" does not exist"),
    )
}

/// The ERROR for a slot the walsender of process `pid` holds (`ReplicationSlotAcquire`).
pub fn slot_in_use(slot: &str, pid: usize) -> SqlError {
    error(
        sqlstate::OBJECT_IN_USE,
        format!("replication slot \"{slot}\" is active for PID {pid}"),
    )
}

/// The ERROR for an invalidated slot at START_REPLICATION, worded as the server's major
/// version words it (`StartLogicalReplication` before 18, `ReplicationSlotAcquire` from
/// 18 on; checked against both by a test that invalidates a real slot).
pub fn slot_invalidated(slot: &str, major: u32) -> SqlError {
    if major >= 18 {
        error(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("can no longer access replication slot \"{slot}\""),
        )
        .with_detail("This replication slot has been invalidated due to \"wal_removed\".")
    } else {
        error(
            sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("cannot read from logical replication slot \"{slot}\""),
        )
        .with_detail(
            "This slot has been invalidated because it exceeded the maximum reserved size.",
        )
    }
}
