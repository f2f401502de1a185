use pgoutput_codec::{Decode, Encode, Lsn, PgOutputMessage, Tagged};

/// A user message that reuses pgoutput's 'M' (Message) by mistake.
#[derive(Debug, Decode, Encode, Tagged)]
#[codec(tag = b'M')]
struct Marker {
    lsn: Lsn,
}

#[derive(Debug, Decode, Encode, Tagged)]
enum Extended<'a> {
    PgOutput(PgOutputMessage<'a>),
    Marker(Marker),
}

fn main() {}
