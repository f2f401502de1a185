use pgoutput_codec::{Decode, Encode, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z', tag = b'Y')]
struct Twice {
    #[since(version = 2, version = 3)]
    xid: Option<Xid>,
}

fn main() {}
