//! The global allocator: mimalloc, asked for a plain block whenever every
//! block it hands out is aligned enough.
//!
//! The `mimalloc` crate sends every request through `mi_malloc_aligned`,
//! whose extra checks cost about 25 instructions per allocation; the
//! interpreter allocates a few dozen small arrays per loop iteration, so a
//! scan of small steps spent a tenth of its time there.
//!
//! Freed memory is kept for reuse rather than handed back to the OS
//! ([`keep_freed_memory`]).

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// Every mimalloc block is aligned to a machine word (its size classes are
/// multiples of one).
const ALWAYS_ALIGNED: usize = std::mem::size_of::<usize>();

pub struct MiMalloc;

/// `mi_option_purge_delay`: its place in `mi_option_e` (`mimalloc.h` of the
/// v3 sources `libmimalloc-sys` builds, which names no constant for it).
/// Its default there is 1000 (ms); a test checks that this index reads it.
const PURGE_DELAY: mi::mi_option_t = 15;

/// Tells mimalloc never to hand freed memory back to the OS.
///
/// By default it returns a freed large block's pages a second later, so a
/// program that allocates and frees the same large buffers on every
/// execution (a KV cache copied each step, im2col matrices) faulted them in
/// afresh each time, the kernel zeroing every page: half of a decode step's
/// time, and most of its run-to-run spread. A `tpusim` process is short and
/// its peak is what `--max-memory` bounds; keeping its pages does not raise
/// that peak.
pub fn keep_freed_memory() {
    // SAFETY: sets a documented option to a documented value (-1: never purge).
    unsafe { mi::mi_option_set(PURGE_DELAY, -1) }
}

// SAFETY: each method forwards to the mimalloc function made for it, and the
// plain (unaligned) variants are used only for alignments every block meets.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= ALWAYS_ALIGNED {
            mi::mi_malloc(layout.size()) as *mut u8
        } else {
            mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= ALWAYS_ALIGNED {
            mi::mi_zalloc(layout.size()) as *mut u8
        } else {
            mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        mi::mi_free(ptr as *mut c_void);
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.align() <= ALWAYS_ALIGNED {
            mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
        } else {
            mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_index_reads_mimallocs_default_purge_delay() {
        // No other mimalloc option defaults to 1000. (MIMALLOC_PURGE_DELAY in
        // the environment would change what this reads.)
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(unsafe { mi::mi_option_get(PURGE_DELAY) }, 1000);
        }
    }
}
