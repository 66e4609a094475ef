//! HPACK, HTTP/2's header compression (RFC 7541), as the proxy's HTTP/2 server needs it.
//!
//! # What it owns
//!
//! - [`Decoder`]: turns a whole header block (the payloads of a HEADERS frame and its
//!   CONTINUATION frames, joined) into [`Field`]s, keeping the dynamic table (RFC 7541 §2.3.2,
//!   §4) in step with the peer's encoder. Strings may be Huffman-coded (RFC 7541 §5.2, decoded
//!   4 bits at a time by a table built at compile time, see `huffman`).
//! - [`Encoder`]: writes fields as static-table references and plain literals. It keeps no
//!   dynamic table and never Huffman-codes: a few more bytes on the wire for less CPU, and the
//!   peer's SETTINGS_HEADER_TABLE_SIZE never matters.
//! - The field checks of RFC 9113 §8.2.1 and §8.3 that belong to decoding: lowercase, valid
//!   names; the six pseudo-header names; values without NUL, CR or LF and without leading or
//!   trailing whitespace.
//!
//! # What it does not do
//!
//! No frames, streams or SETTINGS (see [`crate::frame`] and [`crate::server`]), and no checks of
//! the header list as a whole: pseudo-header order, duplicates, required pseudo-headers,
//! connection-specific fields and `te` (RFC 9113 §8.2.2, §8.3) are the caller's.
//!
//! # Entry points and call order
//!
//! One [`Decoder`] per connection, for the peer's blocks: [`Decoder::new`] with the
//! SETTINGS_HEADER_TABLE_SIZE we announce, then [`Decoder::decode`] once per header block, in
//! the order the blocks arrive (HPACK state carries from one block to the next), and
//! [`Decoder::set_max_table_size`] when the peer acknowledges a new value of that setting. Any
//! [`DecodeError`] is a connection error of type COMPRESSION_ERROR (RFC 9113 §4.3): the table is
//! out of step with the peer's from then on, and the decoder must not be used again.
//! [`Decoded::malformed`] and [`Decoded::too_large`] concern one request only (a stream error or
//! a 431): the block was decoded to its end and the table is in step.
//!
//! [`Encoder`] has no state; its methods append one field each to a block.
//!
//! # Invariants
//!
//! - The decoder never panics, never loops without consuming input, and allocates in
//!   proportion to the block (every string is checked against the block's length first).
//! - A decoded field is emitted only if it is valid HTTP; an invalid one still goes into the
//!   dynamic table when its representation says so, and a later reference to it makes that
//!   block malformed too.
//! - Plain (not Huffman-coded) values of fields not added to the table are slices of the
//!   caller's block, not copies. Fields added to the dynamic table own compact copies of their
//!   bytes, so the table never pins a large read buffer (and the connection's read buffer can be
//!   reused); a later reference to them costs a clone (a reference count), not a parse.
//! - A Huffman-coded value not added to the table costs one allocation of its decoded length.
//! - Fields sent as literals without indexing (§6.2.2) whose name is not from the dynamic table
//!   are remembered, a few at a time, by their whole representation: encoders that never index
//!   some fields (the h2 crate never indexes `content-length`; NGINX indexes none of an
//!   answer's fields) send the same bytes on every message, and a repeat costs a comparison and
//!   a clone instead of a Huffman decode, an allocation and a validation. Never-indexed fields
//!   (§6.2.3) are not remembered.

mod huffman;
mod table;

#[cfg(test)]
mod tests;

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, StatusCode};

use table::{DynamicTable, Entry, Name, Slot, ENTRY_OVERHEAD, STATIC, STATIC_LEN};

/// A decoded header field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    /// A pseudo-header field (RFC 9113 §8.3): its kind and raw value.
    Pseudo(Pseudo, Bytes),
    /// A regular field. Names are lowercase (an uppercase name makes the block malformed).
    Header(HeaderName, HeaderValue),
}

