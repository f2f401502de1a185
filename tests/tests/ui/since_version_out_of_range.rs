use pgoutput_codec::{Decode, Encode, Lsn};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Future {
    #[since(version = 5)]
    lsn: Option<Lsn>,
}

fn main() {}
