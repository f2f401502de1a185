use pgoutput_codec::{Decode, Encode, Lsn, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Q')]
struct Query {
    xid: Xid,
    #[since(version = 2, when = "parallel")]
    abort_lsn: Option<Lsn>,
}

fn main() {}
