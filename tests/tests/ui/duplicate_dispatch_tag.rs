use pgoutput_codec::{Decode, Encode, Lsn, Message};

/// A user message that reuses Message's tag by mistake.
#[derive(Debug, Decode, Encode)]
#[codec(tag = b'M')]
struct Marker {
    lsn: Lsn,
}

#[derive(Debug, Decode, Encode)]
enum Extended<'a> {
    Message(Message<'a>),
    Marker(Marker),
}

fn main() {}
