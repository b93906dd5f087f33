//! The repository's layout, read from its files: the module layers and their lists in the docs
//! (`layers`: `cargo test --test layout layers -- --nocapture` prints the graphs), and the
//! table written twice, in README.md and the facade's crate docs (`docs_tables`).

mod docs_tables;
mod layers;
