//! Constants shared by graphs built from one model: [`ConstantPool`].
//!
//! A language model runs as several graphs (a prompt chunk of each length, one token) over
//! the same weights and the same KV cache. Graphs built with one pool
//! ([`crate::BuildOptions::constants`]) give each constant one device buffer: the first build
//! that needs it allocates and uploads it, later builds bind it. State a graph writes in place
//! ([`crate::GraphBuilder::assign`]) is then seen by the others.
//!
//! A constant is the same one when its name and bytes are: a model file's weights by where
//! they lie in the file, bytes of their own by length and xxh3 hash.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use vk_core::{Buffer, BufferSlice, Device, HostTransfer, Submission, vk};

use crate::build::{BufKind, MemoryPlan, USAGE, upload};
use crate::error::{Error, Result};
use crate::graph::{ConstBytes, Storage, StorageKind};

/// Device buffers of constants, shared by every graph built with a clone of the pool on one
/// device. Buffers live as long as the pool or a graph that binds them.
#[derive(Clone, Default)]
pub struct ConstantPool {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    device: Option<vk::Device>,
    entries: HashMap<Key, Entry>,
}

struct Entry {
    buffer: Arc<Buffer>,
    /// Keeps a shared constant's owner alive, so that its address names it.
    _owner: Option<Arc<[u8]>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// A range of an owner's bytes (a model file), by the owner's address.
    Shared(String, usize, Range<usize>),
    /// Bytes of its own, by length and hash.
    Own(String, usize, u64),
}

impl std::fmt::Debug for ConstantPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (count, bytes) = self.usage();
        f.debug_struct("ConstantPool")
            .field("constants", &count)
            .field("bytes", &bytes)
            .finish()
    }
}

/// A constant the pool lacks: its key, planned buffer, owner and bytes.
type Fresh<'a> = (Key, usize, Option<Arc<[u8]>>, &'a [u8]);

/// What a build takes from the pool: slices by planned buffer, and the buffers to keep alive.
#[derive(Default)]
pub(crate) struct Pooled {
    pub slices: BTreeMap<usize, BufferSlice>,
    pub keep: Vec<Arc<Buffer>>,
}

impl ConstantPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many constants the pool holds, and their bytes on the device.
    pub fn usage(&self) -> (usize, u64) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = inner.entries.values().map(|e| e.buffer.size()).sum();
        (inner.entries.len(), bytes)
    }

    /// The planned constant buffers of a build: those the pool holds are bound, the others
    /// allocated, uploaded and added.
    pub(crate) fn bind(
        &self,
        device: &Device,
        io: (&mut Submission, &mut HostTransfer),
        (storages, names, mem): (&[Storage], &[&str], &MemoryPlan),
        direct: bool,
    ) -> Result<Pooled> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let handle = device.raw().handle();
        if *inner.device.get_or_insert(handle) != handle {
            return Err(Error::Graph(
                "the constant pool holds buffers of another device".into(),
            ));
        }
        let mut out = Pooled::default();
        let mut fresh: Vec<Fresh<'_>> = Vec::new();
        let mut new_buffers = Vec::new();
        for (s, st) in storages.iter().enumerate() {
            let (StorageKind::Const(data), Some(slot)) = (&st.kind, mem.slot_of[s]) else {
                continue;
            };
            if mem.buffers[slot].1 != BufKind::Const || out.slices.contains_key(&slot) {
                continue;
            }
            let (key, owner) = key_of(names[s], data);
            if let Some(e) = inner.entries.get(&key) {
                out.slices.insert(slot, e.buffer.slice(None));
                out.keep.push(e.buffer.clone());
                continue;
            }
            let location = crate::build::location(BufKind::Const, direct);
            let what = format!(
                "pooled constant '{}' ({} bytes)",
                names[s], mem.buffers[slot].0
            );
            new_buffers.push(Buffer::new(
                device,
                mem.buffers[slot].0,
                location,
                USAGE,
                &what,
            )?);
            fresh.push((key, slot, owner, data));
        }
        let items: Vec<(usize, &[u8])> = fresh.iter().enumerate().map(|(i, f)| (i, f.3)).collect();
        upload(device, io, &mut new_buffers, &items)?;
        for ((key, slot, owner, _), buffer) in fresh.into_iter().zip(new_buffers) {
            let buffer = Arc::new(buffer);
            out.slices.insert(slot, buffer.slice(None));
            out.keep.push(buffer.clone());
            inner.entries.insert(
                key,
                Entry {
                    buffer,
                    _owner: owner,
                },
            );
        }
        Ok(out)
    }
}

fn key_of(name: &str, data: &ConstBytes) -> (Key, Option<Arc<[u8]>>) {
    match data {
        ConstBytes::Shared(owner, range) => (
            Key::Shared(
                name.to_owned(),
                Arc::as_ptr(owner).cast::<u8>() as usize,
                range.clone(),
            ),
            Some(owner.clone()),
        ),
        ConstBytes::Own(bytes) => (
            Key::Own(
                name.to_owned(),
                bytes.len(),
                xxhash_rust::xxh3::xxh3_64(bytes),
            ),
            None,
        ),
    }
}
