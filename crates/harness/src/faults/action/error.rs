//! `error`: an ErrorResponse with a SQLSTATE, in PostgreSQL's words for the errors a
//! walsender is known to send: FATAL for the 57P0x codes (an administrator's or the
//! postmaster's), then the connection closes; ERROR otherwise, then ReadyForQuery, as a
//! walsender goes back to its command loop.

use super::{Context, Effect, FaultError};
use pgoutput_wire::error::{error, slot_in_use, slot_invalidated, sqlstate, SqlError};

/// The command line's help: the rule's JSON and what it does.
pub(super) const HELP: &str = r#"{"do": "error", "code": "57P01"}   FATAL, PostgreSQL's wording; also 55000, 55006,
    53100, XX000 (ERROR, then ReadyForQuery); other codes need "message""#;

pub(super) fn check(code: &str, message: Option<&str>) -> Result<(), FaultError> {
    if code.len() != 5 || !code.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(FaultError(format!(
            "SQLSTATE {code:?} is not five letters or digits"
        )));
    }
    if message.is_none() && default_message(code).is_none() {
        return Err(FaultError(format!(
            "no default message for SQLSTATE {code} (there are for 57P01, 55000, 55006, 53100, XX000): give one"
        )));
    }
    Ok(())
}

pub(super) fn effect(code: &str, message: Option<&str>, on: &Context<'_>) -> Effect {
    Effect::Error {
        error: error_for(code, message, on.slot, on.major, on.xid.0),
        // 57P01-57P05: the backend ends (shut down, crashed, database dropped, …).
        fatal: code.starts_with("57P0"),
    }
}

/// Which default wording an [`super::Action::Error`] gets (`None`: a message must be given).
fn default_message(code: &str) -> Option<ErrorWording> {
    Some(match code {
        sqlstate::ADMIN_SHUTDOWN => ErrorWording::AdminShutdown,
        sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE => ErrorWording::SlotInvalidated,
        sqlstate::OBJECT_IN_USE => ErrorWording::SlotActive,
        sqlstate::DISK_FULL => ErrorWording::DiskFull,
        sqlstate::INTERNAL_ERROR => ErrorWording::Internal,
        _ => return None,
    })
}

/// PostgreSQL's wording for the errors a walsender is known to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorWording {
    /// `terminating connection due to administrator command` (FATAL, `ProcessInterrupts`).
    AdminShutdown,
    /// The invalidated slot's ERROR, as START_REPLICATION gets it
    /// (`StartLogicalReplication`, or from 18 on `ReplicationSlotAcquire`).
    SlotInvalidated,
    /// `replication slot "…" is active for PID …` (`ReplicationSlotAcquire`).
    SlotActive,
    /// The reorder buffer's spill file on a full disk (`ReorderBufferSerializeChange`).
    DiskFull,
    /// A decoding failure (`XLogSendLogical`).
    Internal,
}

/// An `error` action's ErrorResponse: the rule's message, or PostgreSQL's wording for
/// the known codes (about `slot`, in transaction `xid`).
fn error_for(code: &str, message: Option<&str>, slot: &str, major: u32, xid: u32) -> SqlError {
    let wording = match (message, default_message(code)) {
        (Some(message), _) => {
            return SqlError {
                code: code.to_owned().into(),
                message: message.to_owned(),
                detail: None,
                hint: None,
            }
        }
        (None, Some(wording)) => wording,
        // Refused when the rule is added.
        (None, None) => return error(sqlstate::INTERNAL_ERROR, format!("fault {code}")),
    };
    match wording {
        ErrorWording::AdminShutdown => error(
            sqlstate::ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        ),
        ErrorWording::SlotInvalidated => slot_invalidated(slot, major),
        // The process id of a walsender that is not one of ours.
        ErrorWording::SlotActive => slot_in_use(slot, 0),
        ErrorWording::DiskFull => error(
            sqlstate::DISK_FULL,
            format!("could not write to data file for XID {xid}: No space left on device"),
        ),
        ErrorWording::Internal => error(
            sqlstate::INTERNAL_ERROR,
            "could not find record while sending logically-decoded data: missing contrecord",
        ),
    }
}
