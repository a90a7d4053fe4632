//! Fresh names for instructions and computations that passes create.

use rustc_hash::{FxHashMap, FxHashSet};

/// The names in use, and for each base name the next suffix to try, so that
/// naming `n` copies of one base costs `O(n)` in all, not `O(n²)` (a module
/// that inlines thousands of calls to computations with the same local names
/// asks for `a`, `a.1`, `a.2`, ... thousands of times).
#[derive(Clone, Debug, Default)]
pub struct NameTable {
    taken: FxHashSet<String>,
    next: FxHashMap<String, u64>,
}

impl NameTable {
    /// A table holding `names`.
    pub fn from_names<I: IntoIterator<Item = String>>(names: I) -> NameTable {
        NameTable {
            taken: names.into_iter().collect(),
            next: FxHashMap::default(),
        }
    }

    /// Whether `name` is in use.
    pub fn contains(&self, name: &str) -> bool {
        self.taken.contains(name)
    }

    /// Records `name` as in use; false if it already was.
    pub fn insert(&mut self, name: String) -> bool {
        self.taken.insert(name)
    }

    /// `base` if it is free, else `base.K` for the smallest free `K ≥ 1`
    /// (names are never released, so every suffix below the remembered one
    /// is taken); the name is recorded as in use.
    pub fn fresh(&mut self, base: &str) -> String {
        if self.taken.insert(base.to_string()) {
            return base.to_string();
        }
        let mut k = self.next.get(base).copied().unwrap_or(1);
        let name = loop {
            let candidate = format!("{base}.{k}");
            k += 1;
            if self.taken.insert(candidate.clone()) {
                break candidate;
            }
        };
        self.next.insert(base.to_string(), k);
        name
    }
}

impl FromIterator<String> for NameTable {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> NameTable {
        NameTable::from_names(names)
    }
}

#[cfg(test)]
mod tests {
    use super::NameTable;

    #[test]
    fn fresh_names_take_the_smallest_free_suffix() {
        let mut t = NameTable::from_names(["a".to_string(), "a.2".to_string()]);
        assert_eq!(t.fresh("b"), "b");
        assert_eq!(t.fresh("a"), "a.1");
        assert_eq!(t.fresh("a"), "a.3");
        assert_eq!(t.fresh("a"), "a.4");
        assert!(t.insert("a.5".into()));
        assert_eq!(t.fresh("a"), "a.6");
        assert!(t.contains("a.6") && !t.contains("a.7"));
    }
}
