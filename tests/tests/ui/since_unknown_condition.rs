use pgoutput_codec::{Decode, Encode, Lsn};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Abort {
    #[since(version = 4, when = "paralel")]
    abort_lsn: Option<Lsn>,
}

fn main() {}
