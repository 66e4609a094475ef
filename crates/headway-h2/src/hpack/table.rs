//! HPACK's two tables (RFC 7541 §2.3): the static table, and the decoder's dynamic table.
//!
//! Owns the static table as ready-made [`Field`]s (so an indexed static field is a clone of
//! `'static` data, and a static name never parses), the encoder's lookup of a static name, and
//! [`DynamicTable`] with its size accounting and eviction (RFC 7541 §4). It does not read or
//! write the wire: the decoder and the encoder in the parent module do.
//!
//! Invariant of [`DynamicTable`]: `size` is the sum of its entries' sizes and never exceeds
//! `capacity`.

use std::collections::VecDeque;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};

use super::{Field, Pseudo};

/// The number of entries of the static table (RFC 7541 Appendix A); dynamic indexes follow it.
pub(crate) const STATIC_LEN: usize = 61;

/// RFC 7541 §4.1: an entry's size is its name's length, its value's length and 32.
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// A static-table entry whose name is a pseudo-header.
const fn pseudo(kind: Pseudo, value: &'static [u8]) -> Field {
    Field::Pseudo(kind, Bytes::from_static(value))
}

/// A static-table entry whose name is a regular field.
const fn header(name: HeaderName, value: &'static str) -> Field {
    Field::Header(name, HeaderValue::from_static(value))
}

/// RFC 7541 Appendix A: the static table; index `i` (1-based on the wire) is `STATIC[i - 1]`.
pub(crate) static STATIC: [Field; STATIC_LEN] = [
    pseudo(Pseudo::Authority, b""),
    pseudo(Pseudo::Method, b"GET"),
    pseudo(Pseudo::Method, b"POST"),
    pseudo(Pseudo::Path, b"/"),
    pseudo(Pseudo::Path, b"/index.html"),
    pseudo(Pseudo::Scheme, b"http"),
    pseudo(Pseudo::Scheme, b"https"),
    pseudo(Pseudo::Status, b"200"),
    pseudo(Pseudo::Status, b"204"),
    pseudo(Pseudo::Status, b"206"),
    pseudo(Pseudo::Status, b"304"),
    pseudo(Pseudo::Status, b"400"),
    pseudo(Pseudo::Status, b"404"),
    pseudo(Pseudo::Status, b"500"),
    header(header::ACCEPT_CHARSET, ""),
    header(header::ACCEPT_ENCODING, "gzip, deflate"),
    header(header::ACCEPT_LANGUAGE, ""),
    header(header::ACCEPT_RANGES, ""),
    header(header::ACCEPT, ""),
    header(header::ACCESS_CONTROL_ALLOW_ORIGIN, ""),
    header(header::AGE, ""),
    header(header::ALLOW, ""),
    header(header::AUTHORIZATION, ""),
    header(header::CACHE_CONTROL, ""),
    header(header::CONTENT_DISPOSITION, ""),
    header(header::CONTENT_ENCODING, ""),
    header(header::CONTENT_LANGUAGE, ""),
    header(header::CONTENT_LENGTH, ""),
    header(header::CONTENT_LOCATION, ""),
    header(header::CONTENT_RANGE, ""),
    header(header::CONTENT_TYPE, ""),
    header(header::COOKIE, ""),
    header(header::DATE, ""),
    header(header::ETAG, ""),
    header(header::EXPECT, ""),
    header(header::EXPIRES, ""),
    header(header::FROM, ""),
    header(header::HOST, ""),
    header(header::IF_MATCH, ""),
    header(header::IF_MODIFIED_SINCE, ""),
    header(header::IF_NONE_MATCH, ""),
    header(header::IF_RANGE, ""),
    header(header::IF_UNMODIFIED_SINCE, ""),
    header(header::LAST_MODIFIED, ""),
    header(header::LINK, ""),
    header(header::LOCATION, ""),
    header(header::MAX_FORWARDS, ""),
    header(header::PROXY_AUTHENTICATE, ""),
    header(header::PROXY_AUTHORIZATION, ""),
    header(header::RANGE, ""),
    header(header::REFERER, ""),
    header(header::REFRESH, ""),
    header(header::RETRY_AFTER, ""),
    header(header::SERVER, ""),
    header(header::SET_COOKIE, ""),
    header(header::STRICT_TRANSPORT_SECURITY, ""),
    header(header::TRANSFER_ENCODING, ""),
    header(header::USER_AGENT, ""),
    header(header::VARY, ""),
    header(header::VIA, ""),
    header(header::WWW_AUTHENTICATE, ""),
];

/// The names of the static table's regular fields (indexes 15–61), for the encoder's lookup.
const STATIC_NAMES: [&str; STATIC_LEN - FIRST_REGULAR + 1] = [
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "accept",
    "access-control-allow-origin",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-range",
    "content-type",
    "cookie",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "link",
    "location",
    "max-forwards",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "refresh",
    "retry-after",
    "server",
    "set-cookie",
    "strict-transport-security",
    "transfer-encoding",
    "user-agent",
    "vary",
    "via",
    "www-authenticate",
];

/// The static index of the first regular (not pseudo) field, `accept-charset`.
const FIRST_REGULAR: usize = 15;