impl Field {
    /// The field's size as HPACK and the header list limit count it (RFC 7541 §4.1, RFC 9113
    /// §6.5.2): the name's length, the value's length and 32.
    pub fn size(&self) -> usize {
        match self {
            Field::Pseudo(kind, value) => kind.as_str().len() + value.len() + ENTRY_OVERHEAD,
            Field::Header(name, value) => name.as_str().len() + value.len() + ENTRY_OVERHEAD,
        }
    }
}

/// The pseudo-header fields of HTTP/2 (RFC 9113 §8.3; `:protocol`: RFC 8441 §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pseudo {
    /// `:method`
    Method,
    /// `:scheme`
    Scheme,
    /// `:authority`
    Authority,
    /// `:path`
    Path,
    /// `:status`
    Status,
    /// `:protocol` (extended CONNECT, RFC 8441)
    Protocol,
}

impl Pseudo {
    /// The field's name as on the wire, colon included.
    pub const fn as_str(self) -> &'static str {
        match self {
            Pseudo::Method => ":method",
            Pseudo::Scheme => ":scheme",
            Pseudo::Authority => ":authority",
            Pseudo::Path => ":path",
            Pseudo::Status => ":status",
            Pseudo::Protocol => ":protocol",
        }
    }

    /// The pseudo-header named `name` (colon included), if `name` is one.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b":method" => Pseudo::Method,
            b":scheme" => Pseudo::Scheme,
            b":authority" => Pseudo::Authority,
            b":path" => Pseudo::Path,
            b":status" => Pseudo::Status,
            b":protocol" => Pseudo::Protocol,
            _ => return None,
        })
    }

    /// The static table's entries with this name: the index of the first and how many there are
    /// (RFC 7541 Appendix A); `:protocol` has none.
    const fn static_entries(self) -> (usize, usize) {
        match self {
            Pseudo::Authority => (1, 1),
            Pseudo::Method => (2, 2),
            Pseudo::Path => (4, 2),
            Pseudo::Scheme => (6, 2),
            Pseudo::Status => (8, 7),
            Pseudo::Protocol => (0, 0),
        }
    }
}

/// What a decoded block held besides its fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// Some field was not valid HTTP (an unknown pseudo-header such as `:foo`, an uppercase or
    /// otherwise invalid name, a value with NUL/CR/LF or that `HeaderValue` refuses, ...): the
    /// request is malformed (RFC 9113 §8.1.1), a stream error; the block was still decoded to
    /// its end so the dynamic table stays in step. Such fields are NOT emitted.
    pub malformed: bool,
    /// The fields' size (RFC 9113 §6.5.2: name + value + 32 each, pseudo fields included)
    /// passed `max_list_size`; fields past that limit were not emitted (but still decoded).
    pub too_large: bool,
}

/// Why a header block could not be decoded. Every variant is a connection error of type
/// COMPRESSION_ERROR (RFC 9113 §4.3): the dynamic table can no longer be trusted to match the
/// peer's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// An integer (RFC 7541 §5.1) ends past the end of the block.
    #[error("truncated integer")]
    TruncatedInteger,
    /// A string literal (RFC 7541 §5.2) ends past the end of the block.
    #[error("truncated string literal")]
    TruncatedString,
    /// An integer with more than 4 continuation bytes: 2^28 or more, or a padded encoding of a
    /// smaller value — more than any table index or string in a block can need (RFC 7541 §5.1
    /// lets a decoder refuse integers beyond its limits).
    #[error("integer too large")]
    IntegerOverflow,
    /// An indexed field or name with index 0 (RFC 7541 §6.1).
    #[error("index 0")]
    ZeroIndex,
    /// An index past the static and the dynamic table (RFC 7541 §2.3.3).
    #[error("index {index} past the tables' {len} entries")]
    IndexOutOfRange {
        /// The index the block gave.
        index: usize,
        /// The number of entries of both tables at that point.
        len: usize,
    },
    /// A Huffman-coded string contains the EOS symbol (RFC 7541 §5.2).
    #[error("huffman string contains eos")]
    HuffmanEos,
    /// A Huffman-coded string ends in padding longer than 7 bits or not all ones (RFC 7541
    /// §5.2).
    #[error("invalid huffman padding")]
    HuffmanPadding,
    /// A dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE we announced (RFC 7541
    /// §6.3).
    #[error("table size update to {size} above the limit {max}")]
    TableSizeTooLarge {
        /// The size the update asked for.
        size: usize,
        /// The limit in force.
        max: usize,
    },
    /// A dynamic table size update after the first field of a block (RFC 7541 §4.2).
    #[error("table size update after a field")]
    LateTableSizeUpdate,
    /// The first block after we lowered SETTINGS_HEADER_TABLE_SIZE below the table's size did
    /// not start with a dynamic table size update (RFC 7541 §4.2).
    #[error("missing table size update after the limit was lowered")]
    MissingTableSizeUpdate,
}

