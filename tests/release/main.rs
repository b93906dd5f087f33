//! Which values the macros free at their last use (`Release`), and what that frees: the
//! contract on drop order and borrows (`contract`, `branches`), a generated corpus of kept
//! values (`generated`), the table of libraries' tensor types (`table`, with the library
//! features), and the debug-build notices read from a real program's stderr (`notices`).

mod branches;
mod contract;
mod generated;
mod notices;
mod support;
mod table;
