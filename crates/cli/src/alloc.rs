//! The global allocator: mimalloc, asked for a plain block whenever every
//! block it hands out is aligned enough.
//!
//! The `mimalloc` crate sends every request through `mi_malloc_aligned`,
//! whose extra checks cost about 25 instructions per allocation; the
//! interpreter allocates a few dozen small arrays per loop iteration, so a
//! scan of small steps spent a tenth of its time there.

use libmimalloc_sys as mi;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

/// Every mimalloc block is aligned to a machine word (its size classes are
/// multiples of one).
const ALWAYS_ALIGNED: usize = std::mem::size_of::<usize>();

pub struct MiMalloc;

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