/// The HPACK decoder of one connection: the dynamic table and the limits of its size.
///
/// Call [`Decoder::decode`] for every header block in the order they arrive; see the module
/// doc for what an error means.
#[derive(Debug)]
pub struct Decoder {
    /// The dynamic table; its capacity is the size the encoder chose last.
    table: DynamicTable,
    /// The SETTINGS_HEADER_TABLE_SIZE in force: the most a size update may ask for.
    max_table_size: usize,
    /// The limit was lowered below the table's capacity: the next block must begin with a
    /// size update (RFC 7541 §4.2).
    update_required: bool,
    /// Reused buffer for Huffman-decoded names and values that are copied anyway.
    scratch: Vec<u8>,
    /// Recent literal fields without indexing, by representation (see the module doc).
    recent: Vec<(Box<[u8]>, Entry)>,
    /// The slot of `recent` the next one replaces once it is full.
    recent_next: usize,
}

/// How many literal representations [`Decoder::recent`] remembers.
const RECENT: usize = 8;

/// The longest representation [`Decoder::recent`] remembers: a message's short fields
/// (lengths, types, dates), not long values.
const RECENT_MAX_LEN: usize = 64;

/// The most capacity [`Decoder::scratch`] keeps from one block to the next: a rare long Huffman
/// string should not hold memory for the rest of the connection.
const SCRATCH_KEEP: usize = 4096;

/// How a literal field representation asks the decoder to treat the table (RFC 7541 §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Indexing {
    /// §6.2.1: add the field to the dynamic table.
    Incremental,
    /// §6.2.2: do not add it.
    Without,
    /// §6.2.3: do not add it, and intermediaries must not either.
    Never,
}

/// What one block's decoding has seen so far.
struct Progress {
    /// The flags handed back.
    decoded: Decoded,
    /// The sum of the sizes of the block's fields so far.
    list_size: usize,
    /// The caller's limit of `list_size`.
    max_list_size: usize,
}

impl Progress {
    /// Counts a field of `size` bytes and says whether it may be emitted (whether the list is
    /// still within its limit).
    fn admit(&mut self, size: usize) -> bool {
        self.list_size = self.list_size.saturating_add(size);
        if self.list_size > self.max_list_size {
            self.decoded.too_large = true;
            return false;
        }
        true
    }
}

impl Decoder {
    /// `max_table_size`: the SETTINGS_HEADER_TABLE_SIZE we announced (4096 by default).
    ///
    /// The table starts with this capacity: an encoder may use as much as the setting allows
    /// without a size update first; one that uses less only ever refers to the newest entries,
    /// which both tables hold.
    pub fn new(max_table_size: usize) -> Self {
        Self {
            table: DynamicTable::new(max_table_size),
            max_table_size,
            update_required: false,
            scratch: Vec::new(),
            recent: Vec::new(),
            recent_next: 0,
        }
    }

