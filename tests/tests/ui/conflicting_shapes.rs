use pgoutput_codec::{Decode, Encode, PgBytes};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Framed<'a> {
    #[codec(len = i32, rest)]
    data: PgBytes<'a>,
}

fn main() {}
