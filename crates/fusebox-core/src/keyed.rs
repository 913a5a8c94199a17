//! A map looked up by hash and walked in key order.
//!
//! Breakers and observed latency windows are looked up several times for
//! every outcome on every node, and walked in key order only by listings,
//! snapshots and namespace scans. A `BTreeMap` makes each lookup about ten
//! comparisons of names (most of applying an outcome, itself a fifth of a
//! node's CPU under outcome load), so [`KeyedMap`] keeps the values in a
//! `HashMap` and their order in a `BTreeSet` beside it, both holding one
//! shared copy of each key.
//!
//! The hash map is never walked, so its order (and its random seeds, which
//! keep colliding names from being worked out in advance) cannot reach the
//! replicated state: every walk goes through the ordered set, and the
//! encoding is a `BTreeMap`'s, byte for byte.

use serde::de::Deserializer;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::Hash;
use std::ops::RangeBounds;
use std::sync::Arc;

/// The hash of the indexes: foldhash, from a seed chosen once per process
/// and one of each map's own.
pub(crate) type Hashing = foldhash::fast::RandomState;

/// Values by key: `get` hashes, `iter` and `range` go in key order.
pub struct KeyedMap<K, V> {
    values: HashMap<Arc<K>, V, Hashing>,
    order: BTreeSet<Arc<K>>,
}

impl<K: Ord + Hash, V> KeyedMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        KeyedMap {
            values: HashMap::default(),
            order: BTreeSet::new(),
        }
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// The value of `key`.
    pub fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        Arc<K>: Borrow<Q>,
    {
        self.values.get(key)
    }

    /// The value of `key`, to change.
    pub fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        Arc<K>: Borrow<Q>,
    {
        self.values.get_mut(key)
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        Arc<K>: Borrow<Q>,
    {
        self.values.contains_key(key)
    }

    /// Sets `key`'s value; returns the one it replaces.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if let Some(old) = self.values.get_mut(&key) {
            return Some(std::mem::replace(old, value));
        }
        let key = Arc::new(key);
        self.order.insert(Arc::clone(&key));
        self.values.insert(key, value)
    }

    /// Takes `key`'s value out.
    pub fn remove<Q: Hash + Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        Arc<K>: Borrow<Q>,
    {
        let value = self.values.remove(key)?;
        self.order.remove(key);
        Some(value)
    }

    /// Keeps only the entries `keep` says to, deciding in key order.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let values = &mut self.values;
        self.order.retain(|key| {
            let kept = values.get(key).is_some_and(|value| keep(&**key, value));
            if !kept {
                values.remove(key);
            }
            kept
        });
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_ {
        self.order.iter().filter_map(|key| self.entry(key))
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> + '_ {
        self.order.iter().map(|key| &**key)
    }

    /// The entries whose keys are in `range`, in key order.
    pub fn range<Q: Ord + ?Sized, R: RangeBounds<Q>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)> + '_
    where
        Arc<K>: Borrow<Q>,
    {
        self.order.range(range).filter_map(|key| self.entry(key))
    }

    /// One entry of the ordered set with its value. Every key of the set
    /// has one (`insert`, `remove` and `retain` change both together).
    fn entry<'a>(&'a self, key: &'a Arc<K>) -> Option<(&'a K, &'a V)> {
        let value = self.values.get(key);
        debug_assert!(value.is_some(), "every ordered key has a value");
        value.map(|value| (&**key, value))
    }
}

impl<K: Ord + Hash, V> Default for KeyedMap<K, V> {
    fn default() -> Self {
        KeyedMap::new()
    }
}

impl<K, V: Clone> Clone for KeyedMap<K, V> {
    /// Shares the keys (they never change) and copies the values.
    fn clone(&self) -> Self {
        KeyedMap {
            values: self.values.clone(),
            order: self.order.clone(),
        }
    }
}

impl<K: Ord + Hash, V: PartialEq> PartialEq for KeyedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<K: Ord + Hash + fmt::Debug, V: fmt::Debug> fmt::Debug for KeyedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Ord + Hash, V> FromIterator<(K, V)> for KeyedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut map = KeyedMap::new();
        for (key, value) in entries {
            map.insert(key, value);
        }
        map
    }
}

