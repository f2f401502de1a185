//! `impl Encode`: write the tag (if any), then each field in order; `encoded_len` mirrors it.

use proc_macro2::TokenStream;
use quote::quote;

use super::{binding, condition, error_scope, internal, krate, tag_literal};
use crate::ast::{Container, Data, Field, Style};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let w = internal("w");
    let ctx = internal("ctx");
    let (encode, encoded_len) = match &container.data {
        Data::Struct(_, fields) => {
            let scope = error_scope(container, None, fields);
            let accessors: Vec<TokenStream> = fields
                .iter()
                .map(|field| {
                    let member = &field.member;
                    quote!(&self.#member)
                })
                .collect();
            let tag = container.tag.as_ref().map(|tag| tag_literal(tag.byte));
            let write_tag = tag.as_ref().map(|tag| quote!(#w.write_u8(#tag);));
            let tag_len = if tag.is_some() { quote!(1) } else { quote!(0) };
            let writes = write_fields(fields, &accessors, scope.as_deref());
            let lens = field_lens(fields, &accessors);
            (
                quote! {
                    #write_tag
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
                let bindings: Vec<_> = variant.fields.iter().map(binding).collect();
                let pattern = match variant.style {
                    Style::Unit => quote!(Self::#variant_ident),
                    Style::Tuple => quote!(Self::#variant_ident(#(#bindings),*)),
                    Style::Named => {
                        let members = variant.fields.iter().map(|f| &f.member);
                        quote!(Self::#variant_ident { #(#members: #bindings),* })
                    }
                };
                let accessors: Vec<TokenStream> = bindings.iter().map(|b| quote!(#b)).collect();
                match &variant.tag {
                    Some(tag) => {
                        let tag = tag_literal(tag.byte);
                        let scope = error_scope(container, Some(variant_ident), &variant.fields);
                        let writes = write_fields(&variant.fields, &accessors, scope.as_deref());
                        let lens = field_lens(&variant.fields, &accessors);
                        encode_arms.push(quote! {
                            #pattern => {
                                #w.write_u8(#tag);
                                #(#writes)*
                            }
                        });
                        len_arms.push(quote!(#pattern => 1 #(+ #lens)*,));
                    }
                    None => {
                        // A newtype around a tagged message: it writes its own tag.
                        let writes = write_fields(&variant.fields, &accessors, None);
                        let lens = field_lens(&variant.fields, &accessors);
                        encode_arms.push(quote!(#pattern => { #(#writes)* }));
                        len_arms.push(quote!(#pattern => #(#lens)*,));
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
    scope: Option<&str>,
) -> Vec<TokenStream> {
    let krate = krate();
    let w = internal("w");
    let ctx = internal("ctx");
    fields
        .iter()
        .zip(accessors)
        .map(|(field, accessor)| {
            let value = internal("value");
            let write = |value: &TokenStream| match &field.len {
                Some(_) => quote! {
                    #krate::__private::write_i32_len_bytes(
                        #w,
                        ::core::convert::AsRef::<[::core::primitive::u8]>::as_ref(#value),
                    )
                },
                None => quote!(#krate::Encode::encode(#value, #w, #ctx)),
            };
            let placed = |write: TokenStream| match scope {
                Some(message) => {
                    let name = field.name();
                    quote!(#krate::__private::encode_field(#write, #message, #name)?;)
                }
                None => quote!(#write?;),
            };
            match &field.since {
                Some(since) => {
                    let (present, present_when) = condition(since);
                    let message = scope.unwrap_or_default();
                    let name = field.name();
                    let write = placed(write(&quote!(#value)));
                    quote! {
                        #krate::__private::check_gated(
                            ::core::option::Option::is_some(#accessor),
                            #present,
                            #present_when,
                            #ctx,
                            #message,
                            #name,
                        )?;
                        if let ::core::option::Option::Some(#value) = #accessor {
                            #write
                        }
                    }
                }
                None => placed(write(accessor)),
            }
        })
        .collect()
}

/// One `usize` expression per field: the bytes it takes on the wire.
fn field_lens(fields: &[Field<'_>], accessors: &[TokenStream]) -> Vec<TokenStream> {
    let krate = krate();
    let ctx = internal("ctx");
    fields
        .iter()
        .zip(accessors)
        .map(|(field, accessor)| {
            let value = internal("value");
            let len = |value: &TokenStream| match &field.len {
                Some(_) => quote!((4 + <[::core::primitive::u8]>::len(::core::convert::AsRef::<[::core::primitive::u8]>::as_ref(#value)))),
                None => quote!(#krate::Encode::encoded_len(#value, #ctx)),
            };
            match &field.since {
                Some(_) => {
                    let inner = len(&quote!(#value));
                    quote! {
                        match #accessor {
                            ::core::option::Option::Some(#value) => #inner,
                            ::core::option::Option::None => 0,
                        }
                    }
                }
                None => len(accessor),
            }
        })
        .collect()
}
