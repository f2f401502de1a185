//! What a rule does. Each action has a file of its own that says what it asks of the
//! connection it fires on (an [`Effect`]) and what makes it unworkable; the test server
//! and the proxy carry the effects out on their own sockets, and neither decides what an
//! action means; its file also has its line of the command line's help. Adding an action
//! is its file, its variant and its lines below.

mod close;
mod crash;
mod error;
mod inject;
mod request_reply;
mod reset;
mod shutdown;
mod slow;
mod stall;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::FaultError;
#[cfg(any(feature = "server", test))]
use crate::judge::Ending;
use pgoutput_codec::{Ctx, IntoOwned, Lsn, PgOutputMessage, Xid};
use pgoutput_wire::error::SqlError;

pub(crate) use shutdown::{Shutdown, ShutdownStep};
pub(crate) use slow::Pace;

/// What goes wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Action {
    /// Close the connection (FIN), with nothing more sent.
    Close,
    /// Reset the connection (RST).
    Reset,
    /// Stop writing and reading, the socket left open (a half-dead peer): for `ms`
    /// milliseconds, or for good.
    Stall {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<u64>,
    },
    /// Send an ErrorResponse with SQLSTATE `code`: FATAL for the 57P0x codes, then the
    /// connection closes; ERROR otherwise, then ReadyForQuery, as a walsender goes back
    /// to its command loop. The message defaults to PostgreSQL's wording for 57P01,
    /// 55000, 55006, 53100 and XX000; other codes need one.
    Error {
        code: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// PostgreSQL's shutdown of a walsender (`WalSndDone`): what is left is sent, then
    /// keepalives asking for a reply until the client's flush position reaches what was
    /// sent, then CommandComplete and the connection closes. A client that never
    /// confirms holds it (until `wal_sender_timeout`), as in PostgreSQL.
    Shutdown,
    /// A keepalive asking for a reply, now.
    RequestReply,
    /// From now on, delay each message by `delay_ms`, or send at most `bytes_per_second`.
    Slow {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delay_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes_per_second: Option<u64>,
    },
    /// A server crash: every connection is dropped and every slot goes back to the
    /// position its last checkpoint persisted, so transactions a consumer confirmed since
    /// are sent again.
    Crash,
    /// Send this pgoutput message (in the JSON form `pgoutput decode` prints) at the
    /// rule's point, in an XLogData at the position of the message the rule fired at (for
    /// a `time` or `flush` rule, the last one sent): a message
    /// kind the consumer does not expect, a Relation again, a stray Stream Abort. Before
    /// or after a message, not at a byte of it.
    Inject {
        /// Boxed: the rules' other actions stay small.
        message: Box<PgOutputMessage<'static>>,
    },
}

impl Action {
    /// Each action's JSON and what it does, a line each (continued lines indented): the
    /// `then` part of `pgoutput serve --help`.
    #[must_use]
    pub fn help() -> String {
        [
            close::HELP,
            reset::HELP,
            stall::HELP,
            error::HELP,
            shutdown::HELP,
            request_reply::HELP,
            slow::HELP,
            crash::HELP,
            inject::HELP,
        ]
        .join("\n")
    }

    /// An ErrorResponse with SQLSTATE `code` in PostgreSQL's words (see
    /// [`Action::Error`] for the codes it knows).
    #[must_use]
    pub fn error(code: &str) -> Action {
        Action::Error {
            code: code.to_owned(),
            message: None,
        }
    }

    /// An `inject` of `message` (see [`Action::Inject`]).
    #[must_use]
    pub fn inject(message: PgOutputMessage<'_>) -> Action {
        Action::Inject {
            message: Box::new(message.into_owned()),
        }
    }

    /// What the action asks of the connection it fired on.
    pub(crate) fn effect(&self, on: &Context<'_>) -> Effect {
        match self {
            Action::Close => close::effect(),
            Action::Reset => reset::effect(),
            Action::Stall { ms } => stall::effect(*ms),
            Action::Error { code, message } => error::effect(code, message.as_deref(), on),
            Action::Shutdown => shutdown::effect(),
            Action::RequestReply => request_reply::effect(),
            Action::Slow {
                delay_ms,
                bytes_per_second,
            } => slow::effect(*delay_ms, *bytes_per_second),
            Action::Crash => crash::effect(),
            Action::Inject { message } => inject::effect(message, on),
        }
    }

    /// Whether the action's own fields can work.
    pub(crate) fn check(&self) -> Result<(), FaultError> {
        match self {
            Action::Error { code, message } => error::check(code, message.as_deref()),
            Action::Slow {
                delay_ms,
                bytes_per_second,
            } => slow::check(*delay_ms, *bytes_per_second),
            Action::Inject { message } => inject::check(message),
            Action::Close
            | Action::Reset
            | Action::Stall { .. }
            | Action::Shutdown
            | Action::RequestReply
            | Action::Crash => Ok(()),
        }
    }

    /// What the action asks of a connection just accepted, before anything is read
    /// (a `connect` rule): `None` when it needs a streaming connection.
    pub(crate) fn on_connect(&self, major: u32) -> Option<OnConnect> {
        // No slot is known yet, no transaction and no protocol.
        match self.effect(&Context::none(major)) {
            Effect::End(how) => Some(OnConnect::End(how)),
            Effect::Pause(how_long) => Some(OnConnect::Pause(how_long)),
            // Before the start-up packet every error is FATAL.
            Effect::Error { error, .. } => Some(OnConnect::Fatal(error)),
            Effect::RequestReply | Effect::Send(_) | Effect::Pace(_) | Effect::Shutdown => None,
        }
    }

