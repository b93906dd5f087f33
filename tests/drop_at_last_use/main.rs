//! Which values the macros free at their last use (`DropAtLastUse`), and what that frees: the
//! contract on drop order and borrows (`contract`, `branches`), a generated corpus of kept
//! values (`generated`), the table of libraries' tensor types (`table`, with the library
//! features), the debug-build notices read from a real program's stderr (`notices`), and the
//! last shapes of third-party code that broke under the attributes, run and compared (`shapes`).

mod branches;
mod contract;
mod generated;
mod notices;
mod shapes;
mod support;
mod table;