    /// Sets the limit of the table's size, once the peer has acknowledged a new
    /// SETTINGS_HEADER_TABLE_SIZE. When the new limit is below the table's current capacity,
    /// the peer's next block must begin with a size update within it (RFC 7541 §4.2), else
    /// that block fails with [`DecodeError::MissingTableSizeUpdate`]; until then the table
    /// keeps its entries, as the peer's does. (A block with no representation at all leaves the
    /// requirement for the next one.)
    pub fn set_max_table_size(&mut self, max_table_size: usize) {
        self.max_table_size = max_table_size;
        self.update_required = self.table.capacity() > max_table_size;
    }

    /// Decodes one whole header block (HEADERS + CONTINUATION payloads joined), calling `emit`
    /// for each valid field in order. `block` is a `Bytes` so that plain (non-Huffman) literals
    /// become slices of it without copying.
    ///
    /// `max_list_size` is the limit of the fields' total size (RFC 9113 §6.5.2, e.g. the
    /// SETTINGS_MAX_HEADER_LIST_SIZE we announced); past it, fields are decoded but no longer
    /// emitted and [`Decoded::too_large`] is set.
    ///
    /// Fields emitted before an error were valid, but the error ends the connection.
    pub fn decode(
        &mut self,
        block: &Bytes,
        max_list_size: usize,
        mut emit: impl FnMut(Field),
    ) -> Result<Decoded, DecodeError> {
        let mut reader = Reader { buf: block, pos: 0 };
        let mut progress = Progress {
            decoded: Decoded::default(),
            list_size: 0,
            max_list_size,
        };
        let mut fields_started = false;
        while let Some(&first) = block.get(reader.pos) {
            // RFC 7541 §6.3: `001xxxxx` is a dynamic table size update.
            if first & 0xe0 == 0x20 {
                // RFC 7541 §4.2: "This dynamic table size update MUST occur at the beginning
                // of the first header block following the change to the dynamic table size."
                if fields_started {
                    return Err(DecodeError::LateTableSizeUpdate);
                }
                let size = reader.integer(5)?;
                if size > self.max_table_size {
                    return Err(DecodeError::TableSizeTooLarge {
                        size,
                        max: self.max_table_size,
                    });
                }
                self.table.set_capacity(size);
                self.update_required = false;
                continue;
            }
            if !fields_started {
                if self.update_required {
                    return Err(DecodeError::MissingTableSizeUpdate);
                }
                fields_started = true;
            }
            if first & 0x80 != 0 {
                // RFC 7541 §6.1: `1xxxxxxx`, an indexed header field.
                let index = reader.integer(7)?;
                self.indexed(index, &mut progress, &mut emit)?;
            } else {
                // RFC 7541 §6.2.1: `01xxxxxx`, with incremental indexing (6-bit index);
                // §6.2.3: `0001xxxx`, never indexed; §6.2.2: `0000xxxx`, without indexing.
                let (prefix, indexing) = match first {
                    0x40..=0x7f => (6, Indexing::Incremental),
                    0x10..=0x1f => (4, Indexing::Never),
                    _ => (4, Indexing::Without),
                };
                let start = reader.pos;
                let hit = match indexing {
                    Indexing::Without => self.recent_at(&block[start..]),
                    _ => None,
                };
                let entry = match hit {
                    Some((len, entry)) => {
                        reader.pos += len;
                        entry
                    }
                    _ => {
                        let index = reader.integer(prefix)?;
                        let entry = self.literal(block, &mut reader, index, indexing)?;
                        // A name from the dynamic table could differ next time.
                        if indexing == Indexing::Without && index <= STATIC_LEN {
                            self.remember(&block[start..reader.pos], &entry);
                        }
                        entry
                    }
                };
                let admitted = progress.admit(entry.size);
                match entry.slot {
                    Slot::Valid(field) => {
                        if admitted {
                            emit(field);
                        }
                    }
                    Slot::BadValue(_) | Slot::BadName { .. } => progress.decoded.malformed = true,
                }
            }
        }
        if self.scratch.capacity() > SCRATCH_KEEP {
            self.scratch = Vec::new();
        }
        Ok(progress.decoded)
    }