    /// Whether the action sends a message of its own into the stream, which can go
    /// between frames only.
    pub(crate) fn sends(&self) -> bool {
        matches!(
            self.effect(&Context::none(0)),
            Effect::RequestReply | Effect::Send(_)
        )
    }
}

/// What an action's effect depends on: the connection's slot, the server's major version
/// and the transaction under way (for PostgreSQL's wording of an error); the stream's
/// pgoutput context at this point (none where its options are not known) and the
/// position of the message at this point (for a message of the rule's own).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub slot: &'a str,
    pub major: u32,
    pub xid: Xid,
    pub ctx: Option<Ctx>,
    pub position: Lsn,
}

impl Context<'_> {
    /// A connection of a server of `major` with no stream yet: no slot, no transaction,
    /// no protocol.
    pub(crate) fn none(major: u32) -> Context<'static> {
        Context {
            slot: "",
            major,
            xid: Xid(0),
            ctx: None,
            position: Lsn(0),
        }
    }
}

/// What an action asks of a streaming connection, once what comes before the rule's
/// point has been written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    /// The connection ends, nothing more sent.
    End(End),
    /// Neither write nor read, for this long or for good (a half-dead peer).
    Pause(Option<Duration>),
    /// This ErrorResponse: FATAL, then the connection closes; or ERROR, then
    /// ReadyForQuery, as a walsender goes back to its command loop.
    Error { error: SqlError, fatal: bool },
    /// A keepalive asking for a reply.
    RequestReply,
    /// These bytes (whole CopyData messages), written where the rule fired.
    Send(Vec<u8>),
    /// Every message from now on paced so.
    Pace(Pace),
    /// PostgreSQL's walsender shutdown: the transaction under way finished, then
    /// keepalives until the client confirmed what it was sent, then CommandComplete.
    Shutdown,
}

impl Effect {
    /// How the judge hears that the connection ended, when this ends it.
    #[cfg(any(feature = "server", test))]
    pub(crate) fn ending(&self) -> Option<Ending> {
        match self {
            Effect::End(End::Crash) => Some(Ending::Crash),
            Effect::End(End::Fin | End::Rst) | Effect::Error { .. } => Some(Ending::Fault),
            Effect::Pause(_)
            | Effect::RequestReply
            | Effect::Send(_)
            | Effect::Pace(_)
            | Effect::Shutdown => None,
        }
    }
}

/// How a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// A close (FIN).
    Fin,
    /// A reset (RST).
    Rst,
    /// The whole server crashes: every connection is cut, and every slot goes back to its
    /// persisted position.
    Crash,
}

/// What an action asks of a connection just accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OnConnect {
    End(End),
    Pause(Option<Duration>),
    /// This FATAL ErrorResponse, then a close.
    Fatal(SqlError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_needs_no_stream_works_on_connect() {
        let works: Vec<bool> = [
            Action::Close,
            Action::Reset,
            Action::Stall { ms: Some(1) },
            Action::error("57P01"),
            Action::Crash,
            Action::Shutdown,
            Action::RequestReply,
            Action::Slow {
                delay_ms: Some(1),
                bytes_per_second: None,
            },
        ]
        .iter()
        .map(|action| action.on_connect(15).is_some())
        .collect();
        assert_eq!(works, [true, true, true, true, true, false, false, false]);
        // Any error is FATAL before the start-up packet.
        assert!(matches!(
            Action::error("XX000").on_connect(15),
            Some(OnConnect::Fatal(_))
        ));
    }

    #[test]
    fn every_action_has_its_line_in_the_help() {
        let help = Action::help();
        let every = [
            Action::Close,
            Action::Reset,
            Action::Stall { ms: None },
            Action::error("57P01"),
            Action::Shutdown,
            Action::RequestReply,
            Action::Slow {
                delay_ms: Some(1),
                bytes_per_second: None,
            },
            Action::Crash,
            Action::inject(PgOutputMessage::StreamStop(pgoutput_codec::StreamStop)),
        ];
        for action in every {
            let json = serde_json::to_value(&action).unwrap();
            let name = json["do"].as_str().unwrap();
            assert!(
                help.contains(&format!("{{\"do\": \"{name}\"")),
                "{name}: {help}"
            );
        }
        // Each line a rule's JSON, or the rest of the one before (indented).
        for line in help.lines() {
            assert!(
                line.starts_with("{\"do\": ") || line.starts_with("    "),
                "{line}"
            );
        }
    }

    #[test]
    fn what_ends_a_connection_is_told_to_the_judge() {
        let on = Context {
            slot: "s",
            major: 15,
            xid: Xid(7),
            ctx: None,
            position: Lsn(0),
        };
        let ending = |action: Action| action.effect(&on).ending();
        assert_eq!(ending(Action::Crash), Some(Ending::Crash));
        assert_eq!(ending(Action::Reset), Some(Ending::Fault));
        assert_eq!(ending(Action::error("55006")), Some(Ending::Fault));
        assert_eq!(ending(Action::RequestReply), None);
    }
}
