//! The stream a test server sends: transactions and other WAL events, in order, built in
//! Rust ([`model`]) or read from JSON lines ([`json`]), with the positions, xids and times
//! a script leaves out filled in by the [`clock`].

mod check;
mod clock;
mod json;
mod model;

pub(crate) use clock::Clock;
pub use json::{ScriptError, MAX_LINE_LEN};
pub(crate) use model::relations_of;
pub use model::{End, Event, Script, Step, Transaction};
