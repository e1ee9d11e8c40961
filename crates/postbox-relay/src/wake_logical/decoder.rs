//! Just enough of the pgoutput protocol to tell which schemas a transaction
//! inserted into.

use std::collections::{HashMap, HashSet};

/// Which schemas a decoded transaction inserted into.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Touched {
    Schemas(Vec<String>),
    /// An insert into a relation whose description was not seen (never
    /// expected): wake every logical schema rather than guess.
    Unknown,
}

/// Just enough of pgoutput (protocol version 1): Relation messages, to map a
/// relation id to its schema, and Insert messages, to see which relations a
/// transaction inserted into.
#[derive(Default)]
pub(crate) struct Decoder {
    relations: HashMap<u32, String>,
    touched: HashSet<String>,
    unknown: bool,
    open: bool,
}

impl Decoder {
    pub(crate) fn begin(&mut self) {
        self.touched.clear();
        self.unknown = false;
        self.open = true;
    }

    pub(crate) fn in_transaction(&self) -> bool {
        self.open
    }

    pub(crate) fn change(&mut self, data: &[u8]) {
        match data.first() {
            // Relation: 'R', oid u32, namespace\0, name\0, ...
            Some(b'R') => {
                if let Some(oid) = oid(data) {
                    if let Some(ns) = data[5..].split(|b| *b == 0).next() {
                        self.relations
                            .insert(oid, String::from_utf8_lossy(ns).into_owned());
                    }
                }
            }
            // Insert: 'I', oid u32, 'N', tuple
            Some(b'I') => match oid(data).and_then(|o| self.relations.get(&o)) {
                Some(ns) => {
                    self.touched.insert(ns.clone());
                }
                None => self.unknown = true,
            },
            _ => {}
        }
    }

    pub(crate) fn commit(&mut self) -> Touched {
        self.open = false;
        if self.unknown {
            self.unknown = false;
            self.touched.clear();
            return Touched::Unknown;
        }
        let mut names: Vec<String> = self.touched.drain().collect();
        names.sort();
        Touched::Schemas(names)
    }
}

pub(crate) fn oid(data: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(1..5)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn relation(oid: u32, ns: &str, name: &str) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(oid.to_be_bytes());
        m.extend(ns.as_bytes());
        m.push(0);
        m.extend(name.as_bytes());
        m.extend([0, b'd', 0, 0]);
        m
    }

    pub(crate) fn insert(oid: u32) -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend(oid.to_be_bytes());
        m.extend([b'N', 0, 0]);
        m
    }

    #[test]
    pub(crate) fn wakes_only_the_schemas_a_transaction_inserted_into() {
        let mut d = Decoder::default();
        d.begin();
        d.change(&relation(10, "shop", "outbox"));
        d.change(&insert(10));
        d.change(&insert(10));
        assert!(d.in_transaction());
        assert_eq!(d.commit(), Touched::Schemas(vec!["shop".into()]));
        assert!(!d.in_transaction());
        // The relation is known from now on; a second schema joins.
        d.begin();
        d.change(&insert(10));
        d.change(&relation(11, "billing", "outbox"));
        d.change(&insert(11));
        assert_eq!(
            d.commit(),
            Touched::Schemas(vec!["billing".into(), "shop".into()])
        );
        // A transaction with no insert (e.g. a logical message) wakes nobody.
        d.begin();
        assert_eq!(d.commit(), Touched::Schemas(vec![]));
        // An insert into an unseen relation wakes everyone.
        d.begin();
        d.change(&insert(99));
        assert_eq!(d.commit(), Touched::Unknown);
        // Truncated messages are ignored, not a panic.
        d.begin();
        d.change(b"I\x00");
        d.change(b"R");
        assert_eq!(d.commit(), Touched::Unknown);
    }
}
