use pgoutput_codec::{Decode, Encode, Oid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Counted {
    options: u8,
    #[codec(count = u32, count_before = optoins)]
    oids: Vec<Oid>,
}

fn main() {}
