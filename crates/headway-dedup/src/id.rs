//! Chunk fingerprints and the per-deployment key.
//!
//! Owns [`DedupKey`] (the secret 32-byte key shared by every appliance of one deployment),
//! [`ChunkId`] (the keyed BLAKE3 fingerprint of a chunk) and [`Digest`] (a 128-bit keyed digest
//! over a list of chunk ids, used to check runs and literal frames). It does no I/O.
//!
//! Why keyed, and why 256 bits for ids: a chunk id is the only thing a reference carries, so an
//! attacker who could craft two chunks with the same id could make a decoder emit their chunk in
//! place of another user's. With a secret key the attacker cannot compute ids offline at all, and
//! a full 256-bit BLAKE3 output leaves a 128-bit birthday bound even if the key leaks. The id is
//! also the store's index key, so we keep it whole rather than save 16 bytes per run token.
//!
//! The [`Digest`] over a run's ids is truncated to 128 bits: it only has to catch a store that
//! diverged from the peer's (an accident, not an adversary: every id in it is keyed already),
//! and it is derived from a separate key (`blake3::derive_key`) so it never collides by
//! construction with a chunk id.

use std::fmt;

mod batch;
mod lanes;

pub use batch::BatchHasher;

/// The per-deployment secret key for chunk fingerprints (32 bytes).
///
/// Every appliance of a deployment must use the same key; two appliances with different keys see
/// every reference as unresolvable (correct but no savings). `Debug` does not print the key.
#[derive(Clone, PartialEq, Eq)]
pub struct DedupKey {
    id_key: [u8; 32],
    digest_key: [u8; 32],
}

impl DedupKey {
    /// Wraps 32 secret bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        let digest_key = blake3::derive_key("headway-dedup 2026 run digest v1", &bytes);
        Self {
            id_key: bytes,
            digest_key,
        }
    }

    /// The fingerprint of `data` under this key.
    pub fn chunk_id(&self, data: &[u8]) -> ChunkId {
        ChunkId(*blake3::keyed_hash(&self.id_key, data).as_bytes())
    }

    /// A hasher for the ids of many chunks at once (faster than [`DedupKey::chunk_id`] per
    /// chunk; the same ids).
    pub fn batch_hasher(&self) -> BatchHasher {
        BatchHasher::new(&self.id_key)
    }

    /// A hasher for a [`Digest`] over a list of chunk ids; feed ids with [`DigestHasher::push`].
    pub fn digest_hasher(&self) -> DigestHasher {
        DigestHasher(blake3::Hasher::new_keyed(&self.digest_key))
    }

    /// The [`Digest`] over `ids`, in order.
    pub fn digest<'a>(&self, ids: impl IntoIterator<Item = &'a ChunkId>) -> Digest {
        let mut h = self.digest_hasher();
        for id in ids {
            h.push(id);
        }
        h.finish()
    }
}

impl fmt::Debug for DedupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DedupKey(..)")
    }
}

/// A chunk's fingerprint: keyed BLAKE3 of its bytes (see the module doc for the 256-bit choice).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId(pub [u8; 32]);

impl ChunkId {
    /// Length on the wire.
    pub const LEN: usize = 32;

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

/// A 128-bit keyed digest over an ordered list of chunk ids.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Digest(pub [u8; 16]);

impl Digest {
    /// Length on the wire.
    pub const LEN: usize = 16;
}

/// Incremental [`Digest`] computation, from [`DedupKey::digest_hasher`].
#[derive(Clone, Debug)]
pub struct DigestHasher(blake3::Hasher);

impl DigestHasher {
    /// Appends one id.
    pub fn push(&mut self, id: &ChunkId) {
        self.0.update(&id.0);
    }

    /// The digest of the ids pushed so far.
    pub fn finish(&self) -> Digest {
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.0.finalize().as_bytes()[..16]);
        Digest(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_key_and_data() {
        let a = DedupKey::new([1; 32]);
        let b = DedupKey::new([2; 32]);
        assert_ne!(a.chunk_id(b"x"), b.chunk_id(b"x"));
        assert_ne!(a.chunk_id(b"x"), a.chunk_id(b"y"));
        assert_eq!(a.chunk_id(b"x"), a.chunk_id(b"x"));
        assert_eq!(format!("{a:?}"), "DedupKey(..)");
    }

    #[test]
    fn digest_is_order_sensitive() {
        let k = DedupKey::new([7; 32]);
        let x = k.chunk_id(b"x");
        let y = k.chunk_id(b"y");
        assert_ne!(k.digest([&x, &y]), k.digest([&y, &x]));
        let mut h = k.digest_hasher();
        h.push(&x);
        h.push(&y);
        assert_eq!(h.finish(), k.digest([&x, &y]));
    }
}
