use pgoutput_codec::{Decode, Encode, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Abort {
    xid: Xid,
    #[since(version = 4, when = "parallel")]
    abort_xid: Xid,
}

fn main() {}
