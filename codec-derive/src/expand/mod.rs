//! Code generation. Each derive expands to `const _: () = { … };` holding `#[automatically_derived]`
//! impls that name everything by absolute path (`::core::…`, `::pgoutput_codec::…`), so the
//! output works in `#![no_implicit_prelude]` modules and cannot collide with user names.
//! The generated functions' own variables use mixed-site hygiene for the same reason.

pub mod decode;
pub mod encode;
pub mod owned;

use proc_macro2::{Ident, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, ToTokens};
use syn::{Lifetime, LitByte, Member};

use crate::ast::{Container, Data, Field};
use crate::attr::{Condition, Since};

/// The runtime crate, by absolute path.
fn krate() -> TokenStream {
    quote!(::pgoutput_codec)
}

/// A variable of the generated code, invisible to (and unaffected by) user code.
fn internal(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// A binding for `field` when matching an enum variant: `f0`, `f_xid`.
fn binding(field: &Field<'_>) -> Ident {
    match &field.member {
        Member::Named(ident) => format_ident!("f_{}", ident, span = Span::mixed_site()),
        Member::Unnamed(index) => format_ident!("f{}", index.index, span = Span::mixed_site()),
    }
}

/// A tag byte as a literal: `b'M'`.
fn tag_literal(byte: u8) -> LitByte {
    LitByte::new(byte, Span::call_site())
}

/// The lifetime the impls use for decoded input: the type's own, or a fresh one.
fn input_lifetime(container: &Container<'_>) -> Lifetime {
    container
        .lifetime()
        .cloned()
        .unwrap_or_else(|| Lifetime::new("'__input", Span::call_site()))
}

/// `tokens` with the container's lifetime replaced by `'static`, for use in `const` items,
/// which cannot name the impl's lifetime.
fn with_static_lifetime(tokens: impl ToTokens, container: &Container<'_>) -> TokenStream {
    let Some(lifetime) = container.lifetime() else {
        return tokens.into_token_stream();
    };
    fn replace(stream: TokenStream, name: &Ident) -> TokenStream {
        let mut out = Vec::new();
        let mut tokens = stream.into_iter().peekable();
        while let Some(token) = tokens.next() {
            match token {
                TokenTree::Punct(p) if p.as_char() == '\'' => match tokens.peek() {
                    Some(TokenTree::Ident(ident)) if ident == name => {
                        tokens.next();
                        out.extend(quote!('static));
                    }
                    _ => out.push(TokenTree::Punct(p)),
                },
                TokenTree::Group(group) => {
                    let mut new =
                        proc_macro2::Group::new(group.delimiter(), replace(group.stream(), name));
                    new.set_span(group.span());
                    out.push(TokenTree::Group(new));
                }
                other => out.push(other),
            }
        }
        out.into_iter().collect()
    }
    replace(tokens.into_token_stream(), &lifetime.ident)
}

/// A `#[since]` condition as a runtime check on the context, and in words for errors.
fn condition(since: &Since) -> (TokenStream, String) {
    let krate = krate();
    let ctx = internal("ctx");
    let mut checks = Vec::new();
    let mut words = Vec::new();
    if since.version > crate::attr::MIN_VERSION {
        let variant = format_ident!("V{}", since.version);
        checks.push(quote!(#ctx.version() >= #krate::ProtocolVersion::#variant));
        words.push(format!("protocol version is {} or higher", since.version));
    }
    match since.when {
        Some(Condition::Streamed) => {
            checks.push(quote!(#ctx.in_stream()));
            words.push("inside a Stream Start/Stop block".to_owned());
        }
        Some(Condition::Parallel) => {
            checks.push(quote!(#ctx.is_parallel()));
            words.push("streaming is parallel".to_owned());
        }
        None => {}
    }
    (quote!(#(#checks)&&*), words.join(" and "))
}

/// Where errors in a group of fields are reported: `Message`, `TupleColumn::Text`. `None`
/// for newtypes, which are transparent: their errors belong to the enclosing field.
fn error_scope(
    container: &Container<'_>,
    variant: Option<&Ident>,
    fields: &[Field<'_>],
) -> Option<String> {
    let name = container.name();
    match variant {
        Some(variant) => Some(format!("{name}::{variant}")),
        None if fields.len() == 1
            && matches!(fields[0].member, Member::Unnamed(_))
            && fields[0].since.is_none() =>
        {
            None
        }
        None => Some(name),
    }
}

/// Wraps the whole expansion so its items cannot leak names into the user's module.
fn wrap(items: TokenStream) -> TokenStream {
    quote! {
        #[allow(non_upper_case_globals, unused_qualifications, clippy::all)]
        const _: () = {
            #items
        };
    }
}

/// `#[derive(Decode)]`: `Decode`, plus `Tagged` for tagged messages and `IntoOwned`.
pub fn derive_decode(container: &Container<'_>) -> TokenStream {
    let mut items = decode::expand(container);
    items.extend(owned::expand(container));
    if let (Some(tag), Data::Struct(..)) = (&container.tag, &container.data) {
        items.extend(tagged(container, tag.byte));
    }
    wrap(items)
}

/// `#[derive(Encode)]`.
pub fn derive_encode(container: &Container<'_>) -> TokenStream {
    wrap(encode::expand(container))
}

fn tagged(container: &Container<'_>, byte: u8) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let tag = tag_literal(byte);
    let name = container.name();
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Tagged for #ident #ty_generics #where_clause {
            const TAG: ::core::primitive::u8 = #tag;
            const NAME: &'static ::core::primitive::str = #name;
        }
    }
}
