use pgoutput_codec::{Decode, Encode, Oid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Counted {
    options: u8,
    #[codec(count_before = options)]
    oids: Vec<Oid>,
}

fn main() {}