    /// The remembered literal whose representation `rest` starts with: its length and entry.
    /// (Representations are prefix-free: parsing `rest` would read exactly those bytes.)
    fn recent_at(&self, rest: &[u8]) -> Option<(usize, Entry)> {
        self.recent
            .iter()
            .find(|(repr, _)| rest.starts_with(repr))
            .map(|(repr, entry)| (repr.len(), entry.clone()))
    }

    /// Remembers a valid literal field without indexing, by its representation `repr`.
    fn remember(&mut self, repr: &[u8], entry: &Entry) {
        if repr.len() > RECENT_MAX_LEN {
            return;
        }
        // Own copies of the bytes: a plain value is a slice of the caller's block, which must
        // not stay pinned.
        let field = match &entry.slot {
            Slot::Valid(Field::Pseudo(kind, value)) => {
                Field::Pseudo(*kind, Bytes::copy_from_slice(value))
            }
            Slot::Valid(Field::Header(name, value)) => {
                match HeaderValue::from_bytes(value.as_bytes()) {
                    Ok(v) => Field::Header(name.clone(), v),
                    Err(_) => return,
                }
            }
            _ => return,
        };
        let kept = (
            repr.into(),
            Entry {
                slot: Slot::Valid(field),
                size: entry.size,
            },
        );
        if self.recent.len() < RECENT {
            self.recent.push(kept);
        } else {
            self.recent[self.recent_next] = kept;
            self.recent_next = (self.recent_next + 1) % RECENT;
        }
    }

    /// Emits the field of table index `index` (RFC 7541 §6.1, §2.3.3).
    fn indexed(
        &self,
        index: usize,
        progress: &mut Progress,
        emit: &mut impl FnMut(Field),
    ) -> Result<(), DecodeError> {
        let (slot, size) = match self.lookup(index)? {
            Lookup::Static(field) => {
                if progress.admit(field.size()) {
                    emit(field.clone());
                }
                return Ok(());
            }
            Lookup::Dynamic(entry) => (&entry.slot, entry.size),
        };
        let admitted = progress.admit(size);
        match slot {
            Slot::Valid(field) => {
                if admitted {
                    emit(field.clone());
                }
            }
            Slot::BadValue(_) | Slot::BadName { .. } => progress.decoded.malformed = true,
        }
        Ok(())
    }

    /// Reads the rest of a literal representation whose name index (0: a literal name) was
    /// `index`, adds it to the table when `indexing` says so, and hands it back as a table
    /// entry (its slot says whether it is valid).
    fn literal(
        &mut self,
        block: &Bytes,
        reader: &mut Reader<'_>,
        index: usize,
        indexing: Indexing,
    ) -> Result<Entry, DecodeError> {
        // The name: `None` when it is not a valid name.
        let (name, name_len) = if index == 0 {
            let (huffman, range) = reader.string()?;
            let bytes = if huffman {
                self.scratch.clear();
                huffman::decode(&block[range], &mut self.scratch)?;
                &self.scratch[..]
            } else {
                &block[range]
            };
            (parse_name(bytes), bytes.len())
        } else {
            self.lookup_name(index)?
        };
        let (huffman, range) = reader.string()?;
        let value = match (huffman, indexing) {
            // Copied: the table must not pin the caller's buffer (see the module doc).
            (false, Indexing::Incremental) => Bytes::copy_from_slice(&block[range]),
            (false, _) => block.slice(range),
            // One allocation of the decoded length per Huffman-coded value (a block rarely
            // has more than one or two that are not indexed).
            (true, _) => {
                self.scratch.clear();
                huffman::decode(&block[range], &mut self.scratch)?;
                Bytes::copy_from_slice(&self.scratch)
            }
        };
        let size = name_len + value.len() + ENTRY_OVERHEAD;
        let slot = match name {
            None => Slot::BadName { name_len },
            Some(Name::Pseudo(kind)) => {
                if valid_value(&value) {
                    Slot::Valid(Field::Pseudo(kind, value))
                } else {
                    Slot::BadValue(Name::Pseudo(kind))
                }
            }
            Some(Name::Header(name)) => match header_value(value) {
                Some(mut value) => {
                    // RFC 7541 §6.2.3: an intermediary re-encodes a never-indexed field as
                    // never indexed; the flag tells our encoder (and hyper's) to.
                    if indexing == Indexing::Never {
                        value.set_sensitive(true);
                    }
                    Slot::Valid(Field::Header(name, value))
                }
                None => Slot::BadValue(Name::Header(name)),
            },
        };
        let entry = Entry { slot, size };
        if indexing == Indexing::Incremental {
            self.table.insert(entry.clone());
        }
        Ok(entry)
    }

