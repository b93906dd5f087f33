//! The `#[inference]` pass cases and the generated corpus compiled as edition 2024
//! (`equivalence`), and what edition 2024 changes for the rewrite (`edition_specific`).

mod edition_specific;
mod equivalence;
