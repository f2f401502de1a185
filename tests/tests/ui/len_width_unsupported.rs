use pgoutput_codec::{Decode, Encode, PgBytes};

#[derive(Decode, Encode)]
#[codec(tag = b'Z')]
struct Short<'a> {
    #[codec(len = u64)]
    data: PgBytes<'a>,
}

fn main() {}
