//! The README and every page of the docs book, as documentation: their Rust
//! blocks are doctests (`cargo test --doc -p postbox-docs`), so an example
//! that stops compiling fails the suite. The links are checked by
//! `tests/links.rs`.

#![allow(
    rustdoc::broken_intra_doc_links,
    rustdoc::invalid_html_tags,
    rustdoc::bare_urls
)]

include!(concat!(env!("OUT_DIR"), "/pages.rs"));
