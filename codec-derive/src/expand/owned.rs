//! `impl IntoOwned`: the same value with every borrowed field copied out, as `Type<'static>`.

use proc_macro2::TokenStream;
use quote::quote;

use super::{binding, krate};
use crate::ast::{Container, Data, Field, Style};

pub fn expand(container: &Container<'_>) -> TokenStream {
    let krate = krate();
    let ident = container.ident;
    let (impl_generics, ty_generics, where_clause) = container.input.generics.split_for_impl();
    if container.lifetime().is_none() {
        // Nothing borrows: the value already owns everything.
        return quote! {
            #[automatically_derived]
            impl #impl_generics #krate::IntoOwned for #ident #ty_generics #where_clause {
                type Owned = Self;
                #[inline]
                fn into_owned(self) -> Self {
                    self
                }
            }
        };
    }
    let body = match &container.data {
        Data::Struct(style, fields) => {
            let accessors = fields.iter().map(|f| {
                let member = &f.member;
                quote!(self.#member)
            });
            rebuild(quote!(#ident), *style, fields, accessors)
        }
        Data::Enum(variants) => {
            let arms = variants.iter().map(|variant| {
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
                let value = rebuild(
                    quote!(#ident::#variant_ident),
                    variant.style,
                    &variant.fields,
                    bindings.iter().map(|b| quote!(#b)),
                );
                quote!(#pattern => #value,)
            });
            quote! {
                match self {
                    #(#arms)*
                }
            }
        }
    };
    quote! {
        #[automatically_derived]
        impl #impl_generics #krate::IntoOwned for #ident #ty_generics #where_clause {
            type Owned = #ident<'static>;
            fn into_owned(self) -> #ident<'static> {
                #body
            }
        }
    }
}

fn rebuild(
    path: TokenStream,
    style: Style,
    fields: &[Field<'_>],
    values: impl Iterator<Item = TokenStream>,
) -> TokenStream {
    let krate = krate();
    let owned = values.map(|value| quote!(#krate::IntoOwned::into_owned(#value)));
    match style {
        Style::Unit => path,
        Style::Tuple => quote!(#path(#(#owned),*)),
        Style::Named => {
            let members = fields.iter().map(|f| &f.member);
            quote!(#path { #(#members: #owned),* })
        }
    }
}
