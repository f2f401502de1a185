//! `impl Encode`: write the tag (if any), then each field in order; `encoded_len` mirrors it.

use proc_macro2::TokenStream;
use quote::quote;

use super::{
    condition, counts_placed_before, internal, krate, tag_literal, variant_pattern, Scope,
};
use crate::ast::{Container, Data, Field};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    let w = internal("w");
    let ctx = internal("ctx");
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
            let write_tag = tag.as_ref().map(|tag| quote!(#w.write_u8(#tag);));
            let tag_len = if tag.is_some() { quote!(1) } else { quote!(0) };
            let writes = write_fields(fields, &accessors, &scope);
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
                let (pattern, bindings) = variant_pattern(variant);
                let accessors: Vec<TokenStream> = bindings.iter().map(|b| quote!(#b)).collect();
                match &variant.tag {
                    Some(tag) => {
                        let tag = tag_literal(tag.byte);
                        let scope = Scope::new(container, Some(variant_ident), &variant.fields);
                        let writes = write_fields(&variant.fields, &accessors, &scope);
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
) -> Vec<TokenStream> {
    let krate = krate();
    let w = internal("w");
    let ctx = internal("ctx");
    let message = &scope.message;
    fields
        .iter()
        .zip(accessors)
        .map(|(field, accessor)| {
            let name = field.name();
            let placed = |result: TokenStream| {
                if scope.transparent {
                    quote!(#result?;)
                } else {
                    quote!(#krate::__private::encode_field(#result, #message, #name)?;)
                }
            };
            let value = internal("value");
            // `value` is the wire value: the field itself, or what its `Option` holds.
            let optional = field.attrs.since.is_some() || field.attrs.optional.is_some();
            let v = if optional {
                quote!(#value)
            } else {
                quote!(#accessor)
            };
            let mut statements = Vec::new();
            for (index, counted) in counts_placed_before(fields, field) {
                let prefix = &counted.attrs.count.as_ref().unwrap().prefix;
                let elements = &accessors[index];
                let counted_name = counted.name();
                statements.push(quote! {
                    #krate::__private::encode_field(
                        #krate::__private::write_count::<#prefix>(#w, #ctx, (#elements).len()),
                        #message,
                        #counted_name,
                    )?;
                });
            }
            if let Some(marker) = &field.attrs.marker {
                let byte = tag_literal(marker.byte);
                statements.push(quote!(#w.write_u8(#byte);));
            }
            if let Some((expected, _)) = &field.attrs.expect {
                let description = expected.base10_digits();
                statements.push(placed(quote! {
                    #krate::__private::check_value(*#v, #expected, #description)
                }));
            }
            let bytes = quote!(::core::convert::AsRef::<[::core::primitive::u8]>::as_ref(#v));
            let write = if field.attrs.len.is_some() {
                quote!(#krate::__private::write_i32_len_bytes(#w, #bytes))
            } else if field.attrs.rest.is_some() {
                quote!(#krate::__private::write_rest(#w, #bytes))
            } else if let Some(count) = &field.attrs.count {
                match &count.before {
                    None => {
                        let prefix = &count.prefix;
                        quote!(#krate::__private::write_counted::<#prefix, _>(#w, #ctx, #v))
                    }
                    // The count went out before an earlier field.
                    Some(_) => quote!(#krate::__private::write_elements(#w, #ctx, #v)),
                }
            } else {
                quote!(#krate::Encode::encode(#v, #w, #ctx))
            };
            statements.push(placed(write));
            let body = quote!(#(#statements)*);
            if let Some(since) = &field.attrs.since {
                let (present, present_when) = condition(since);
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
                        #body
                    }
                }
            } else if field.attrs.optional.is_some() {
                quote! {
                    if let ::core::option::Option::Some(#value) = #accessor {
                        #body
                    }
                }
            } else {
                body
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
            let optional = field.attrs.since.is_some() || field.attrs.optional.is_some();
            let v = if optional {
                quote!(#value)
            } else {
                quote!(#accessor)
            };
            let bytes_len = quote! {
                <[::core::primitive::u8]>::len(
                    ::core::convert::AsRef::<[::core::primitive::u8]>::as_ref(#v),
                )
            };
            let mut len = if field.attrs.len.is_some() {
                quote!((4 + #bytes_len))
            } else if field.attrs.rest.is_some() {
                bytes_len
            } else if let Some(count) = &field.attrs.count {
                let prefix = &count.prefix;
                quote! {
                    (::core::mem::size_of::<#prefix>() + #krate::__private::elements_len(#ctx, #v))
                }
            } else {
                quote!(#krate::Encode::encoded_len(#v, #ctx))
            };
            if field.attrs.marker.is_some() {
                len = quote!((1 + #len));
            }
            if optional {
                quote! {
                    match #accessor {
                        ::core::option::Option::Some(#value) => #len,
                        ::core::option::Option::None => 0,
                    }
                }
            } else {
                len
            }
        })
        .collect()
}
