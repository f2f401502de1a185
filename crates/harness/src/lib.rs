//! A test harness for consumers of PostgreSQL's logical replication: a scripted test
//! walsender ([`server`]), a protocol-aware proxy in front of a real PostgreSQL
//! ([`proxy`]), fault rules at exact protocol events that both of them carry out
//! ([`faults`]), and the [`judge`] of what a consumer lost, confirmed too early or never
//! confirmed; and a throwaway PostgreSQL to put the proxy in front of ([`cluster`]).
//! Each type has one path: a fault rule is `faults::Fault` on either side, a finding
//! `judge::Finding`, the control API's handle [`Control`].
//!
//! # Cargo features
//!
//! - `server`: the [`server`] module, a test walsender that real replication clients and
//!   PostgreSQL subscribers accept, streaming a scripted pgoutput stream (blocking
//!   `std::net`, a thread per connection).
//! - `proxy`: the [`proxy`] module, in front of a real PostgreSQL (tokio, TLS on both
//!   legs); it does not need `server`.

#![forbid(unsafe_code)]
// The public API says what it returns and how it fails.
#![warn(
    clippy::must_use_candidate,
    clippy::return_self_not_must_use,
    clippy::missing_errors_doc
)]
// docs.rs: mark what each feature adds.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod cluster;
#[cfg(any(feature = "server", feature = "proxy"))]
mod confirmed;
#[cfg(any(feature = "server", feature = "proxy"))]
mod control;
#[cfg(any(feature = "server", feature = "proxy"))]
pub mod faults;
#[cfg(any(feature = "server", feature = "proxy"))]
pub mod judge;
#[cfg(any(feature = "server", feature = "proxy"))]
mod plugin_options;
#[cfg(feature = "proxy")]
#[cfg_attr(docsrs, doc(cfg(feature = "proxy")))]
pub mod proxy;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
pub mod server;
#[cfg(any(feature = "server", feature = "proxy"))]
mod slot_hold;

#[cfg(any(feature = "server", feature = "proxy"))]
pub use confirmed::Timeout;
#[cfg(any(feature = "server", feature = "proxy"))]
pub use control::Control;
