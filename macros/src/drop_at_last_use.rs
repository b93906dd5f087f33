//! `#[derive(DropAtLastUse)]`: declares a user's type droppable when every field is.
//!
//! Expansion: `impl<G> ::vramguard::DropAtLastUse for S<G> where F: DropAtLastUse, … {}` with a
//! bound for each field whose type names a type parameter (the impl is conditional on it, as
//! `derive(Clone)` is), and, for every other field, an assertion spanned at the field's type,
//! so that a field that is not `DropAtLastUse` is an error at that field (the trait's
//! `on_unimplemented` text says why).

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields};

use crate::common::default_crate_path;

/// Expands `#[derive(DropAtLastUse)]` on `input`.
pub(crate) fn expand(input: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(input).and_then(|input| derive(&input)) {
        Ok(tokens) => tokens,
        Err(error) => error.to_compile_error(),
    }
}

fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    let krate = crate_path(input)?;
    let fields: Vec<&syn::Field> = match &input.data {
        Data::Struct(data) => fields_of(&data.fields).collect(),
        Data::Enum(data) => data
            .variants
            .iter()
            .flat_map(|v| fields_of(&v.fields))
            .collect(),
        Data::Union(data) => return Err(syn::Error::new(
            data.union_token.span,
            "`DropAtLastUse` cannot be derived for a union: which field is alive is not known, \
                 so dropping it may not free anything; implement `vramguard::DropAtLastUse` \
                 by hand if dropping it frees memory and nothing else",
        )),
    };
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let existing = where_clause.map(|w| &w.predicates);
    let params: Vec<String> = input
        .generics
        .type_params()
        .map(|p| p.ident.to_string())
        .collect();
    let (generic, concrete): (Vec<&syn::Field>, Vec<&syn::Field>) = fields
        .iter()
        .partition(|field| mentions_any(field.ty.to_token_stream(), &params));
    // A field of a generic type makes the impl conditional, as `derive(Clone)` does.
    let bounds = generic.iter().map(|field| {
        let ty = &field.ty;
        quote_spanned!(field.ty.span()=> #ty: #krate::DropAtLastUse)
    });
    // A field of a concrete type must be `DropAtLastUse`: asserted at the field's type, so that the
    // error points at the field that is not.
    let assertions = concrete.iter().map(|field| {
        let ty = &field.ty;
        quote_spanned!(field.ty.span()=> __vg_assert_droppable::<#ty>();)
    });
    Ok(quote! {
        impl #impl_generics #krate::DropAtLastUse for #name #type_generics
        where
            #(#bounds,)*
            #existing
        {}

        const _: () = {
            fn __vg_assert_droppable<T: #krate::DropAtLastUse + ?Sized>() {}
            #[allow(dead_code)]
            fn __vg_every_field_is_droppable #impl_generics () #where_clause {
                #(#assertions)*
            }
        };
    })
}

/// Whether `tokens` name one of the type parameters `params`.
fn mentions_any(tokens: TokenStream, params: &[String]) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => params.iter().any(|p| ident == p),
        proc_macro2::TokenTree::Group(group) => mentions_any(group.stream(), params),
        _ => false,
    })
}

fn fields_of(fields: &Fields) -> impl Iterator<Item = &syn::Field> {
    fields.iter()
}

/// `#[vramguard(crate = path)]` on the type: the facade under another name.
fn crate_path(input: &DeriveInput) -> syn::Result<syn::Path> {
    let mut krate = None;
    for attr in input
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("vramguard"))
    {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                krate = Some(meta.value()?.parse::<syn::Path>()?);
                Ok(())
            } else {
                Err(meta.error(
                    "unknown `vramguard` option for `derive(DropAtLastUse)`: the only option is \
                     `crate = path`",
                ))
            }
        })?;
    }
    Ok(krate.unwrap_or_else(default_crate_path))
}
