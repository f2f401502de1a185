use pgoutput_codec::{Decode, Encode, Lsn};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Flagged {
    #[codec(expect = 0)]
    lsn: Lsn,
}

fn main() {}
