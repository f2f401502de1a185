//! The wire's value types: positions, identifiers, times and strings.

mod ids;
mod lsn;
mod pg_bytes;
mod pg_str;
mod seq;
mod timestamp;

pub use ids::{Oid, Xid};
pub use lsn::{Lsn, LsnParseError};
pub use pg_bytes::PgBytes;
pub use pg_str::PgStr;
pub use seq::{Iter as SeqIter, ReadParts, Seq, WriteParts};
pub use timestamp::{PgTimestamp, TimestampError};
