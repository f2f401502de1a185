use pgoutput_codec::{Decode, Encode, Oid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Counted {
    #[codec(count = u16)]
    oid: Oid,
}

fn main() {}
