//! `impl Encode`: write the tag (if any), then each field in order; `encoded_len` mirrors it.

use proc_macro2::TokenStream;
use quote::quote;
use syn::Lifetime;

use super::shape::{self, Cx};
use super::{
    counts_placed_before, input_lifetime, internal, krate, tag_literal, variant_pattern, Scope,
};
use crate::ast::{Container, Data, Field};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let w = internal("w");
    let ctx = internal("ctx");
    let lifetime = input_lifetime(container);
    let (encode, encoded_len) = match &container.data {
        Data::Struct(_, fields) => {
            let scope = Scope::new(container, None, fields);
            let accessors: Vec<TokenStream> = fields
                .iter()
                .map(|field| {
                    let member = &field.member;
                    quote!(&self.#member)
                })
                .collect();
            let tag = container.tag().map(|tag| tag_literal(tag.byte));
            let tag_len = if tag.is_some() { quote!(1) } else { quote!(0) };
            let writes = write_tag_and_fields(
                tag.as_ref().map(|tag| quote!(#tag)),
                fields,
                &accessors,
                &scope,
                &lifetime,
            );
            let lens = field_lens(fields, &accessors);
            (
                quote! {
                    #(#writes)*
                    ::core::result::Result::Ok(())
                },
                quote!(#tag_len #(+ #lens)*),
            )
        }
        Data::Enum(variants) => {
            let mut encode_arms = Vec::new();
            let mut len_arms = Vec::new();
            for variant in variants {
                let variant_ident = variant.ident;
                let (pattern, bindings) = variant_pattern(variant);
                let accessors: Vec<TokenStream> = bindings.iter().map(|b| quote!(#b)).collect();
                match &variant.tag {
                    Some(tag) => {
                        let tag = tag_literal(tag.byte);
                        let scope = Scope::new(container, Some(variant_ident), &variant.fields);
                        let writes = write_tag_and_fields(
                            Some(quote!(#tag)),
                            &variant.fields,
                            &accessors,
                            &scope,
                            &lifetime,
                        );
                        let lens = field_lens(&variant.fields, &accessors);
                        encode_arms.push(quote! {
                            #pattern => {
                                #(#writes)*
                            }
                        });
                        len_arms.push(quote!(#pattern => 1 #(+ #lens)*,));
                    }
                    None => {
                        // A newtype around a tagged type: it writes its own tag.
                        let inner = &accessors[0];
                        encode_arms.push(quote! {
                            #pattern => #krate::Encode::encode(#inner, #w, #ctx)?,
                        });
                        len_arms.push(quote! {
                            #pattern => #krate::Encode::encoded_len(#inner, #ctx),
                        });
                    }
                }
            }
            (
                quote! {
                    match self {
                        #(#encode_arms)*
                    }
                    ::core::result::Result::Ok(())
                },
                quote! {
                    match self {
                        #(#len_arms)*
                    }
                },
            )
        }
    };
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::Encode for #ident #ty_generics #where_clause {
            #[inline]
            fn encode(
                &self,
                #w: &mut #krate::Writer<'_>,
                #ctx: #krate::Ctx,
            ) -> ::core::result::Result<(), #krate::EncodeError> {
                #encode
            }

            #[inline]
            fn encoded_len(&self, #ctx: #krate::Ctx) -> ::core::primitive::usize {
                #encoded_len
            }
        }
    }
}

/// One statement per field, each writing the value behind its accessor (a `&T` expression).
fn write_fields(
    fields: &[Field<'_>],
    accessors: &[TokenStream],
    scope: &Scope,
    lifetime: &Lifetime,
) -> Vec<TokenStream> {
    fields
        .iter()
        .zip(accessors)
        .map(|(field, accessor)| {
            let cx = Cx {
                scope,
                name: field.name(),
                lifetime,
            };
            let early_counts = counts_placed_before(fields, field)
                .map(|(index, counted)| shape::early_count_write(counted, &accessors[index], &cx));
            let write = shape::parts(field).write(&cx, accessor);
            quote!(#(#early_counts)* #write)
        })
        .collect()
}

/// The tag (if any), then one statement per field. A first field whose shape can write
/// the tag with it (a length-prefixed value: tag and length in one write) does so.
fn write_tag_and_fields(
    tag: Option<TokenStream>,
    fields: &[Field<'_>],
    accessors: &[TokenStream],
    scope: &Scope,
    lifetime: &Lifetime,
) -> Vec<TokenStream> {
    let mut writes = write_fields(fields, accessors, scope, lifetime);
    let Some(tag) = tag else {
        return writes;
    };
    let w = internal("w");
    let merged = fields.first().and_then(|field| {
        if counts_placed_before(fields, field).next().is_some() {
            return None;
        }
        let cx = Cx {
            scope,
            name: field.name(),
            lifetime,
        };
        shape::parts(field).write_after_tag(&cx, &accessors[0], &tag)
    });
    match merged {
        Some(first) => writes[0] = first,
        None => writes.insert(0, quote!(#w.write_u8(#tag);)),
    }
    writes
}

/// One `usize` expression per field: the bytes it takes on the wire.
fn field_lens(fields: &[Field<'_>], accessors: &[TokenStream]) -> Vec<TokenStream> {
    fields
        .iter()
        .zip(accessors)
        .map(|(field, accessor)| shape::parts(field).len(accessor))
        .collect()
}
