//! DynamoDB write units of one write, by DynamoDB's own rules, from the item as stored before
//! and after it and the table's index definitions. Pure: adapters describe their items in
//! [`Attr`] and their indexes in [`TableDef`]; nothing here knows trawl's layout, so when the
//! layout changes the figures follow.
//!
//! The rules (AWS DynamoDB Developer Guide):
//! - Item size: attribute names plus values; a string is its UTF-8 bytes, a number about one byte
//!   per two significant digits plus one, binary its bytes, null and boolean 1 byte, a list or a
//!   map 3 bytes plus its elements plus 1 byte per element, a set its elements
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html>).
//! - A write costs 1 WRU per 1 KB of the item, rounded up; an update or a replacing put is sized
//!   by the larger of the item before and after, a delete by the deleted item
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>).
//!   A conditional write whose condition fails is still charged, sized by the existing item
//!   (1 WRU at least).
//! - A global secondary index holds an item only when it has both of the index's key attributes
//!   (sparse indexes). A write that puts an item into an index costs one index write, one that
//!   takes it out one, one that changes an index key two (delete + put), one that changes only a
//!   projected attribute one, and one that changes neither nothing; each index write is sized by
//!   its index entry (the index keys, the table keys and the projected attributes), 1 KB units
//!   rounded up (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.Writes>).

use std::collections::BTreeMap;

/// One attribute value, as DynamoDB stores it.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    S(String),
    /// A number in DynamoDB's decimal text form.
    N(String),
    B(Vec<u8>),
    Bool(bool),
    Null,
    L(Vec<Attr>),
    M(BTreeMap<String, Attr>),
    Ss(Vec<String>),
    Ns(Vec<String>),
    Bs(Vec<Vec<u8>>),
}

/// An item: attribute name → value.
pub type Image = BTreeMap<String, Attr>;

/// What an index copies of an item beside the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projection {
    KeysOnly,
    Include(&'static [&'static str]),
    All,
}

/// A global secondary index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexDef {
    pub name: &'static str,
    pub hash: &'static str,
    pub range: Option<&'static str>,
    pub projection: Projection,
}

/// A table: its key attributes and its global secondary indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableDef {
    pub hash: &'static str,
    pub range: Option<&'static str>,
    pub indexes: &'static [IndexDef],
}

/// Bytes per write unit.
const WRITE_UNIT_BYTES: u64 = 1024;

/// The stored size of a number: one byte per two significant digits (leading and trailing
/// zeroes trimmed), plus one, plus one when negative.
fn number_size(text: &str) -> u64 {
    let negative = text.starts_with('-');
    let mantissa = text
        .trim_start_matches(['-', '+'])
        .split(['e', 'E'])
        .next()
        .unwrap_or_default();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len() as u64;
    significant.max(1).div_ceil(2) + 1 + u64::from(negative)
}

/// The stored size of a value, in bytes.
pub fn value_size(value: &Attr) -> u64 {
    match value {
        Attr::S(s) => s.len() as u64,
        Attr::N(n) => number_size(n),
        Attr::B(b) => b.len() as u64,
        Attr::Bool(_) | Attr::Null => 1,
        Attr::L(items) => 3 + items.iter().map(|v| value_size(v) + 1).sum::<u64>(),
        Attr::M(map) => {
            3 + map
                .iter()
                .map(|(k, v)| k.len() as u64 + value_size(v) + 1)
                .sum::<u64>()
        }
        Attr::Ss(set) => set.iter().map(|s| s.len() as u64).sum(),
        Attr::Ns(set) => set.iter().map(|n| number_size(n)).sum(),
        Attr::Bs(set) => set.iter().map(|b| b.len() as u64).sum(),
    }
}

/// The stored size of an item, in bytes: every attribute's name and value.
pub fn item_size(image: &Image) -> u64 {
    image
        .iter()
        .map(|(name, value)| name.len() as u64 + value_size(value))
        .sum()
}

/// Write units of writing `bytes` (1 KB units, rounded up, at least 1).
fn units(bytes: u64) -> u64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1)
}

/// Bytes one read unit reads.
const READ_UNIT_BYTES: u64 = 4096;

/// Read units of one read of `bytes`, in half units: 4 KB blocks, rounded up, at least one
/// (an absent item costs one too); a strongly consistent read a unit a block, an eventually
/// consistent one half. A read by key (a GetItem, each key of a BatchGetItem) is priced on its
/// item's size, a Query on the sizes of the items it read added up (indexes read eventually
/// consistent only).
pub fn read_half_units(bytes: u64, consistent: bool) -> u64 {
    let blocks = bytes.div_ceil(READ_UNIT_BYTES).max(1);
    if consistent { 2 * blocks } else { blocks }
}

