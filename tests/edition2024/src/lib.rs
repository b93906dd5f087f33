//! Empty: this package exists to compile the `#[inference]` tests as edition 2024
//! (temporary scopes of tail expressions and `if let` changed in 2024).
