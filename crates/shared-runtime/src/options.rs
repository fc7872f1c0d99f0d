//! Sharing options of one delegate instance, parsed at run time from string key/value pairs.
//!
//! | key               | values                                                    | default     |
//! |-------------------|-----------------------------------------------------------|-------------|
//! | `shared.mode`     | `disabled`, `lookup_only`, `lookup_or_create`, `create_only` | `disabled` |
//! | `shared.token`    | any non-empty string                                      | `default`   |
//! | `shared.group_id` | unsigned 64-bit integer                                   | `0`         |
//!
//! An absent key keeps its default; a present key with an invalid value is an error naming the
//! option; an empty token with sharing enabled is an error. Keys without the `shared.` prefix are
//! left to the delegate.

use std::fmt;

use crate::key::SharedKey;

/// A sharing option is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A known option has a value it cannot take.
    #[error("option {option} = {value:?} is invalid: expected {expected}")]
    InvalidValue {
        /// The option key.
        option: &'static str,
        /// The value given.
        value: String,
        /// What it may be.
        expected: &'static str,
    },
    /// A `shared.*` key that does not exist (a typo would otherwise be silently ignored).
    #[error(
        "unknown option {0}: the sharing options are shared.mode, shared.token, shared.group_id"
    )]
    UnknownOption(String),
    /// Sharing is on but the token is empty.
    #[error(
        "option shared.token is empty but shared.mode is {mode}: a shared context needs a non-empty token"
    )]
    EmptyToken {
        /// The mode in effect.
        mode: Mode,
    },
}

/// How a delegate instance uses the shared registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Standalone: the delegate makes its own device; the registry is never touched.
    #[default]
    Disabled,
    /// Use the context registered under the key; a miss is an error.
    LookupOnly,
    /// Use the context under the key, creating it when absent.
    LookupOrCreate,
    /// Create and register a context under the key; an existing one is an error.
    CreateOnly,
}

impl Mode {
    /// The option value that names this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Disabled => "disabled",
            Mode::LookupOnly => "lookup_only",
            Mode::LookupOrCreate => "lookup_or_create",
            Mode::CreateOnly => "create_only",
        }
    }

    fn parse(value: &str) -> Option<Mode> {
        Some(match value.trim() {
            "disabled" => Mode::Disabled,
            "lookup_only" => Mode::LookupOnly,
            "lookup_or_create" => Mode::LookupOrCreate,
            "create_only" => Mode::CreateOnly,
            _ => return None,
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Option key for the mode.
pub const KEY_MODE: &str = "shared.mode";
/// Option key for the token.
pub const KEY_TOKEN: &str = "shared.token";
/// Option key for the group id.
pub const KEY_GROUP_ID: &str = "shared.group_id";

/// The sharing options of one delegate instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharingOptions {
    /// Mode.
    pub mode: Mode,
    /// Token (first half of the key).
    pub token: String,
    /// Group id (second half of the key).
    pub group_id: u64,
}

impl Default for SharingOptions {
    fn default() -> Self {
        SharingOptions {
            mode: Mode::Disabled,
            token: "default".to_owned(),
            group_id: 0,
        }
    }
}

impl SharingOptions {
    /// Options with sharing on in `mode` under the default key.
    pub fn with_mode(mode: Mode) -> Self {
        SharingOptions {
            mode,
            ..Self::default()
        }
    }

    /// The registry key these options name.
    pub fn key(&self) -> SharedKey {
        SharedKey::new(self.token.clone(), self.group_id)
    }

    /// Whether the registry is used.
    pub fn enabled(&self) -> bool {
        self.mode != Mode::Disabled
    }

    /// Parses the `shared.*` keys of `options`, starting from the defaults. Later keys win.
    pub fn parse<'a, I>(options: I) -> Result<SharingOptions, OptionsError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut out = SharingOptions::default();
        for (key, value) in options {
            match key {
                KEY_MODE => {
                    out.mode = Mode::parse(value).ok_or_else(|| OptionsError::InvalidValue {
                        option: KEY_MODE,
                        value: value.to_owned(),
                        expected: "one of disabled, lookup_only, lookup_or_create, create_only",
                    })?;
                }
                KEY_TOKEN => out.token = value.to_owned(),
                KEY_GROUP_ID => {
                    out.group_id =
                        value
                            .trim()
                            .parse()
                            .map_err(|_| OptionsError::InvalidValue {
                                option: KEY_GROUP_ID,
                                value: value.to_owned(),
                                expected: "an unsigned 64-bit integer",
                            })?;
                }
                other if other.starts_with("shared.") => {
                    return Err(OptionsError::UnknownOption(other.to_owned()));
                }
                _ => {}
            }
        }
        if out.enabled() && out.token.is_empty() {
            return Err(OptionsError::EmptyToken { mode: out.mode });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_keeps_defaults_and_foreign_keys_are_ignored() {
        let o = SharingOptions::parse([("vgf.zero_copy", "1")]).unwrap();
        assert_eq!(o, SharingOptions::default());
        assert!(!o.enabled());
    }

    #[test]
    fn every_mode_parses() {
        for m in [
            Mode::Disabled,
            Mode::LookupOnly,
            Mode::LookupOrCreate,
            Mode::CreateOnly,
        ] {
            let o = SharingOptions::parse([(KEY_MODE, m.as_str())]).unwrap();
            assert_eq!(o.mode, m);
        }
        let o = SharingOptions::parse([
            (KEY_MODE, "lookup_or_create"),
            (KEY_TOKEN, "app"),
            (KEY_GROUP_ID, "42"),
        ])
        .unwrap();
        assert_eq!(o.key(), SharedKey::new("app", 42));
    }

    #[test]
    fn invalid_values_name_the_option() {
        let e = SharingOptions::parse([(KEY_MODE, "sometimes")]).unwrap_err();
        assert!(e.to_string().contains("shared.mode"), "{e}");
        assert!(e.to_string().contains("sometimes"), "{e}");
        let e = SharingOptions::parse([(KEY_GROUP_ID, "-1")]).unwrap_err();
        assert!(e.to_string().contains("shared.group_id"), "{e}");
        let e = SharingOptions::parse([("shared.tokn", "x")]).unwrap_err();
        assert!(e.to_string().contains("shared.tokn"), "{e}");
    }

    #[test]
    fn empty_token_with_sharing_on_is_an_error() {
        let e = SharingOptions::parse([(KEY_MODE, "lookup_only"), (KEY_TOKEN, "")]).unwrap_err();
        assert_eq!(
            e,
            OptionsError::EmptyToken {
                mode: Mode::LookupOnly
            }
        );
        // With sharing disabled an empty token is harmless.
        assert!(SharingOptions::parse([(KEY_TOKEN, "")]).is_ok());
    }
}
