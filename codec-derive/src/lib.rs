//! Derive macros for [`pgoutput-codec`](https://docs.rs/pgoutput-codec): `#[derive(Decode,
//! Encode)]` generates both directions of a pgoutput message from an annotated struct or
//! tagged enum. Use them through the runtime crate, which re-exports them.
//!
//! The macro is split like serde_derive: `attr` parses the attributes, `ast` holds the
//! parsed input, `check` applies the rules that span several attributes, and `expand`
//! generates code. Every problem is reported, with the span of what to fix, in one go.
//!
//! One derive per trait (`Decode`, `Encode`, `IntoOwned`, `Tagged`); the attributes are
//! documented, with an example each, in the runtime crate's `docs::attributes` module.
//! Code generation for fields lives in `expand/shape.rs`: each wire shape and each layer
//! around one (`#[since]`, `optional`, `marker`, `expect`) reads, writes, measures and
//! sizes itself in one place.

#![forbid(unsafe_code)]

mod ast;
mod attr;
mod check;
mod expand;

use proc_macro::TokenStream;
use syn::{parse_macro_input, DeriveInput};

/// Derives `pgoutput_codec::Decode`. See the runtime crate's `attributes` documentation.
#[proc_macro_derive(Decode, attributes(codec, since))]
pub fn derive_decode(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand_with(&input, expand::derive_decode, expand::Trait::Decode).into()
}

/// Derives `pgoutput_codec::Encode`. See the runtime crate's `attributes` documentation.
#[proc_macro_derive(Encode, attributes(codec, since))]
pub fn derive_encode(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand_with(&input, expand::derive_encode, expand::Trait::Encode).into()
}

/// Derives `pgoutput_codec::Tagged` for a type with `#[codec(tag = …)]` or a dispatch
/// enum, which the session `Decoder` and `Encoder` need.
#[proc_macro_derive(Tagged, attributes(codec, since))]
pub fn derive_tagged(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand_with(&input, expand::derive_tagged, expand::Trait::Tagged).into()
}

/// Derives `pgoutput_codec::IntoOwned`: `Type<'a>` to `Type<'static>`, field by field.
#[proc_macro_derive(IntoOwned, attributes(codec, since))]
pub fn derive_into_owned(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand_with(&input, expand::derive_into_owned, expand::Trait::IntoOwned).into()
}

/// Parse, validate, then generate; any error stops before generation.
fn expand_with(
    input: &DeriveInput,
    generate: fn(&ast::Container<'_>) -> proc_macro2::TokenStream,
    implemented: expand::Trait,
) -> proc_macro2::TokenStream {
    let mut errors = attr::Errors::default();
    let container = ast::Container::from_ast(input, &mut errors);
    if let Some(container) = &container {
        check::check(container, &mut errors);
    }
    match (errors.finish(), container) {
        (Ok(()), Some(container)) => expand::with_crate_path(&container, || generate(&container)),
        // thiserror's way: with the errors, a stand-in impl, so that code using the type
        // does not add an error of its own for each use ("Decode is not implemented").
        (Err(errors), container) => {
            let mut out = errors;
            if let Some(container) = &container {
                out.extend(expand::with_crate_path(container, || {
                    expand::fallback(container, implemented)
                }));
            }
            out
        }
        (Ok(()), None) => unreachable!("from_ast reports why it returned None"),
    }
}

#[cfg(test)]
mod tests;
