use pgoutput_codec::{Decode, Encode, Lsn};

/// Decodes, but nobody wrote its Encode.
#[derive(Decode)]
#[codec(tag = b'N')]
struct Inner {
    lsn: Lsn,
}

#[derive(Decode, Encode)]
#[codec(tag = b'O')]
struct Outer {
    inner: Inner,
}

fn main() {}