    /// The entry of table index `index` (RFC 7541 §2.3.3: 1–61 static, then dynamic, newest
    /// first).
    fn lookup(&self, index: usize) -> Result<Lookup<'_>, DecodeError> {
        match index {
            0 => Err(DecodeError::ZeroIndex),
            1..=STATIC_LEN => Ok(Lookup::Static(&STATIC[index - 1])),
            _ => match self.table.get(index - STATIC_LEN - 1) {
                Some(entry) => Ok(Lookup::Dynamic(entry)),
                None => Err(DecodeError::IndexOutOfRange {
                    index,
                    len: STATIC_LEN + self.table.len(),
                }),
            },
        }
    }

    /// The name of table index `index` (`None` when it is not a valid name) and its length.
    fn lookup_name(&self, index: usize) -> Result<(Option<Name>, usize), DecodeError> {
        let name = match self.lookup(index)? {
            Lookup::Static(field)
            | Lookup::Dynamic(Entry {
                slot: Slot::Valid(field),
                ..
            }) => match field {
                Field::Pseudo(kind, _) => Name::Pseudo(*kind),
                Field::Header(name, _) => Name::Header(name.clone()),
            },
            Lookup::Dynamic(Entry {
                slot: Slot::BadValue(name),
                ..
            }) => name.clone(),
            Lookup::Dynamic(Entry {
                slot: Slot::BadName { name_len },
                ..
            }) => return Ok((None, *name_len)),
        };
        let len = name.len();
        Ok((Some(name), len))
    }
}

/// An entry found by [`Decoder::lookup`].
enum Lookup<'a> {
    /// A static-table entry, always valid.
    Static(&'a Field),
    /// A dynamic-table entry.
    Dynamic(&'a Entry),
}

/// A cursor over a header block.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// Reads an integer with an N-bit prefix (RFC 7541 §5.1) starting at the current byte.
    fn integer(&mut self, prefix_bits: u32) -> Result<usize, DecodeError> {
        decode_integer(self.buf, &mut self.pos, prefix_bits)
    }

    /// Reads a string literal's header (RFC 7541 §5.2): whether it is Huffman-coded, and where
    /// its bytes are in the block, checked to be there.
    fn string(&mut self) -> Result<(bool, Range<usize>), DecodeError> {
        let Some(&first) = self.buf.get(self.pos) else {
            return Err(DecodeError::TruncatedString);
        };
        let len = self.integer(7)?;
        let start = self.pos;
        if len > self.buf.len() - start {
            return Err(DecodeError::TruncatedString);
        }
        self.pos = start + len;
        Ok((first & 0x80 != 0, start..start + len))
    }
}

/// The most continuation bytes of an integer: 4 carry 28 bits, far more than an index or a
/// string length in one block can need.
const MAX_INTEGER_CONTINUATIONS: u32 = 4;

