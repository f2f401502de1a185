use pgoutput_codec::{Decode, Encode, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Streamed {
    #[since(version = 2, unless = "streamed")]
    xid: Option<Xid>,
}

fn main() {}
