//! `impl Decode`: read the tag (if any), then each field in order into a local, then build
//! the value. Straight-line code; error context is added by `__private` helpers.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Lifetime;

use super::shape::{self, Cx};
use super::{
    binding, counts_placed_before, decode_impl_generics, early_count, input_lifetime, internal,
    krate, none, stream_role, tag_literal, transaction_role, with_fields, with_static_lifetime,
    Mark, Scope,
};
use crate::ast::{self, Container, Data, Field, Style, Variant};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let lifetime = input_lifetime(container);
    let impl_generics = decode_impl_generics(container);
    let (_, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let r = internal("r");
    let ctx = internal("ctx");
    let body = match &container.data {
        Data::Struct(style, fields) => {
            let tag_check = container.tag().map(|tag| {
                let tag = tag_literal(tag.byte);
                let name = container.name();
                quote!(#krate::__private::expect_tag(#r, #tag, #name)?;)
            });
            let scope = Scope::new(container, None, fields);
            let construct = construct(quote!(Self), *style, fields, &scope, &lifetime);
            quote! {
                #tag_check
                #construct
            }
        }
        Data::Enum(variants) => decode_enum(container, variants, &lifetime),
    };
    let decode_valid = decode_valid(container, &lifetime).map(|body| {
        quote! {
            #[inline]
            fn decode_valid(
                #r: &mut #krate::Reader<#lifetime>,
                #ctx: #krate::Ctx,
            ) -> ::core::option::Option<Self> {
                #body
            }
        }
    });
    // A dispatch enum (variants wrapping tagged types) is the top of a message. Inlined
    // into the session decoder, each variant's reads sit next to the decoder's stream
    // check, which then needs no second dispatch, and the message is moved once. (The
    // price: `decode()` alone on a small message runs a larger function; BENCHMARKS.md.)
    let dispatch = matches!(&container.data, Data::Enum(variants)
        if variants.iter().any(|variant| variant.tag.is_none()));
    let inline = if dispatch {
        quote!(#[inline(always)])
    } else {
        quote!(#[inline])
    };
    let outline = outline(container, &lifetime).map(|body| {
        quote! {
            #[inline]
            fn outline(
                #r: &mut #krate::Reader<#lifetime>,
                #ctx: #krate::Ctx,
            ) -> ::core::option::Option<
                ::core::result::Result<#krate::Outline, #krate::DecodeError>,
            > {
                #body
            }
        }
    });
    let min_len = container_min_len(container, &lifetime);
    let unique_tags = match &container.data {
        Data::Enum(variants) => unique_tags_check(container, variants),
        Data::Struct(..) => TokenStream::new(),
    };
    quote! {
        #unique_tags
        #[automatically_derived]
        impl #impl_generics #krate::Decode<#lifetime> for #ident #ty_generics #where_clause {
            const MIN_WIRE_LEN: ::core::primitive::usize = #min_len;

            #inline
            fn decode(
                #r: &mut #krate::Reader<#lifetime>,
                #ctx: #krate::Ctx,
            ) -> ::core::result::Result<Self, #krate::DecodeError> {
                #body
            }

            #decode_valid

            #outline
        }
    }
}

/// `Decode::decode_valid`: `decode` without building errors (`None` exactly where `decode`
/// fails), when every field's shape has such a read and (for an enum) every variant has a
/// tag of its own. `None`: the trait's default serves.
fn decode_valid(container: &Container<'_>, lifetime: &Lifetime) -> Option<TokenStream> {
    let r = internal("r");
    match &container.data {
        Data::Struct(style, fields) => {
            let tag = container.tag().map(|tag| {
                let (krate, tag) = (krate(), tag_literal(tag.byte));
                quote!(#krate::__private::expect_byte_valid(#r, #tag)?;)
            });
            let scope = Scope::new(container, None, fields);
            let construct = construct_valid(quote!(Self), *style, fields, &scope, lifetime)?;
            Some(quote! {
                #tag
                #construct
            })
        }
        Data::Enum(variants) => {
            let arms = variants
                .iter()
                .map(|variant| {
                    let tag = tag_literal(variant.tag.as_ref()?.byte);
                    let variant_ident = variant.ident;
                    let scope = Scope::new(container, Some(variant_ident), &variant.fields);
                    let path = quote!(Self::#variant_ident);
                    let value =
                        construct_valid(path, variant.style, &variant.fields, &scope, lifetime)?;
                    let min_len = fields_min_len(true, &variant.fields, lifetime);
                    Some((tag, min_len, value))
                })
                .collect::<Option<Vec<_>>>()?;
            let krate = krate();
            let longest = internal("longest");
            let min_len: Vec<_> = (0..arms.len())
                .map(|i| internal(&format!("min_len_{i}")))
                .collect();
            let min_len_values = arms.iter().map(|(_, value, _)| value);
            let longest_value = min_len
                .iter()
                .map(|min_len| quote!(#min_len))
                .reduce(|a, b| quote!(#krate::__private::max_len(#a, #b)))
                .unwrap_or_else(|| quote!(0));
            // The variants that take the most bytes, when that many are left: their tag and
            // fixed-size first fields are read under one bounds check (a column's `'t'` and
            // length), and the match has only them (no jump table). The others below.
            let fast = arms.iter().zip(&min_len).map(|((tag, _, value), min_len)| {
                quote! {
                    ::core::option::Option::Some(#tag) if #min_len >= #longest => {
                        #r.take_u8()?;
                        return { #value };
                    }
                }
            });
            // Below, the longest variants cannot fit: the bytes left are fewer than they take.
            let arms = arms.iter().zip(&min_len).map(
                |((tag, _, value), min_len)| quote!(#tag if #min_len < #longest => { #value }),
            );
            Some(quote! {
                #(let #min_len: ::core::primitive::usize = #min_len_values;)*
                let #longest = #longest_value;
                if #r.remaining() >= #longest {
                    match #r.peek_byte() {
                        #(#fast)*
                        _ => {}
                    }
                }
                match #r.take_u8()? {
                    #(#arms)*
                    _ => ::core::option::Option::None,
                }
            })
        }
    }
}

/// `Decode::outline`: a message's tag, then its fields up to the last one `Tagged` reads
/// (its xids and positions), as `decode` reads them; the rest is left unread. A dispatch
/// enum passes to the variant's message (a variant with a tag of its own has no role and
/// names nothing, as `Tagged` says). `None` (the trait's default): a part without a tag.
fn outline(container: &Container<'_>, lifetime: &Lifetime) -> Option<TokenStream> {
    let krate = krate();
    let (r, ctx) = (internal("r"), internal("ctx"));
    let name = container.name();
    match &container.data {
        Data::Struct(_, fields) => {
            let tag = tag_literal(container.tag()?.byte);
            let scope = Scope::new(container, None, fields);
            let read = fields
                .iter()
                .rposition(|field| Mark::ALL.iter().any(|mark| mark.on(field)))
                .map_or(0, |last| last + 1);
            let reads = fields[..read].iter().map(|field| {
                let cx = Cx {
                    scope: &scope,
                    name: field.name(),
                    lifetime,
                };
                // A count for a field past the outline is read (its bytes come here) and
                // not used.
                let early_counts = counts_placed_before(fields, field).map(|(index, counted)| {
                    let read_count = shape::early_count_read(counted, &cx);
                    let unused = (index >= read).then(|| {
                        let local = early_count(counted);
                        quote!(let _ = #local;)
                    });
                    quote!(#read_count #unused)
                });
                let binding = outline_binding(field);
                let value = shape::parts(field).read(&cx);
                quote! {
                    #(#early_counts)*
                    let #binding = #value;
                }
            });
            let said = |mark: Mark| {
                fields[..read]
                    .iter()
                    .find(|field| mark.on(field))
                    .map_or_else(none, |field| {
                        let binding = outline_binding(field);
                        mark.read(field, quote!(#binding))
                    })
            };
            let (xid, subxid) = (said(Mark::Xid), said(Mark::Subxid));
            let (end, decision) = (said(Mark::TransactionEndLsn), said(Mark::DecisionLsn));
            let (stream, role) = (stream_role(container), transaction_role(container));
            let read_fn = internal("read");
            Some(quote! {
                let mut #read_fn = || -> ::core::result::Result<#krate::Outline, #krate::DecodeError> {
                    #krate::__private::expect_tag(#r, #tag, #name)?;
                    #(#reads)*
                    ::core::result::Result::Ok(#krate::Outline::new(
                        #tag,
                        (#stream, #role),
                        (#xid, #subxid),
                        (#end, #decision),
                    ))
                };
                ::core::option::Option::Some(#read_fn())
            })
        }
        Data::Enum(variants) => {
            let sets = variants
                .iter()
                .map(|variant| variant_tags(container, variant, true));
            let all_sets = variants
                .iter()
                .map(|variant| variant_tags(container, variant, false));
            let (tag, at) = (internal("tag"), internal("at"));
            let arms = variants.iter().enumerate().map(|(index, variant)| {
                let index = index as u8;
                let body = match &variant.tag {
                    Some(_) => quote! {
                        ::core::option::Option::Some(::core::result::Result::Ok(
                            #krate::Outline::new(
                                #tag,
                                (#krate::StreamRole::None, #krate::TransactionRole::None),
                                (::core::option::Option::None, ::core::option::Option::None),
                                (::core::option::Option::None, ::core::option::Option::None),
                            ),
                        ))
                    },
                    None => {
                        let ty = variant.fields[0].ty;
                        quote!(<#ty as #krate::Decode<#lifetime>>::outline(#r, #ctx))
                    }
                };
                quote!(#index => #body,)
            });
            Some(quote! {
                const VARIANT_OF_TAG: [::core::primitive::u8; 256] =
                    #krate::__private::variant_table(&[#(#sets),*]);
                let #at = #r.position();
                let #tag = match #krate::__private::field(#r.peek_u8(), #name, "tag") {
                    ::core::result::Result::Ok(tag) => tag,
                    ::core::result::Result::Err(err) => {
                        return ::core::option::Option::Some(::core::result::Result::Err(err));
                    }
                };
                match VARIANT_OF_TAG[#tag as ::core::primitive::usize] {
                    #(#arms)*
                    _ => ::core::option::Option::Some(::core::result::Result::Err(
                        #krate::__private::unknown_tag(
                            #tag,
                            #krate::TagSet::EMPTY #(.union(#all_sets))*,
                            #at,
                            #name,
                            "tag",
                        ),
                    )),
                }
            })
        }
    }
}

/// A field's local in an outline read: `_`-prefixed, as most are read and not used.
fn outline_binding(field: &Field<'_>) -> proc_macro2::Ident {
    let binding = binding(field);
    proc_macro2::Ident::new(&format!("_{binding}"), binding.span())
}

/// Reads each field as `decode` does but with no errors to build, then returns
/// `Some(Path { … })`.
fn construct_valid(
    path: TokenStream,
    style: Style,
    fields: &[Field<'_>],
    scope: &Scope,
    lifetime: &Lifetime,
) -> Option<TokenStream> {
    let bindings: Vec<_> = fields.iter().map(binding).collect();
    let reads = fields
        .iter()
        .zip(&bindings)
        .map(|(field, binding)| {
            let cx = Cx {
                scope,
                name: field.name(),
                lifetime,
            };
            let value = shape::parts(field).read_valid(&cx)?;
            Some(quote!(let #binding = #value;))
        })
        .collect::<Option<Vec<_>>>()?;
    let value = with_fields(path, style, fields, &bindings);
    Some(quote! {
        #(#reads)*
        ::core::option::Option::Some(#value)
    })
}

/// The fewest bytes a value takes on the wire: a struct's tag and fields, an enum's
/// smallest variant.
fn container_min_len(container: &Container<'_>, lifetime: &Lifetime) -> TokenStream {
    let krate = krate();
    match &container.data {
        Data::Struct(_, fields) => fields_min_len(container.tag().is_some(), fields, lifetime),
        Data::Enum(variants) => variants
            .iter()
            .map(|variant| fields_min_len(variant.tag.is_some(), &variant.fields, lifetime))
            .reduce(|a, b| quote!(#krate::__private::min_len(#a, #b)))
            .unwrap_or_else(|| quote!(0)),
    }
}

/// The fewest bytes a tag (if any) and these fields take on the wire.
fn fields_min_len(tag: bool, fields: &[Field<'_>], lifetime: &Lifetime) -> TokenStream {
    let scope = Scope::opaque();
    let tag = usize::from(tag);
    let fields = fields.iter().map(|field| {
        let cx = Cx {
            scope: &scope,
            name: field.name(),
            lifetime,
        };
        shape::parts(field).min_len(&cx)
    });
    quote!((#tag #(+ #fields)*))
}

/// Reads each field into a local, in wire order, then returns `Ok(Path { … })`.
fn construct(
    path: TokenStream,
    style: Style,
    fields: &[Field<'_>],
    scope: &Scope,
    lifetime: &Lifetime,
) -> TokenStream {
    let bindings: Vec<_> = fields.iter().map(binding).collect();
    let reads = fields.iter().zip(&bindings).map(|(field, binding)| {
        let cx = Cx {
            scope,
            name: field.name(),
            lifetime,
        };
        let early_counts = counts_placed_before(fields, field)
            .map(|(_, counted)| shape::early_count_read(counted, &cx));
        let value = shape::parts(field).read(&cx);
        quote! {
            #(#early_counts)*
            let #binding = #value;
        }
    });
    let value = with_fields(path, style, fields, &bindings);
    quote! {
        #(#reads)*
        ::core::result::Result::Ok(#value)
    }
}

/// A tagged union: dispatch on the first byte through a compile-time table from tag byte
/// to variant. Variants with their own `#[codec(tag)]` consume the byte here; newtype
/// variants without one leave it to their inner type.
fn decode_enum(
    container: &Container<'_>,
    variants: &[Variant<'_>],
    lifetime: &Lifetime,
) -> TokenStream {
    let krate = krate();
    let r = internal("r");
    let tag_var = internal("tag");
    let at = internal("at");
    let ctx = internal("ctx");
    let name = container.name();
    let sets = variants
        .iter()
        .map(|variant| variant_tags(container, variant, true));
    let all_sets: Vec<_> = variants
        .iter()
        .map(|variant| variant_tags(container, variant, false))
        .collect();
    // Variants that wrap a tagged type read their tag themselves: only peek then.
    let all_own = variants.iter().all(|variant| variant.tag.is_some());
    let first_byte = if all_own {
        quote!(#r.read_u8())
    } else {
        quote!(#r.peek_u8())
    };
    let arms = variants.iter().enumerate().map(|(index, variant)| {
        let index = index as u8;
        let variant_ident = variant.ident;
        let path = quote!(Self::#variant_ident);
        let body = match &variant.tag {
            Some(_) => {
                let scope = Scope::new(container, Some(variant_ident), &variant.fields);
                let value = construct(path, variant.style, &variant.fields, &scope, lifetime);
                // With every tag the enum's own, the tag was consumed when it was read.
                let consume = (!all_own).then(|| quote!(#r.read_u8()?;));
                quote! {
                    #consume
                    #value
                }
            }
            None => {
                let ty = variant.fields[0].ty;
                quote! {
                    ::core::result::Result::Ok(#path(
                        <#ty as #krate::Decode<#lifetime>>::decode(#r, #ctx)?
                    ))
                }
            }
        };
        quote!(#index => { #body })
    });
    quote! {
        const VARIANT_OF_TAG: [::core::primitive::u8; 256] =
            #krate::__private::variant_table(&[#(#sets),*]);
        let #at = #r.position();
        let #tag_var = #krate::__private::field(#first_byte, #name, "tag")?;
        match VARIANT_OF_TAG[#tag_var as ::core::primitive::usize] {
            #(#arms)*
            _ => ::core::result::Result::Err(#krate::__private::unknown_tag(
                #tag_var,
                #krate::TagSet::EMPTY #(.union(#all_sets))*,
                #at,
                #name,
                "tag",
            )),
        }
    }
}

/// The tag set of a variant: its literal, or its inner type's `Tagged::TAGS`.
/// `in_const` writes the inner type with `'static` for use in a `const` item.
pub(super) fn variant_tags(
    container: &Container<'_>,
    variant: &Variant<'_>,
    in_const: bool,
) -> TokenStream {
    let krate = krate();
    match &variant.tag {
        Some(tag) => {
            let tag = tag_literal(tag.byte);
            quote!(#krate::TagSet::single(#tag))
        }
        None => {
            let ty = variant.fields[0].ty;
            let ty = if in_const {
                with_static_lifetime(ty, container)
            } else {
                quote!(#ty)
            };
            quote_spanned!(variant.fields[0].ty.span()=> <#ty as #krate::Tagged>::TAGS)
        }
    }
}

/// A compile-time check that no two variants share a tag byte. Tags written on variants are
/// compared by the macro itself (see `check`); a newtype variant's tags are its inner type's
/// `Tagged::TAGS`, known only to the compiler, so those pairs are compared in a `const`.
fn unique_tags_check(container: &Container<'_>, variants: &[Variant<'_>]) -> TokenStream {
    let mut checks = Vec::new();
    for (i, first) in variants.iter().enumerate() {
        for second in &variants[i + 1..] {
            if first.tag.is_some() && second.tag.is_some() {
                continue;
            }
            let a = variant_tags(container, first, true);
            let b = variant_tags(container, second, true);
            let message = format!(
                "duplicate tag in `{}`: variants `{}` ({}) and `{}` ({}) share the tag byte ",
                container.name(),
                first.ident,
                describe(first),
                second.ident,
                describe(second),
            );
            let krate = krate();
            checks.push(quote! {
                if let ::core::option::Option::Some(byte) = #a.first_common(#b) {
                    ::core::panic!(
                        "{}",
                        #krate::__private::ConstMessage::new(#message).push_tag(byte).as_str()
                    );
                }
            });
        }
    }
    if checks.is_empty() {
        return TokenStream::new();
    }
    quote! {
        const _: () = {
            #(#checks)*
        };
    }
}

/// How a variant's tag is given, for the duplicate-tag message.
fn describe(variant: &Variant<'_>) -> String {
    match &variant.tag {
        Some(_) => "#[codec(tag)]".to_owned(),
        None => format!("type `{}`", ast::type_string(variant.fields[0].ty)),
    }
}
