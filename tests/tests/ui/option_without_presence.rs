use pgoutput_codec::{Decode, Encode, Lsn, Xid};

#[derive(Decode, Encode)]
#[codec(tag = b'Q')]
struct Query {
    lsn: Lsn,
    xid: Option<Xid>,
}

fn main() {}
