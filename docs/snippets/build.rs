//! One module per Markdown file of the README and the book, whose doc is
//! the file: `cargo test --doc -p postbox-docs` compiles every Rust block.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    collect(&root.join("docs/src"), &mut files);
    files.sort();
    let mut out = String::new();
    for (i, f) in files.iter().enumerate() {
        println!("cargo:rerun-if-changed={}", f.display());
        let _ = writeln!(
            out,
            "#[doc = include_str!({:?})]\npub mod page_{i} {{}}",
            f.canonicalize().unwrap().display().to_string()
        );
    }
    println!("cargo:rerun-if-changed={}", root.join("docs/src").display());
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("pages.rs");
    std::fs::write(dest, out).unwrap();
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, files);
        } else if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
}
