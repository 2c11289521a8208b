//! The global allocator `mrec`, its profiling examples and the Python
//! package's extension link: mimalloc,
//! called without an alignment argument wherever its plain calls already
//! give the alignment asked for.
//!
//! The `mimalloc` crate's `GlobalAlloc` passes every request to
//! `mi_malloc_aligned`. In mimalloc v3 that call takes its fast path only
//! when the request's size class is a power of two; any other size (24, 48,
//! 80 bytes: most strings, vectors and B-tree nodes) goes through the
//! over-allocating generic path, which costs instructions and rounds the
//! block up. The plain calls (`mi_malloc`, `mi_zalloc`, `mi_realloc`) return
//! blocks aligned to 16 bytes when the size is at least 16 and to 8 bytes
//! otherwise (size classes are multiples of 8, of 16 from 16 bytes up, and a
//! page's first block is 16-aligned), the guarantee the standard library's
//! own `System` allocator relies on from `malloc`: an alignment of at most
//! 16 that is not larger than the size. Any other layout keeps the aligned
//! calls. `docs/benchmark.md` has the instructions and times this saves.
//!
//! The `molrec` library does not set a global allocator; a program opts in:
//!
//! ```no_run
//! #[global_allocator]
//! static ALLOCATOR: mrec_allocator::Mimalloc = mrec_allocator::Mimalloc;
//! ```

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;
use libmimalloc_sys as ffi;

/// mimalloc as a [`GlobalAlloc`], with the plain calls for ordinary layouts.
pub struct Mimalloc;

/// The largest alignment mimalloc's plain calls give every block of at
/// least that size (mimalloc's `MI_MAX_ALIGN_SIZE` on 64-bit targets).
const PLAIN_ALIGN: usize = 16;

/// Whether a plain call returns memory aligned for `align` at `size` bytes.
fn plain_call_fits(size: usize, align: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every method returns memory from mimalloc that fits the layout
// (the plain calls only where `plain_call_fits` holds, see the module's
// docs; the aligned calls otherwise) or null, and frees and resizes only
// pointers mimalloc returned; `mi_free` and `mi_realloc` accept a block
// from either family.
unsafe impl GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: a foreign call with no precondition on its arguments.
        unsafe {
            if plain_call_fits(layout.size(), layout.align()) {
                ffi::mi_malloc(layout.size()).cast()
            } else {
                ffi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe {
            if plain_call_fits(layout.size(), layout.align()) {
                ffi::mi_zalloc(layout.size()).cast()
            } else {
                ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller passes a pointer this allocator returned.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a pointer this allocator returned, and
        // the new block must fit `new_size` at the old alignment.
        unsafe {
            if plain_call_fits(new_size, layout.align()) {
                ffi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                ffi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size up to 1 KiB and some larger ones at every alignment up to
    /// 64, allocated, grown, shrunk and zeroed: the address fits the
    /// alignment each time (the plain calls below 16 and at 16 included),
    /// and the bytes survive a resize.
    #[test]
    fn blocks_fit_their_layouts() {
        let allocator = Mimalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64] {
            for size in (1..=1024usize).chain([4095, 4096, 65_537, 1 << 20]) {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a non-zero-size layout; every pointer is checked,
                // written within its size and freed once with its layout.
                unsafe {
                    let p = allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "alloc size {size} align {align}");
                    p.write_bytes(0xA5, size);
                    let grown = size * 3 + 5;
                    let q = allocator.realloc(p, layout, grown);
                    assert_eq!(
                        q as usize % align,
                        0,
                        "realloc {size}->{grown} align {align}"
                    );
                    assert!((0..size).all(|i| *q.add(i) == 0xA5));
                    let shrunk = size.div_ceil(2);
                    let r = allocator.realloc(
                        q,
                        Layout::from_size_align(grown, align).unwrap(),
                        shrunk,
                    );
                    assert_eq!(
                        r as usize % align,
                        0,
                        "shrink {grown}->{shrunk} align {align}"
                    );
                    assert!((0..shrunk).all(|i| *r.add(i) == 0xA5));
                    allocator.dealloc(r, Layout::from_size_align(shrunk, align).unwrap());
                    let z = allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed size {size} align {align}");
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    allocator.dealloc(z, layout);
                }
            }
        }
    }

    #[test]
    fn plain_calls_only_for_small_alignments_within_the_size() {
        assert!(plain_call_fits(8, 8));
        assert!(plain_call_fits(24, 8));
        assert!(plain_call_fits(16, 16));
        assert!(plain_call_fits(48, 16));
        assert!(!plain_call_fits(8, 16), "an 8-byte block is only 8-aligned");
        assert!(!plain_call_fits(64, 32));
        assert!(!plain_call_fits(0, 1));
    }
}
