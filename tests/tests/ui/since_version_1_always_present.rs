use pgoutput_codec::{Decode, Encode, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Always {
    #[since(version = 1)]
    xid: Option<Xid>,
}

fn main() {}