/// The slots of the hash table of [`STATIC_NAMES`]: a power of two, about 2.7 times the names,
/// so that most lookups find their name in the first slot.
const NAME_SLOTS: usize = 128;

/// An open-addressing hash table from a name's [`name_hash`] to its static index (0: empty
/// slot), built at compile time. A lookup costs one hash of a few bytes and, almost always, one
/// comparison of strings — not a scan of the 47 names.
static NAME_INDEX: [u8; NAME_SLOTS] = build_name_index();

/// A cheap hash of a header name: its length, first, middle and last bytes. Distinguishes
/// the static names well enough for [`NAME_INDEX`]; other names cost one probe more at most
/// now and then.
const fn name_hash(name: &[u8]) -> usize {
    let len = name.len();
    if len == 0 {
        return 0;
    }
    let h = (len as u32)
        .wrapping_mul(0x9e37_79b1)
        .wrapping_add((name[0] as u32).wrapping_mul(0x85eb_ca6b))
        .wrapping_add((name[len / 2] as u32).wrapping_mul(0xc2b2_ae35))
        .wrapping_add((name[len - 1] as u32).wrapping_mul(0x27d4_eb2f));
    (h >> 16) as usize % NAME_SLOTS
}

/// Builds [`NAME_INDEX`] by linear probing.
const fn build_name_index() -> [u8; NAME_SLOTS] {
    let mut slots = [0u8; NAME_SLOTS];
    let mut i = 0;
    while i < STATIC_NAMES.len() {
        let mut slot = name_hash(STATIC_NAMES[i].as_bytes());
        while slots[slot] != 0 {
            slot = (slot + 1) % NAME_SLOTS;
        }
        slots[slot] = (FIRST_REGULAR + i) as u8;
        i += 1;
    }
    slots
}

/// The static index of the regular field name `name` (15–61; 16 for `accept-encoding`), if the
/// static table has it.
pub(crate) fn static_name_index(name: &str) -> Option<usize> {
    let bytes = name.as_bytes();
    let mut slot = name_hash(bytes);
    loop {
        let index = usize::from(NAME_INDEX[slot]);
        if index == 0 {
            return None;
        }
        if STATIC_NAMES[index - FIRST_REGULAR].as_bytes() == bytes {
            return Some(index);
        }
        slot = (slot + 1) % NAME_SLOTS;
    }
}

/// The name of a table entry, parsed once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Name {
    /// One of the pseudo-header names.
    Pseudo(Pseudo),
    /// A valid lowercase field name.
    Header(HeaderName),
}

impl Name {
    /// The name's length in bytes, for the sizes of RFC 7541 §4.1.
    pub(crate) fn len(&self) -> usize {
        match self {
            Name::Pseudo(kind) => kind.as_str().len(),
            Name::Header(name) => name.as_str().len(),
        }
    }
}

/// What a dynamic-table entry holds. A field that was not valid HTTP still takes its place and
/// its size in the table (the encoder's table has it), but what was wrong is kept so that a
/// reference to it is malformed again, while a reference to just its valid name is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A valid field, cloned out on every reference.
    Valid(Field),
    /// A valid name with an invalid value.
    BadValue(Name),
    /// An invalid name (its value does not matter: no field with this name is valid), and the
    /// name's length, for the size of a field that refers to it by index.
    BadName {
        /// The length of the name as sent.
        name_len: usize,
    },
}

/// One entry of the dynamic table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The field or what was wrong with it.
    pub(crate) slot: Slot,
    /// RFC 7541 §4.1: name length + value length + 32, of the bytes as sent.
    pub(crate) size: usize,
}

/// The decoder's dynamic table (RFC 7541 §2.3.2, §4): newest entry first, so that the entry of
/// index `STATIC_LEN + 1 + i` is `entries[i]`.
#[derive(Debug)]
pub(crate) struct DynamicTable {
    entries: VecDeque<Entry>,
    /// The sum of the entries' sizes.
    size: usize,
    /// The maximum size the encoder chose last (RFC 7541 §4.2), at most the decoder's limit.
    capacity: usize,
}

impl DynamicTable {
    /// An empty table of `capacity` bytes.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            capacity,
        }
    }

    /// The entry of dynamic index `i` (0 = newest), if there is one.
    pub(crate) fn get(&self, i: usize) -> Option<&Entry> {
        self.entries.get(i)
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The sum of the entries' sizes.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// The maximum size now in force.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entries, newest first.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// Applies a dynamic table size update (RFC 7541 §6.3), evicting entries until the table
    /// fits (§4.3). The caller has checked `capacity` against the limit.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict_to(capacity);
    }

    /// Adds an entry as the newest (RFC 7541 §4.4): evicts the oldest entries until it fits;
    /// an entry larger than the whole table empties the table and is not added.
    pub(crate) fn insert(&mut self, entry: Entry) {
        if entry.size > self.capacity {
            self.entries.clear();
            self.size = 0;
            return;
        }
        self.evict_to(self.capacity - entry.size);
        self.size += entry.size;
        self.entries.push_front(entry);
    }

    /// Evicts the oldest entries until the table's size is at most `limit`.
    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some(old) => self.size -= old.size,
                None => {
                    // Unreachable while `size` is the sum of the entries' sizes; keep the
                    // invariant rather than loop.
                    self.size = 0;
                }
            }
        }
    }
}
