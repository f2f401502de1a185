//! `impl IntoOwned`: the same value with every borrowed field copied out, as `Type<'static>`.

use proc_macro2::TokenStream;
use quote::quote;

use super::{krate, variant_pattern, with_fields};
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
                let (pattern, bindings) = variant_pattern(variant);
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

/// The value at `path` with every field made owned.
fn rebuild(
    path: TokenStream,
    style: Style,
    fields: &[Field<'_>],
    values: impl Iterator<Item = TokenStream>,
) -> TokenStream {
    let krate = krate();
    let owned = values.map(|value| quote!(#krate::IntoOwned::into_owned(#value)));
    with_fields(path, style, fields, owned)
}
