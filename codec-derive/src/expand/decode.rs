//! `impl Decode`: read the tag (if any), then each field in order, straight-line.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::Lifetime;

use super::{
    condition, error_scope, input_lifetime, internal, krate, tag_literal, with_static_lifetime,
};
use crate::ast::{Container, Data, Field, Style, Variant};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let lifetime = input_lifetime(container);
    let (_, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let r = internal("r");
    let ctx = internal("ctx");
    let body = match &container.data {
        Data::Struct(style, fields) => {
            let tag_check = container.tag.as_ref().map(|tag| {
                let tag = tag_literal(tag.byte);
                let name = container.name();
                quote!(#krate::__private::expect_tag(#r, &[#tag], #name)?;)
            });
            let scope = error_scope(container, None, fields);
            let construct = construct(quote!(Self), *style, fields, scope.as_deref(), &lifetime);
            quote! {
                #tag_check
                ::core::result::Result::Ok(#construct)
            }
        }
        Data::Enum(variants) => decode_enum(container, variants, &lifetime),
    };
    let unique_tags = match &container.data {
        Data::Enum(variants) => unique_tags_check(container, variants),
        Data::Struct(..) => TokenStream::new(),
    };
    quote! {
        #unique_tags
        #[automatically_derived]
        impl<#lifetime> #krate::Decode<#lifetime> for #ident #ty_generics #where_clause {
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

/// `Path { a: …, b: … }`, `Path(…)` or `Path`, each field decoded in order.
fn construct(
    path: TokenStream,
    style: Style,
    fields: &[Field<'_>],
    scope: Option<&str>,
    lifetime: &Lifetime,
) -> TokenStream {
    let values = fields
        .iter()
        .map(|field| decode_field(field, scope, lifetime));
    match style {
        Style::Unit => path,
        Style::Tuple => quote!(#path( #(#values,)* )),
        Style::Named => {
            let members = fields.iter().map(|field| &field.member);
            quote!(#path { #(#members: #values,)* })
        }
    }
}

/// The expression that reads one field.
fn decode_field(field: &Field<'_>, scope: Option<&str>, lifetime: &Lifetime) -> TokenStream {
    let krate = krate();
    let r = internal("r");
    let ctx = internal("ctx");
    let ty = field.wire_ty();
    let read = match &field.len {
        Some(_) => quote!(#krate::__private::read_i32_len_bytes(#r)),
        None => quote_spanned!(ty.span()=> <#ty as #krate::Decode<#lifetime>>::decode(#r, #ctx)),
    };
    let read = match scope {
        Some(message) => {
            let name = field.name();
            quote!(#krate::__private::field(#read, #message, #name)?)
        }
        None => quote!(#read?),
    };
    let value = match &field.len {
        Some(_) => quote!(::core::convert::From::from(#read)),
        None => read,
    };
    match &field.since {
        Some(since) => {
            let (present, _) = condition(since);
            quote! {
                if #present {
                    ::core::option::Option::Some(#value)
                } else {
                    ::core::option::Option::None
                }
            }
        }
        None => value,
    }
}

/// A tagged union: dispatch on the first byte. Variants with their own `#[codec(tag)]`
/// consume it here; newtype variants without one leave it to their inner message type.
fn decode_enum(
    container: &Container<'_>,
    variants: &[Variant<'_>],
    lifetime: &Lifetime,
) -> TokenStream {
    let krate = krate();
    let r = internal("r");
    let tag_var = internal("tag");
    let at = internal("at");
    let name = container.name();
    let expected = variants
        .iter()
        .map(|variant| variant_tag(container, variant, true));
    let arms = variants.iter().map(|variant| {
        let variant_ident = variant.ident;
        let path = quote!(Self::#variant_ident);
        let test = variant_tag(container, variant, false);
        let value = match &variant.tag {
            Some(_) => {
                let scope = error_scope(container, Some(variant_ident), &variant.fields);
                let value = construct(
                    path,
                    variant.style,
                    &variant.fields,
                    scope.as_deref(),
                    lifetime,
                );
                quote! {
                    #r.read_u8()?;
                    #value
                }
            }
            None => {
                let field = &variant.fields[0];
                let value = decode_field(field, None, lifetime);
                quote!(#path(#value))
            }
        };
        quote! {
            if #tag_var == #test {
                return ::core::result::Result::Ok({ #value });
            }
        }
    });
    quote! {
        const EXPECTED: &[::core::primitive::u8] = &[#(#expected),*];
        let #at = #r.position();
        let #tag_var = #krate::__private::field(#r.peek_u8(), #name, "tag")?;
        #(#arms)*
        ::core::result::Result::Err(#krate::__private::unknown_tag(#tag_var, EXPECTED, #at, #name))
    }
}

/// The tag byte of a variant: its literal, or its inner type's `Tagged::TAG`.
/// `in_const` writes the inner type with `'static` for use in a `const` item.
pub(super) fn variant_tag(
    container: &Container<'_>,
    variant: &Variant<'_>,
    in_const: bool,
) -> TokenStream {
    let krate = krate();
    match &variant.tag {
        Some(tag) => {
            let tag = tag_literal(tag.byte);
            quote!(#tag)
        }
        None => {
            let ty = variant.fields[0].ty;
            let ty = if in_const {
                with_static_lifetime(ty, container)
            } else {
                quote!(#ty)
            };
            quote_spanned!(variant.fields[0].ty.span()=> <#ty as #krate::Tagged>::TAG)
        }
    }
}

/// A compile-time check that no two variants share a tag byte. Tags written on variants are
/// compared by the macro itself (see `check`); a newtype variant's tag is its inner type's
/// `Tagged::TAG`, known only to the compiler, so those pairs are compared in a `const`.
fn unique_tags_check(container: &Container<'_>, variants: &[Variant<'_>]) -> TokenStream {
    let mut checks = Vec::new();
    for (i, first) in variants.iter().enumerate() {
        for second in &variants[i + 1..] {
            if first.tag.is_some() && second.tag.is_some() {
                continue;
            }
            let a = variant_tag(container, first, true);
            let b = variant_tag(container, second, true);
            let message = format!(
                "duplicate tag in `{}`: variants `{}` ({}) and `{}` ({}) have the same tag byte",
                container.name(),
                first.ident,
                describe(first),
                second.ident,
                describe(second),
            );
            checks.push(quote! {
                if #a == #b {
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
        None => {
            let ty = variant.fields[0].ty;
            format!("type `{}`", crate::ast::type_string(ty))
        }
    }
}
