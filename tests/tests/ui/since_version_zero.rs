use pgoutput_codec::{Decode, Encode, Lsn};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Past {
    #[since(version = 0, when = "streamed")]
    lsn: Option<Lsn>,
}

fn main() {}
