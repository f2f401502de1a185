use pgoutput_codec::{Decode, Encode, PgBytes};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Short<'a> {
    #[codec(len = i16)]
    data: PgBytes<'a>,
}

fn main() {}
