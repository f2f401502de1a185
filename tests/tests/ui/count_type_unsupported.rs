use pgoutput_codec::{Decode, Encode, Oid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Counted {
    #[codec(count = u64)]
    oids: Vec<Oid>,
}

fn main() {}
