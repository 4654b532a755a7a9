//! Direct C calls into a library copy (dlopen/dlsym), for what nvml-wrapper
//! does not expose: error strings, return codes of misuse, buffer sizes.

use std::ffi::{c_void, CStr, CString};
use std::os::raw::{c_char, c_uint};
use std::path::Path;

pub struct RawLib {
    handle: *mut c_void,
}

impl RawLib {
    pub fn open(path: &Path) -> RawLib {
        let name = CString::new(path.to_str().expect("utf-8 path")).unwrap();
        // SAFETY: valid C string; RTLD_NOW resolves everything up front.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {path:?}");
        RawLib { handle }
    }

    pub fn has(&self, symbol: &str) -> bool {
        !self.address(symbol).is_null()
    }

    fn address(&self, symbol: &str) -> *mut c_void {
        let name = CString::new(symbol).unwrap();
        // SAFETY: handle from dlopen, valid C string.
        unsafe { libc::dlsym(self.handle, name.as_ptr()) }
    }

    /// A function pointer of type `F` (which must match the C signature).
    pub fn function<F: Copy>(&self, symbol: &str) -> F {
        let address = self.address(symbol);
        assert!(!address.is_null(), "{symbol} not exported");
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: F is a function pointer type of the symbol's signature.
        unsafe { std::mem::transmute_copy(&address) }
    }

    pub fn call0(&self, symbol: &str) -> c_uint {
        let f: unsafe extern "C" fn() -> c_uint = self.function(symbol);
        // SAFETY: nvmlInit*/nvmlShutdown take no arguments.
        unsafe { f() }
    }

    pub fn error_string(&self, code: c_uint) -> String {
        let f: unsafe extern "C" fn(c_uint) -> *const c_char = self.function("nvmlErrorString");
        // SAFETY: returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(f(code)) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Drop for RawLib {
    fn drop(&mut self) {
        // SAFETY: handle from dlopen, no pointers into it outlive self.
        unsafe { libc::dlclose(self.handle) };
    }
}
