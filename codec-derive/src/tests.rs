//! Expansion snapshots: the generated code for each attribute form, formatted by rustfmt.
//! A change to the generated code shows up as a snapshot diff to review.

use std::io::Write;
use std::process::{Command, Stdio};

use syn::{parse_quote, DeriveInput};

use crate::expand_with;

/// The derives' output for `input` (Decode, Encode, IntoOwned, and Tagged for a tagged
/// type), as rustfmt prints it.
fn expand(input: DeriveInput) -> String {
    let mut code = expand_with(
        &input,
        crate::expand::derive_decode,
        crate::expand::Trait::Decode,
    );
    code.extend(expand_with(
        &input,
        crate::expand::derive_encode,
        crate::expand::Trait::Encode,
    ));
    code.extend(expand_with(
        &input,
        crate::expand::derive_into_owned,
        crate::expand::Trait::IntoOwned,
    ));
    let tagged = input.attrs.iter().any(|a| a.path().is_ident("codec"))
        || matches!(input.data, syn::Data::Enum(_));
    if tagged {
        code.extend(expand_with(
            &input,
            crate::expand::derive_tagged,
            crate::expand::Trait::Tagged,
        ));
    }
    rustfmt(&code.to_string())
}

fn rustfmt(code: &str) -> String {
    let mut child = Command::new(std::env::var("RUSTFMT").unwrap_or_else(|_| "rustfmt".into()))
        .args(["--edition", "2021", "--emit", "stdout"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rustfmt runs (it comes with the Rust toolchain)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(code.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "rustfmt failed on the expansion:\n{}\n{code}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn tagged_struct_with_borrowed_fields() {
    insta::assert_snapshot!(expand(parse_quote! {
        #[codec(tag = b'M')]
        pub struct Message<'a> {
            pub flags: MessageFlags,
            pub lsn: Lsn,
            pub prefix: PgStr<'a>,
            #[codec(len = i32)]
            pub content: PgBytes<'a>,
        }
    }));
}

#[test]
fn transaction_role_and_xids() {
    insta::assert_snapshot!(expand(parse_quote! {
        #[codec(tag = b'A', stream = "outside", role = "abort")]
        pub struct StreamAbort {
            #[codec(xid)]
            pub xid: Xid,
            #[codec(subxid)]
            pub subtransaction_xid: Xid,
        }
    }));
}

#[test]
fn since_with_conditions() {
    insta::assert_snapshot!(expand(parse_quote! {
        #[codec(tag = b'A')]
        pub struct StreamAbort {
            pub xid: Xid,
            #[since(version = 2, when = "streamed")]
            pub in_block: Option<Xid>,
            #[since(version = 3)]
            pub from_v3: Option<u32>,
            #[since(version = 4, when = "parallel")]
            pub abort_lsn: Option<Lsn>,
        }
    }));
}

#[test]
fn untagged_part_and_newtype() {
    insta::assert_snapshot!(expand(parse_quote! {
        pub struct Column(pub Oid);
    }));
}

#[test]
fn tagged_enum_variants() {
    insta::assert_snapshot!(expand(parse_quote! {
        pub enum TupleColumn<'a> {
            #[codec(tag = b'n')]
            Null,
            #[codec(tag = b't')]
            Text(#[codec(len = i32)] Cow<'a, [u8]>),
            #[codec(tag = b'x')]
            Pair { left: u8, right: PgStr<'a> },
        }
    }));
}

#[test]
fn dispatch_enum_over_tagged_messages() {
    insta::assert_snapshot!(expand(parse_quote! {
        pub enum PgOutputMessage<'a> {
            Message(Message<'a>),
            StreamAbort(StreamAbort),
        }
    }));
}

#[test]
fn types_print_as_written() {
    let ty: syn::Type = parse_quote!(Cow<'a, [u8]>);
    assert_eq!(crate::ast::type_string(&ty), "Cow<'a, [u8]>");
    let ty: syn::Type = parse_quote!(&'a [u8]);
    assert_eq!(crate::ast::type_string(&ty), "&'a [u8]");
    let ty: syn::Type = parse_quote!(Option<PgStr<'a>>);
    assert_eq!(crate::ast::type_string(&ty), "Option<PgStr<'a>>");
}

#[test]
fn counted_parts_markers_and_optional_parts() {
    insta::assert_snapshot!(expand(parse_quote! {
        #[codec(tag = b'U')]
        pub struct Update<'a> {
            pub relation_oid: Oid,
            #[codec(optional)]
            pub old_tuple: Option<OldTuple<'a>>,
            #[codec(marker = b'N')]
            pub new_tuple: TupleData<'a>,
            #[codec(count = u16)]
            pub columns: Vec<Column<'a>>,
        }
    }));
}

#[test]
fn count_placed_before_another_field_and_expected_values() {
    insta::assert_snapshot!(expand(parse_quote! {
        #[codec(tag = b'T')]
        pub struct Truncate {
            #[codec(expect = 0)]
            pub flags: u8,
            pub options: TruncateOptions,
            #[codec(count = u32, count_before = options)]
            pub relation_oids: Vec<Oid>,
        }
    }));
}

#[test]
fn rest_of_the_message() {
    insta::assert_snapshot!(expand(parse_quote! {
        #[codec(tag = b'w')]
        pub struct XLogData<'a> {
            pub wal_start: Lsn,
            #[codec(rest)]
            pub data: PgBytes<'a>,
        }
    }));
}
