use pgoutput_codec::{Decode, Encode, PgBytes};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Typo<'a> {
    #[codec(lenght = i32)]
    data: PgBytes<'a>,
}

fn main() {}
