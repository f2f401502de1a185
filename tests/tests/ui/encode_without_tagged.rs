use pgoutput_codec::{Decode, Encode, Lsn, PgOutputMessage, Tagged};

/// A user message that derives Decode and Encode but forgot Tagged.
#[derive(Debug, Decode, Encode)]
#[codec(tag = b'Z')]
struct Forgot {
    lsn: Lsn,
}

/// Dispatch needs each variant's tag.
#[derive(Debug, Decode, Encode, Tagged)]
enum Extended<'a> {
    PgOutput(PgOutputMessage<'a>),
    Forgot(Forgot),
}

fn main() {}