/// Decodes an integer with a `prefix_bits`-bit prefix (RFC 7541 §5.1) from `buf` at `*pos`,
/// moving `*pos` past it.
fn decode_integer(buf: &[u8], pos: &mut usize, prefix_bits: u32) -> Result<usize, DecodeError> {
    let Some(&first) = buf.get(*pos) else {
        return Err(DecodeError::TruncatedInteger);
    };
    *pos += 1;
    let max_prefix = (1usize << prefix_bits) - 1;
    let mut value = usize::from(first) & max_prefix;
    if value < max_prefix {
        return Ok(value);
    }
    // RFC 7541 §5.1: "I = I + (B & 127) * 2^M; M = M + 7; while B & 128 == 128".
    let mut shift = 0;
    for _ in 0..MAX_INTEGER_CONTINUATIONS {
        let Some(&byte) = buf.get(*pos) else {
            return Err(DecodeError::TruncatedInteger);
        };
        *pos += 1;
        value += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
    // RFC 7541 §5.1: "Integer encodings that exceed implementation limits -- in value or octet
    // length -- MUST be treated as decoding errors."
    Err(DecodeError::IntegerOverflow)
}

/// The name `bytes` as a table name, or `None` when it is not a valid HTTP/2 field name.
fn parse_name(bytes: &[u8]) -> Option<Name> {
    if bytes.first() == Some(&b':') {
        // RFC 9113 §8.3: "Endpoints MUST NOT generate pseudo-header fields other than those
        // defined in this document", and a request with an undefined one is malformed
        // (§8.3 ¶3).
        return Pseudo::from_name(bytes).map(Name::Pseudo);
    }
    // RFC 9113 §8.2.1: a name must not contain uppercase characters (nor controls, SP, colon,
    // or non-ASCII bytes); `from_lowercase` refuses all of them, and the empty name.
    HeaderName::from_lowercase(bytes).ok().map(Name::Header)
}

/// RFC 9113 §8.2.1: "A field value MUST NOT contain the zero value (ASCII NUL, 0x00), line feed
/// (ASCII LF, 0x0a), or carriage return (ASCII CR, 0x0d) at any position" and "MUST NOT start or
/// end with an ASCII whitespace character (ASCII SP or HTAB, 0x20 or 0x09)". For pseudo-header
/// values, whose syntax the caller checks further (a method token, a URI...).
fn valid_value(value: &[u8]) -> bool {
    trimmed(value) && !value.iter().any(|&b| matches!(b, 0 | b'\n' | b'\r'))
}

/// `value` as a regular field's value: valid per RFC 9113 §8.2.1 and per `HeaderValue`, which
/// refuses NUL, CR and LF with the other control characters and DEL (as RFC 9110 §5.5 does).
fn header_value(value: Bytes) -> Option<HeaderValue> {
    if !trimmed(&value) {
        return None;
    }
    // `from_maybe_shared` takes the `Bytes` as it is, without a copy.
    HeaderValue::from_maybe_shared(value).ok()
}

/// RFC 9113 §8.2.1: a field value "MUST NOT start or end with an ASCII whitespace character
/// (ASCII SP or HTAB, 0x20 or 0x09)".
fn trimmed(value: &[u8]) -> bool {
    !matches!(value.first(), Some(b' ' | b'\t')) && !matches!(value.last(), Some(b' ' | b'\t'))
}

/// Writes header fields as HPACK (RFC 7541) without a dynamic table: every field is a static
/// table reference or a literal that is not added to the peer's table, and no string is
/// Huffman-coded.
///
/// Stateless: the methods append one field each to `dst`; a block is whatever sequence of
/// fields the caller appended.
#[derive(Clone, Debug, Default)]
pub struct Encoder {
    _private: (),
}

impl Encoder {
    /// A new encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `:status`: one byte (indexed) for 200, 204, 206, 304, 400, 404, 500; a literal
    /// with the static name index 8 otherwise.
    pub fn status(&mut self, status: StatusCode, dst: &mut BytesMut) {
        // RFC 7541 Appendix A: indexes 8–14 are `:status` with these values.
        let index = match status.as_u16() {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => {
                // RFC 7541 §6.2.2: literal without indexing, indexed name (4-bit prefix).
                dst.put_u8(0x08);
                encode_string(status.as_str().as_bytes(), dst);
                return;
            }
        };
        dst.put_u8(0x80 | index);
    }

    /// Appends a pseudo-header field (for the client side: :method (GET and POST indexed),
    /// :scheme (http/https indexed), :authority, :path ("/" indexed)).
    ///
    /// Any value the static table has for `kind` (also `/index.html` and every `:status` of
    /// [`Encoder::status`]) is written as one indexed byte; other values are literals without
    /// indexing with the static name index (`:protocol`, which the static table lacks, with a
    /// literal name).
    pub fn pseudo(&mut self, kind: Pseudo, value: &[u8], dst: &mut BytesMut) {
        let (first, count) = kind.static_entries();
        for index in first..first + count {
            if let Field::Pseudo(_, static_value) = &STATIC[index - 1] {
                if static_value == value {
                    // RFC 7541 §6.1: indexed header field.
                    encode_integer(0x80, 7, index, dst);
                    return;
                }
            }
        }
        // RFC 7541 §6.2.2: literal without indexing.
        encode_integer(0x00, 4, first, dst);
        if first == 0 {
            encode_string(kind.as_str().as_bytes(), dst);
        }
        encode_string(value, dst);
    }

    /// Appends a regular field: indexed when (name, value) is fully in the static table
    /// (e.g. `accept-encoding: gzip, deflate`), otherwise "literal without indexing" with the
    /// static table's name index when the name is there (a fast match on the name, not a
    /// linear scan of strings per field), else with a literal name; "never indexed" (RFC 7541
    /// §6.2.3) when `value.is_sensitive()`. No Huffman on output (CPU over bytes), no dynamic
    /// table (so the peer's SETTINGS_HEADER_TABLE_SIZE never matters).
    pub fn header(&mut self, name: &HeaderName, value: &HeaderValue, dst: &mut BytesMut) {
        let index = table::static_name_index(name.as_str());
        // RFC 7541 §6.2.3 `0001xxxx` (never indexed) or §6.2.2 `0000xxxx` (without indexing).
        let flags = if value.is_sensitive() {
            0x10
        } else {
            if let Some(index) = index {
                if let Field::Header(_, static_value) = &STATIC[index - 1] {
                    if static_value == value {
                        // RFC 7541 §6.1: indexed header field.
                        encode_integer(0x80, 7, index, dst);
                        return;
                    }
                }
            }
            0x00
        };
        encode_integer(flags, 4, index.unwrap_or(0), dst);
        if index.is_none() {
            encode_string(name.as_str().as_bytes(), dst);
        }
        encode_string(value.as_bytes(), dst);
    }
}

/// Appends `value` as an integer with a `prefix_bits`-bit prefix (RFC 7541 §5.1), the first
/// byte's other bits being `flags`.
fn encode_integer(flags: u8, prefix_bits: u32, value: usize, dst: &mut BytesMut) {
    let max_prefix = (1usize << prefix_bits) - 1;
    if value < max_prefix {
        dst.put_u8(flags | value as u8);
        return;
    }
    dst.put_u8(flags | max_prefix as u8);
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        dst.put_u8(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    dst.put_u8(rest as u8);
}

/// Appends `bytes` as a plain string literal (RFC 7541 §5.2, H = 0).
fn encode_string(bytes: &[u8], dst: &mut BytesMut) {
    encode_integer(0x00, 7, bytes.len(), dst);
    dst.extend_from_slice(bytes);
}
