//! The agent's allocator: jemalloc, not the C library's. The image's agent is a static musl
//! build, and musl's malloc takes one lock for every thread: the watches parse the first
//! lists (150,000 pods, 10,000 policies) on their own threads, and two threads parsing at
//! once each took twice as long as one alone. jemalloc's thread caches and arenas do not
//! share a lock. Measured at 150,000 pods, in interleaved runs: the first programming
//! 3.4-5.6 -> 2.1-3.0 s, the peak RSS 130 -> 122-126 MiB (BENCHMARKS.md).
//!
//! Here, in the library, so that every binary of the agent (the DaemonSet's, the
//! benchmarks running it in-process, the tests) allocates the same way.

#[global_allocator]
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (the `_RJEM_MALLOC_CONF` environment variable
/// still overrides them):
/// - `dirty_decay_ms:0`, `muzzy_decay_ms:0`: freed pages go back to the kernel at once.
///   With jemalloc's default (10 s) the first lists' transients stayed resident: the peak
///   was 183-188 MiB and the RSS after the first programming 179-183, against 122 and 112.
/// - `narenas:2`: the agent's few threads share two arenas, not 4 per CPU (256 on a
///   64-core node, each holding memory of its own).
///
/// A thin pointer to a C string, as jemalloc reads `malloc_conf` (`const char *`).
#[allow(unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &[u8; 44] = b"narenas:2,dirty_decay_ms:0,muzzy_decay_ms:0\0";

#[cfg(test)]
mod tests {
    use std::ffi::{CStr, c_void};

    /// One of jemalloc's `opt.*` values, as in effect.
    #[allow(unsafe_code)]
    fn opt<T: Default>(name: &CStr) -> T {
        let mut value = T::default();
        let mut len = std::mem::size_of::<T>();
        // SAFETY: `value` is `len` bytes of the option's type; nothing is written.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&mut value as *mut T).cast::<c_void>(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "mallctl {name:?}");
        value
    }

    #[test]
    fn jemalloc_allocates_with_the_agents_options() {
        assert_eq!(opt::<isize>(c"opt.dirty_decay_ms"), 0);
        assert_eq!(opt::<isize>(c"opt.muzzy_decay_ms"), 0);
        assert_eq!(opt::<u32>(c"opt.narenas"), 2);
        let text = std::str::from_utf8(super::MALLOC_CONF).unwrap();
        assert!(text.ends_with('\0') && !text[..text.len() - 1].contains('\0'));
    }
}
