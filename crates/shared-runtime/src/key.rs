//! Registry keys.

use std::fmt;

/// The key of a shared context: a token and a group id. Hashed with the standard library's
/// `Hash` over both fields (SipHash in the registry's map), never by hand-mixing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedKey {
    /// Application-chosen token.
    pub token: String,
    /// Group id within the token.
    pub group_id: u64,
}

impl SharedKey {
    /// A key.
    pub fn new(token: impl Into<String>, group_id: u64) -> Self {
        SharedKey {
            token: token.into(),
            group_id,
        }
    }
}

impl fmt::Display for SharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{token {:?}, group {}}}", self.token, self.group_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn both_fields_distinguish_keys() {
        let keys: HashSet<SharedKey> = [
            SharedKey::new("a", 0),
            SharedKey::new("a", 1),
            SharedKey::new("b", 0),
            SharedKey::new("a", 0),
        ]
        .into_iter()
        .collect();
        assert_eq!(keys.len(), 3);
        assert_eq!(SharedKey::new("t", 7).to_string(), "{token \"t\", group 7}");
    }
}