/// Encoded exactly as a `BTreeMap` of the same entries is.
impl<K: Ord + Hash + Serialize, V: Serialize> Serialize for KeyedMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // With its length first, as postcard needs and a `BTreeMap` gives:
        // the number of entries the walk below writes.
        let mut map = serializer.serialize_map(Some(self.order.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de, K, V> Deserialize<'de> for KeyedMap<K, V>
where
    K: Ord + Hash + Deserialize<'de>,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let entries = BTreeMap::<K, V>::deserialize(deserializer)?;
        Ok(entries.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> String {
        k.to_string()
    }

    fn map(keys: &[&str]) -> KeyedMap<String, usize> {
        keys.iter().map(|k| (k.to_string(), k.len())).collect()
    }

    #[test]
    fn walks_in_key_order_whatever_the_insertion_order() {
        let m = map(&["pear", "apple", "fig", "banana"]);
        let keys: Vec<&String> = m.keys().collect();
        assert_eq!(keys, ["apple", "banana", "fig", "pear"]);
        let range: Vec<(&String, &usize)> = m.range(key("b")..key("g")).collect();
        assert_eq!(
            range,
            [(&"banana".to_string(), &6), (&"fig".to_string(), &3)]
        );
        assert_eq!(m.iter().next_back(), Some((&"pear".to_string(), &4)));
    }

    #[test]
    fn insert_replace_remove_and_retain_keep_the_order_and_the_values_together() {
        let mut m = map(&["a", "b", "c", "d"]);
        assert_eq!(m.insert("b".into(), 20), Some(1));
        assert_eq!(m.insert("e".into(), 5), None);
        assert_eq!(m.remove(&key("c")), Some(1));
        assert_eq!(m.remove(&key("c")), None);
        if let Some(v) = m.get_mut(&key("a")) {
            *v = 10;
        }
        let mut seen = Vec::new();
        m.retain(|k, v| {
            seen.push(k.clone());
            *v != 1
        });
        assert_eq!(seen, ["a", "b", "d", "e"], "retain decides in key order");
        let entries: Vec<(&String, &usize)> = m.iter().collect();
        assert_eq!(
            entries,
            [
                (&"a".to_string(), &10),
                (&"b".to_string(), &20),
                (&"e".to_string(), &5)
            ]
        );
        assert_eq!(m.len(), 3);
        assert!(!m.contains_key(&key("d")) && m.contains_key(&key("e")));
        assert_eq!(m.order.len(), m.values.len());
    }

    #[test]
    fn encodes_as_the_btree_map_of_the_same_entries_and_decodes_back() {
        let m = map(&["zeta", "alpha", "mu"]);
        let tree: BTreeMap<String, usize> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let bytes = postcard::to_allocvec(&m).unwrap_or_default();
        assert!(!bytes.is_empty());
        assert_eq!(bytes, postcard::to_allocvec(&tree).unwrap_or_default());
        assert_eq!(
            serde_json::to_string(&m).ok(),
            serde_json::to_string(&tree).ok()
        );
        let back: KeyedMap<String, usize> =
            postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("decodes: {e}"));
        assert_eq!(back, m);
        assert_ne!(back, map(&["zeta", "alpha"]));
    }

    #[test]
    fn equal_maps_compare_equal_however_they_were_built() {
        let mut built = map(&["c", "x"]);
        built.insert("b".into(), 1);
        built.remove(&key("x"));
        assert_eq!(built, map(&["b", "c"]));
        assert_eq!(format!("{built:?}"), r#"{"b": 1, "c": 1}"#);
        assert_eq!(built.clone(), built);
    }

    /// One step of the model test.
    #[derive(Clone, Debug)]
    enum Step {
        Insert(u8, u16),
        Remove(u8),
        Change(u8, u16),
        RetainAbove(u16),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Step::Insert(k, v)),
            2 => any::<u8>().prop_map(Step::Remove),
            2 => (any::<u8>(), any::<u16>()).prop_map(|(k, v)| Step::Change(k, v)),
            1 => any::<u16>().prop_map(Step::RetainAbove),
        ]
    }

    proptest::proptest! {
        /// Whatever is done to it, it holds and walks exactly what a
        /// `BTreeMap` given the same steps does, and encodes the same bytes.
        #[test]
        fn behaves_as_a_btree_map(
            steps in proptest::collection::vec(step(), 0..200),
            from in proptest::prelude::any::<u8>(),
        ) {
            let mut keyed: KeyedMap<u8, u16> = KeyedMap::new();
            let mut model: BTreeMap<u8, u16> = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Insert(k, v) => {
                        proptest::prop_assert_eq!(keyed.insert(k, v), model.insert(k, v));
                    }
                    Step::Remove(k) => {
                        proptest::prop_assert_eq!(keyed.remove(&k), model.remove(&k));
                    }
                    Step::Change(k, v) => {
                        if let Some(x) = keyed.get_mut(&k) {
                            *x = v;
                        }
                        if let Some(x) = model.get_mut(&k) {
                            *x = v;
                        }
                    }
                    Step::RetainAbove(floor) => {
                        keyed.retain(|_, v| *v > floor);
                        model.retain(|_, v| *v > floor);
                    }
                }
                proptest::prop_assert_eq!(keyed.len(), model.len());
            }
            proptest::prop_assert!(keyed.iter().eq(model.iter()));
            proptest::prop_assert!(keyed.range(from..).eq(model.range(from..)));
            proptest::prop_assert!(keyed.keys().rev().eq(model.keys().rev()));
            for k in 0..=u8::MAX {
                proptest::prop_assert_eq!(keyed.get(&k), model.get(&k));
                proptest::prop_assert_eq!(keyed.contains_key(&k), model.contains_key(&k));
            }
            proptest::prop_assert_eq!(keyed.order.len(), keyed.values.len());
            proptest::prop_assert_eq!(
                postcard::to_allocvec(&keyed).ok(),
                postcard::to_allocvec(&model).ok()
            );
        }
    }
}
