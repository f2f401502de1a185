//! The ErrorResponse a server or the proxy sends in PostgreSQL's words: its SQLSTATE (named as
//! PostgreSQL's `errcodes.txt` names them, so that every code has one home), message and detail.

use std::borrow::Cow;

/// An error the server reports to a client: its SQLSTATE and message, worded as
/// PostgreSQL words it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqlError {
    /// The SQLSTATE (one of [`sqlstate`]'s, or a fault rule's own).
    pub code: Cow<'static, str>,
    pub message: String,
    /// The DETAIL field, where PostgreSQL sends one.
    pub detail: Option<String>,
    /// The HINT field, where PostgreSQL sends one.
    pub hint: Option<String>,
}

/// An [`SqlError`] with `code` and `message`.
pub(crate) fn error(code: &'static str, message: impl Into<String>) -> SqlError {
    SqlError {
        code: Cow::Borrowed(code),
        message: message.into(),
        detail: None,
        hint: None,
    }
}

impl SqlError {
    /// The error with a DETAIL field.
    pub(crate) fn with_detail(mut self, detail: impl Into<String>) -> SqlError {
        self.detail = Some(detail.into());
        self
    }

    /// The error with a HINT field.
    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }
}

/// SQLSTATEs, by PostgreSQL's names for them (`src/backend/utils/errcodes.txt`).
/// The ERROR for a slot the walsender of process `pid` holds (`ReplicationSlotAcquire`).
pub(crate) fn slot_in_use(slot: &str, pid: usize) -> SqlError {
    error(
        sqlstate::OBJECT_IN_USE,
        format!("replication slot \"{slot}\" is active for PID {pid}"),
    )
}

/// The ERROR for an invalidated slot at START_REPLICATION, worded as the server's major
/// version words it (`StartLogicalReplication` before 18, `ReplicationSlotAcquire` from
/// 18 on; checked against both by a test that invalidates a real slot).
pub(crate) fn slot_invalidated(slot: &str, major: u32) -> SqlError {
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

pub(crate) mod sqlstate {
    pub const CONNECTION_FAILURE: &str = "08006";
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
    pub const INVALID_PARAMETER_VALUE: &str = "22023";
    pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
    pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_CATALOG_NAME: &str = "3D000";
    pub const SYNTAX_ERROR: &str = "42601";
    pub const INVALID_NAME: &str = "42602";
    pub const NAME_TOO_LONG: &str = "42622";
    pub const UNDEFINED_OBJECT: &str = "42704";
    pub const DUPLICATE_OBJECT: &str = "42710";
    pub const UNDEFINED_TABLE: &str = "42P01";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const DISK_FULL: &str = "53100";
    pub const CONFIGURATION_LIMIT_EXCEEDED: &str = "53400";
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: &str = "55000";
    pub const OBJECT_IN_USE: &str = "55006";
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const UNDEFINED_FILE: &str = "58P01";
    pub const INTERNAL_ERROR: &str = "XX000";
}