/// Write units of one write: the table's and each index's (in `TableDef::indexes` order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteUnits {
    pub table: u64,
    pub indexes: Vec<(&'static str, u64)>,
}

impl WriteUnits {
    /// Table and index units together.
    pub fn total(&self) -> u64 {
        self.table + self.indexes.iter().map(|(_, n)| n).sum::<u64>()
    }
}

impl TableDef {
    /// The index's entry for `image`, None when the item is not in the index (a key missing).
    fn entry(&self, index: &IndexDef, image: &Image) -> Option<Image> {
        let keys = [Some(index.hash), index.range, Some(self.hash), self.range];
        if keys[..2].iter().flatten().any(|k| !image.contains_key(*k)) {
            return None;
        }
        let kept = |name: &str| {
            keys.iter().flatten().any(|k| *k == name)
                || match index.projection {
                    Projection::KeysOnly => false,
                    Projection::Include(names) => names.contains(&name),
                    Projection::All => true,
                }
        };
        Some(
            image
                .iter()
                .filter(|(name, _)| kept(name))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect(),
        )
    }

    /// The index key of an entry: hash and range values.
    fn index_key<'a>(index: &IndexDef, entry: &'a Image) -> (Option<&'a Attr>, Option<&'a Attr>) {
        (
            entry.get(index.hash),
            index.range.and_then(|r| entry.get(r)),
        )
    }

    /// Write units of a write that takes the item from `before` to `after` (None: absent; both
    /// None is nothing written). A delete is `after = None`, an insert `before = None`.
    pub fn write_units(&self, before: Option<&Image>, after: Option<&Image>) -> WriteUnits {
        let size = |image: Option<&Image>| image.map(item_size).unwrap_or(0);
        let table = match (before, after) {
            (None, None) => 0,
            _ => units(size(before).max(size(after))),
        };
        let indexes = self
            .indexes
            .iter()
            .map(|index| {
                let old = before.and_then(|i| self.entry(index, i));
                let new = after.and_then(|i| self.entry(index, i));
                let n = match (&old, &new) {
                    (None, None) => 0,
                    (Some(old), None) => units(item_size(old)),
                    (None, Some(new)) => units(item_size(new)),
                    (Some(old), Some(new)) if old == new => 0,
                    (Some(old), Some(new))
                        if Self::index_key(index, old) != Self::index_key(index, new) =>
                    {
                        units(item_size(old)) + units(item_size(new))
                    }
                    (Some(old), Some(new)) => units(item_size(old).max(item_size(new))),
                };
                (index.name, n)
            })
            .collect();
        WriteUnits { table, indexes }
    }

    /// Write units of a conditional write refused by its condition: the table is charged for
    /// the existing item (1 unit when there is none); no index changes.
    pub fn refused_write_units(&self, existing: Option<&Image>) -> WriteUnits {
        WriteUnits {
            table: units(existing.map(item_size).unwrap_or(0)),
            indexes: self.indexes.iter().map(|i| (i.name, 0)).collect(),
        }
    }

    /// Each index's key of `image` as text (`hash` or `hash|range`), for the indexes that hold
    /// it: where a write lands, for partition accounting.
    pub fn index_keys(&self, image: &Image) -> Vec<(&'static str, String)> {
        self.indexes
            .iter()
            .filter_map(|index| {
                let entry = self.entry(index, image)?;
                let (hash, _) = Self::index_key(index, &entry);
                Some((index.name, hash.map(key_text).unwrap_or_default()))
            })
            .collect()
    }
}

