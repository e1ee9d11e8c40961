//! Every relative link in the README and the docs book points at a file
//! that exists, and every `#anchor` at a heading of that file (GitHub's and
//! mdBook's slugs: lower case, spaces to `-`, other punctuation dropped).
//! Also: every page of the book is in its SUMMARY.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md"), root().join("CHANGELOG.md")];
    walk(&root().join("docs/src"), &mut out);
    out
}

/// The text outside fenced code blocks and code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// `](target)` links of Markdown.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(j) => {
                out.push(
                    after[..j]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_owned(),
                );
                rest = &after[j..];
            }
            None => break,
        }
    }
    out
}

pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#').replace('`', "");
            let base = slug(&heading);
            // A repeated heading gets -1, -2, ...
            let mut s = base.clone();
            let mut n = 1;
            while seen.contains(&s) {
                s = format!("{base}-{n}");
                n += 1;
            }
            seen.insert(s);
        }
    }
    seen
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&prose(&text)) {
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
                continue;
            }
            if let Some(a) = anchor {
                if target.is_file() {
                    let t = std::fs::read_to_string(&target).unwrap();
                    if !anchors(&t).contains(a) {
                        broken.push(format!("{}: {link} (no such heading)", page.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary() {
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let listed: HashSet<PathBuf> = links(&summary).iter().map(|l| src.join(l)).collect();
    let missing: Vec<_> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md") && !listed.contains(p))
        .collect();
    assert!(
        missing.is_empty(),
        "pages missing from SUMMARY.md: {missing:?}"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Run the relay"), "run-the-relay");
    assert_eq!(slug("Amazon SQS and SNS"), "amazon-sqs-and-sns");
    assert_eq!(slug("What's `new`: 0.1"), "whats-new-01");
}
