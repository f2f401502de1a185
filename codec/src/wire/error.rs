//! The ErrorResponse a server or the proxy sends in PostgreSQL's words: its SQLSTATE (named as
//! PostgreSQL's `errcodes.txt` names them, so that every code has one home), message and detail.

use std::borrow::Cow;

pub(crate) use super::sqlstate;

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

/// A setting's name as PostgreSQL's messages spell it: in quotes from 17 on.
pub(crate) fn setting_name(name: &str, major: u32) -> String {
    if major >= 17 {
        format!("\"{name}\"")
    } else {
        name.to_owned()
    }
}

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
