//! The derives' output must compile anywhere: without the prelude, next to user items that
//! shadow primitive and prelude names, and with fields named like the macro's internals.

mod hostile_scope {
    #![no_implicit_prelude]
    #![allow(non_camel_case_types, dead_code)]

    // Shadow what generated code might name without a path.
    pub struct u8;
    pub struct usize;
    pub struct str;
    pub struct Result;
    pub struct Option;
    pub struct Ok;
    pub struct Err;
    pub struct Some;
    pub struct None;
    pub struct Vec;
    pub struct From;
    pub struct AsRef;
    pub struct Decode;
    pub struct Encode;
    pub const EXPECTED: () = ();
    pub fn r() {}
    pub fn w() {}
    pub fn ctx() {}
    pub fn field() {}

    use ::pgoutput_codec::{Lsn, PgBytes, PgStr, Xid};

    /// Fields named like every local the generated code uses.
    #[derive(
        ::pgoutput_codec::Decode,
        ::pgoutput_codec::Encode,
        ::pgoutput_codec::IntoOwned,
        ::pgoutput_codec::Tagged,
        ::core::fmt::Debug,
        ::core::cmp::PartialEq,
        ::core::clone::Clone,
    )]
    #[codec(tag = b'H')]
    pub struct Tricky<'a> {
        pub r: ::core::primitive::u8,
        pub w: ::core::primitive::u16,
        pub ctx: Xid,
        pub tag: ::core::primitive::u32,
        pub at: ::core::primitive::i64,
        pub value: PgStr<'a>,
        pub f0: Lsn,
        #[since(version = 2, when = "streamed")]
        pub xid: ::core::option::Option<Xid>,
        #[codec(len = i32)]
        pub content: PgBytes<'a>,
    }

    /// Variants named like prelude items and the IntoOwned associated type.
    #[derive(
        ::pgoutput_codec::Decode,
        ::pgoutput_codec::Encode,
        ::pgoutput_codec::IntoOwned,
        ::pgoutput_codec::Tagged,
        ::core::fmt::Debug,
        ::core::cmp::PartialEq,
        ::core::clone::Clone,
    )]
    pub enum Union<'a> {
        #[codec(tag = b'o')]
        Owned,
        #[codec(tag = b's')]
        Some(::core::primitive::u8),
        #[codec(tag = b'e')]
        Err {
            f0: PgStr<'a>,
            value: ::core::primitive::u8,
        },
        Tricky(Tricky<'a>),
    }
}

use hostile_scope::{Tricky, Union};
use pgoutput_codec::{decode, encode, IntoOwned, Lsn, ProtocolVersion, Streaming, Xid};

#[test]
fn derived_code_is_hygienic() {
    let ctx = pgoutput_codec::Ctx::new(ProtocolVersion::V2, Streaming::On)
        .unwrap()
        .with_in_stream(true)
        .unwrap();
    let tricky = Tricky {
        r: 1,
        w: 2,
        ctx: Xid(3),
        tag: 4,
        at: -5,
        value: "six".into(),
        f0: Lsn(7),
        xid: Some(Xid(8)),
        content: b"nine".into(),
    };
    for value in [
        Union::Owned,
        Union::Some(9),
        Union::Err {
            f0: "x".into(),
            value: 1,
        },
        Union::Tricky(tricky),
    ] {
        let bytes = encode(&value, ctx).unwrap();
        assert_eq!(decode::<Union<'_>>(&bytes, ctx).unwrap(), value);
        let owned: Union<'static> = value.clone().into_owned();
        assert_eq!(owned, value);
    }
    let bytes = encode(&Union::Some(9), ctx).unwrap();
    assert_eq!(bytes, b"s\x09");
}
