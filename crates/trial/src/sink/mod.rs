//! What a consumer applied, as the trial reads it: a JSON-lines file it appends one line
//! to per applied row change ([`lines`]), or the tables of a PostgreSQL database it writes
//! the rows to ([`database`]: a subscriber's, say).

pub mod database;
pub mod lines;

pub use database::Database;
pub use lines::{read, Applied, Sink, SinkError};
