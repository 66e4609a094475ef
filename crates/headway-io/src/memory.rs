//! Process-wide memory settings.

use std::io;

/// Stops the kernel from backing this process's memory with transparent huge pages
/// (`prctl(PR_SET_THP_DISABLE)`; applies to every thread and to memory already mapped).
///
/// mimalloc asks for huge pages on its arenas (`madvise(MADV_HUGEPAGE)`), so the first touch
/// of any 4 KiB in a fresh 2 MiB region makes the kernel zero all 2 MiB, and memory idle for
/// a second is given back and faulted in again. A WAN optimizer that starts a transfer
/// allocates buffers, frames and index entries all at once: in the lab's first pass of a
/// 1.2 MB file (44 Mbit/s, 90 ms) the data-centre appliance spent 18 of its first 20 ms
/// zeroing huge pages in page faults while the WAN link sat idle.
pub fn disable_transparent_huge_pages() -> io::Result<()> {
    nix::sys::prctl::set_thp_disable(true).map_err(io::Error::from)
}

/// Whether [`disable_transparent_huge_pages`] is in effect for this process.
pub fn transparent_huge_pages_disabled() -> io::Result<bool> {
    nix::sys::prctl::get_thp_disable().map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_pages_can_be_switched_off() {
        disable_transparent_huge_pages().unwrap();
        assert!(transparent_huge_pages_disabled().unwrap());
    }
}
