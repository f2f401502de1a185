use pgoutput_codec::{Decode, Encode, Lsn, PgBytes};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Framed<'a> {
    #[codec(rest)]
    data: PgBytes<'a>,
    lsn: Lsn,
}

fn main() {}
