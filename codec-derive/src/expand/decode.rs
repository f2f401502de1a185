//! `impl Decode`: read the tag (if any), then each field in order into a local, then build
//! the value. Straight-line code; error context is added by `__private` helpers.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Lifetime;

use super::{
    binding, condition, counts_placed_before, early_count, input_lifetime, internal, krate,
    tag_literal, with_fields, with_static_lifetime, Scope,
};
use crate::ast::{self, Container, Data, Field, Style, Variant};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let lifetime = input_lifetime(container);
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
    let min_len = container_min_len(container, &lifetime);
    let unique_tags = match &container.data {
        Data::Enum(variants) => unique_tags_check(container, variants),
        Data::Struct(..) => TokenStream::new(),
    };
    quote! {
        #unique_tags
        #[automatically_derived]
        impl<#lifetime> #krate::Decode<#lifetime> for #ident #ty_generics #where_clause {
            const MIN_WIRE_LEN: ::core::primitive::usize = #min_len;

            #[inline]
            fn decode(
                #r: &mut #krate::Reader<#lifetime>,
                #ctx: #krate::Ctx,
            ) -> ::core::result::Result<Self, #krate::DecodeError> {
                #body
            }
        }
    }
}

/// The fewest bytes a value takes on the wire: a struct's tag and fields, an enum's
/// smallest variant.
fn container_min_len(container: &Container<'_>, lifetime: &Lifetime) -> TokenStream {
    let krate = krate();
    let fields_min = |tag: bool, fields: &[Field<'_>]| {
        let tag = usize::from(tag);
        let fields = fields.iter().map(|field| field_min_len(field, lifetime));
        quote!((#tag #(+ #fields)*))
    };
    match &container.data {
        Data::Struct(_, fields) => fields_min(container.tag().is_some(), fields),
        Data::Enum(variants) => variants
            .iter()
            .map(|variant| fields_min(variant.tag.is_some(), &variant.fields))
            .reduce(|a, b| quote!(#krate::__private::min_len(#a, #b)))
            .unwrap_or_else(|| quote!(0)),
    }
}

/// The fewest bytes a field takes: nothing if it may be absent, its length or count
/// prefix for a sized part, else its type's minimum; a marker byte adds one.
fn field_min_len(field: &Field<'_>, lifetime: &Lifetime) -> TokenStream {
    let krate = krate();
    if field.attrs.since.is_some() || field.attrs.optional.is_some() || field.attrs.rest.is_some() {
        return quote!(0);
    }
    let marker = usize::from(field.attrs.marker.is_some());
    let ty = field.wire_ty();
    let own = if field.attrs.len.is_some() {
        quote!(4)
    } else if let Some(count) = &field.attrs.count {
        // The count's bytes are on the wire even when it is read before another field.
        let prefix = &count.prefix;
        quote!(<#prefix as #krate::Decode<#lifetime>>::MIN_WIRE_LEN)
    } else {
        quote!(<#ty as #krate::Decode<#lifetime>>::MIN_WIRE_LEN)
    };
    quote!((#marker + #own))
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
        let (before, value) = decode_field(field, scope, lifetime);
        let early_counts = counts_placed_before(fields, field).map(|(_, counted)| {
            let krate = krate();
            let (r, ctx) = (internal("r"), internal("ctx"));
            let local = early_count(counted);
            let prefix = &counted.attrs.count.as_ref().unwrap().prefix;
            let (message, name) = (&scope.message, counted.name());
            quote! {
                let #local = #krate::__private::field(
                    #krate::__private::read_count::<#prefix>(#r, #ctx),
                    #message,
                    #name,
                )?;
            }
        });
        quote! {
            #(#early_counts)*
            #before
            let #binding = #value;
        }
    });
    let value = with_fields(path, style, fields, &bindings);
    quote! {
        #(#reads)*
        ::core::result::Result::Ok(#value)
    }
}

/// The statements that come before one field (a marker byte) and the expression that
/// reads it.
fn decode_field(
    field: &Field<'_>,
    scope: &Scope,
    lifetime: &Lifetime,
) -> (TokenStream, TokenStream) {
    let krate = krate();
    let r = internal("r");
    let ctx = internal("ctx");
    let at = internal("at");
    let message = &scope.message;
    let name = field.name();
    let ty = field.wire_ty();
    let read = if field.attrs.len.is_some() {
        quote!(#krate::__private::read_i32_len_bytes(#r))
    } else if field.attrs.rest.is_some() {
        quote!(#krate::__private::read_rest(#r))
    } else if let Some(count) = &field.attrs.count {
        let element = field.element_ty();
        match &count.before {
            None => {
                let prefix = &count.prefix;
                quote!(#krate::__private::read_counted::<#prefix, #element>(#r, #ctx))
            }
            Some(_) => {
                let local = early_count(field);
                quote!(#krate::__private::read_elements::<#element>(#r, #ctx, #local))
            }
        }
    } else {
        quote_spanned!(ty.span()=> <#ty as #krate::Decode<#lifetime>>::decode(#r, #ctx))
    };
    let placed = |result: TokenStream| {
        if scope.transparent {
            quote!(#result?)
        } else {
            quote!(#krate::__private::field(#result, #message, #name)?)
        }
    };
    let mut value = match &field.attrs.expect {
        Some((expected, _)) => {
            let description = expected.base10_digits();
            let checked = placed(quote! {
                #krate::__private::expect_value(#read, #expected, #description, #at)
            });
            quote!({
                let #at = #r.position();
                #checked
            })
        }
        None => placed(read),
    };
    if field.attrs.len.is_some() || field.attrs.rest.is_some() {
        value = quote!(::core::convert::From::from(#value));
    }
    if let Some(since) = &field.attrs.since {
        let (present, _) = condition(since);
        value = quote! {
            if #present {
                ::core::option::Option::Some(#value)
            } else {
                ::core::option::Option::None
            }
        };
    }
    if field.attrs.optional.is_some() {
        value = quote! {
            if #krate::__private::next_tag_in(#r, <#ty as #krate::Tagged>::TAGS) {
                ::core::option::Option::Some(#value)
            } else {
                ::core::option::Option::None
            }
        };
    }
    let before = field.attrs.marker.as_ref().map(|marker| {
        let byte = tag_literal(marker.byte);
        quote!(#krate::__private::expect_byte(#r, #byte, #message, #name)?;)
    });
    (quote!(#before), value)
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
    let arms = variants.iter().enumerate().map(|(index, variant)| {
        let index = index as u8;
        let variant_ident = variant.ident;
        let path = quote!(Self::#variant_ident);
        let body = match &variant.tag {
            Some(_) => {
                let scope = Scope::new(container, Some(variant_ident), &variant.fields);
                let value = construct(path, variant.style, &variant.fields, &scope, lifetime);
                quote! {
                    #r.read_u8()?;
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
        let #tag_var = #krate::__private::field(#r.peek_u8(), #name, "tag")?;
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
                "duplicate tag in `{}`: variants `{}` ({}) and `{}` ({}) share a tag byte",
                container.name(),
                first.ident,
                describe(first),
                second.ident,
                describe(second),
            );
            checks.push(quote! {
                if #a.intersects(#b) {
                    ::core::panic!(#message);
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
