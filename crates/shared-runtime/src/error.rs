//! Errors of the shared runtime. All are `Clone`: a failed creation is handed to every caller
//! that waited for it.

use std::sync::Arc;

use crate::key::SharedKey;
pub use crate::options::OptionsError;

/// Everything that can go wrong in the shared runtime.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Invalid options.
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// Nothing is registered under the key.
    #[error("no shared context is registered under {key}{hint}")]
    NotFound {
        /// The key looked up.
        key: SharedKey,
        /// What the caller could do.
        hint: &'static str,
    },
    /// `create_only` found an existing context.
    #[error(
        "shared.mode create_only: a context is already registered under {key} (device '{device}', \
         generation {generation}); use lookup_or_create to reuse it or choose another key"
    )]
    AlreadyExists {
        /// The key.
        key: SharedKey,
        /// The existing context's device name.
        device: String,
        /// The existing context's generation.
        generation: u64,
    },
    /// `register` or `unregister` named a context other than the one under the key.
    #[error(
        "a different context is registered under {key} (generation {registered}, given {given})"
    )]
    WrongContext {
        /// The key.
        key: SharedKey,
        /// Generation of the context under the key.
        registered: u64,
        /// Generation of the context given.
        given: u64,
    },
    /// A context is being created under the key.
    #[error("a shared context is being created under {key}; retry after it is done")]
    Busy {
        /// The key.
        key: SharedKey,
    },
    /// Creating the context failed (every waiter receives the same error; the key stays free).
    #[error("creating the shared context under {key} failed: {source}")]
    CreateFailed {
        /// The key.
        key: SharedKey,
        /// Why.
        source: Arc<vk_core::Error>,
    },
    /// The shared device lacks what this delegate requires.
    #[error("the shared context under {key} cannot be used: {source}")]
    Unsupported {
        /// The key.
        key: SharedKey,
        /// The unmet requirements, each named.
        source: Arc<vk_core::Error>,
    },
    /// The context was invalidated (for example after a lost device).
    #[error("the shared context under {key} (generation {generation}) was invalidated")]
    Invalidated {
        /// The key.
        key: SharedKey,
        /// Its generation.
        generation: u64,
    },
}