/// A key value as text.
pub fn key_text(value: &Attr) -> String {
    match value {
        Attr::S(s) | Attr::N(s) => s.clone(),
        Attr::B(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Attr {
        Attr::S(v.to_owned())
    }

    fn n(v: &str) -> Attr {
        Attr::N(v.to_owned())
    }

    fn image(pairs: &[(&str, Attr)]) -> Image {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    const BY_STATUS: IndexDef = IndexDef {
        name: "by-status",
        hash: "gsi_pk",
        range: Some("updated"),
        projection: Projection::Include(&["url"]),
    };
    const TABLE: TableDef = TableDef {
        hash: "pk",
        range: None,
        indexes: &[BY_STATUS],
    };

    #[test]
    fn sizes_follow_the_documented_rules() {
        // Names count; a string is its UTF-8 bytes.
        assert_eq!(item_size(&image(&[("pk", s("abc"))])), 5);
        assert_eq!(item_size(&image(&[("é", s("é"))])), 4);
        // Numbers: significant digits / 2 rounded up, + 1; zeroes at the ends trimmed.
        assert_eq!(value_size(&n("7")), 2);
        assert_eq!(value_size(&n("1764000000000")), 3);
        assert_eq!(value_size(&n("12345")), 4);
        assert_eq!(value_size(&n("-12345")), 5);
        assert_eq!(value_size(&n("0.0012")), 2);
        // Null and booleans one byte; a map: 3 + names + values + 1 per element.
        assert_eq!(value_size(&Attr::Null), 1);
        let map = Attr::M(image(&[("a", Attr::Bool(true)), ("bc", s("xyz"))]));
        assert_eq!(value_size(&map), 3 + (1 + 1 + 1) + (2 + 3 + 1));
        assert_eq!(value_size(&Attr::L(vec![n("1"), n("22")])), 3 + 3 + 3);
        assert_eq!(value_size(&Attr::Ss(vec!["ab".into(), "c".into()])), 3);
    }

    #[test]
    fn table_units_round_each_item_up_to_1_kb_and_take_the_larger_image() {
        let small = image(&[("pk", s("k"))]);
        let big = image(&[("pk", s("k")), ("body", s(&"x".repeat(1500)))]);
        assert_eq!(TABLE.write_units(None, Some(&small)).table, 1);
        assert_eq!(TABLE.write_units(None, Some(&big)).table, 2);
        // An update shrinking the item is sized by the item before.
        assert_eq!(TABLE.write_units(Some(&big), Some(&small)).table, 2);
        assert_eq!(TABLE.write_units(Some(&big), None).table, 2);
        assert_eq!(TABLE.write_units(None, None).total(), 0);
        assert_eq!(TABLE.refused_write_units(None).total(), 1);
        assert_eq!(TABLE.refused_write_units(Some(&big)).total(), 2);
    }

    #[test]
    fn index_writes_follow_key_and_projection_changes() {
        let base = [("pk", s("t1")), ("gsi_pk", s("c#0")), ("updated", n("1"))];
        let entry = image(&[base[0].clone(), base[1].clone(), base[2].clone()]);
        let index = |w: WriteUnits| w.indexes[0].1;
        // Insert with both keys: one index write; without the range key: sparse, none.
        assert_eq!(index(TABLE.write_units(None, Some(&entry))), 1);
        let keyless = image(&[("pk", s("t1")), ("gsi_pk", s("c#0"))]);
        assert_eq!(index(TABLE.write_units(None, Some(&keyless))), 0);
        // A key change: delete + put.
        let mut moved = entry.clone();
        moved.insert("updated".into(), n("2"));
        assert_eq!(index(TABLE.write_units(Some(&entry), Some(&moved))), 2);
        // A projected attribute changes: one write; one that is not projected: none.
        let mut projected = entry.clone();
        projected.insert("url".into(), s("http://a/"));
        assert_eq!(index(TABLE.write_units(Some(&entry), Some(&projected))), 1);
        let mut other = entry.clone();
        other.insert("body".into(), s("not projected"));
        let w = TABLE.write_units(Some(&entry), Some(&other));
        assert_eq!((w.table, index(w)), (1, 0));
        // Leaving the index (a key removed) or the item deleted: one write.
        assert_eq!(index(TABLE.write_units(Some(&entry), Some(&keyless))), 1);
        assert_eq!(index(TABLE.write_units(Some(&entry), None)), 1);
        // Never in the index: nothing.
        assert_eq!(index(TABLE.write_units(Some(&keyless), Some(&keyless))), 0);
    }

    #[test]
    fn index_entries_are_sized_by_what_they_project() {
        let long = "x".repeat(1100);
        let all = TableDef {
            indexes: &[IndexDef {
                projection: Projection::All,
                ..BY_STATUS
            }],
            ..TABLE
        };
        let item = image(&[
            ("pk", s("t1")),
            ("gsi_pk", s("c#0")),
            ("updated", n("1")),
            ("body", s(&long)),
        ]);
        // Projecting everything copies the 1.1 KB body: 2 units; keys and `url` only: 1.
        assert_eq!(all.write_units(None, Some(&item)).indexes[0].1, 2);
        assert_eq!(TABLE.write_units(None, Some(&item)).indexes[0].1, 1);
        assert_eq!(
            TABLE.index_keys(&item),
            vec![("by-status", "c#0".to_owned())]
        );
    }

    #[test]
    fn reads_are_priced_by_4_kb_blocks_halved_when_eventual() {
        assert_eq!(read_half_units(0, true), 2, "an absent item costs a unit");
        assert_eq!(read_half_units(0, false), 1);
        assert_eq!(read_half_units(4096, true), 2);
        assert_eq!(read_half_units(4097, true), 4);
        assert_eq!(read_half_units(10_000, false), 3);
    }
}
