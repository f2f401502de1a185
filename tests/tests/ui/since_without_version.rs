use pgoutput_codec::{Decode, Encode, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Streamed {
    #[since(when = "streamed")]
    xid: Option<Xid>,
}

fn main() {}
