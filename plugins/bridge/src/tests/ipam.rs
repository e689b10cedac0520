//! The IPAM plugin's stand-in: one lease, handed out by ADD and given back by DEL. Its
//! calls (`ipam: ADD`, `ipam: DEL`, ...) go into the fake kernel's log and fail through
//! its failure list, so a test sees IPAM and kernel steps in one order.

use crate::ipam::Ipam;
use hostnet::kernel::fake::FakeKernel;
use libcni::invoke::Delegate;
use libcni::types::CniResult;
use std::sync::Mutex;

pub struct FakeIpam {
    kernel: FakeKernel,
    /// What ADD returns.
    result: CniResult,
    leased: Mutex<bool>,
}

impl FakeIpam {
    /// An IPAM handing out `result`, logging into `kernel`'s log.
    pub fn new(kernel: &FakeKernel, result: CniResult) -> FakeIpam {
        FakeIpam {
            kernel: kernel.clone(),
            result,
            leased: Mutex::new(false),
        }
    }

    /// Whether the lease is held.
    pub fn leased(&self) -> bool {
        *self.leased.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lease is given back (or taken) behind the plugin's back.
    pub fn set_leased(&self, on: bool) {
        *self.leased.lock().unwrap_or_else(|e| e.into_inner()) = on;
    }
}

impl Ipam for FakeIpam {
    fn add(&self, _ipam: &Delegate) -> Result<CniResult, libcni::Error> {
        if !self.kernel.outside_call("ipam: ADD") {
            return Err(libcni::Error::new(11, "fake IPAM ADD failure"));
        }
        self.set_leased(true);
        Ok(self.result.clone())
    }

    fn run(&self, _ipam: &Delegate, verb: &str) -> Result<(), libcni::Error> {
        if !self.kernel.outside_call(&format!("ipam: {verb}")) {
            return Err(libcni::Error::new(11, format!("fake IPAM {verb} failure")));
        }
        if verb == "DEL" {
            self.set_leased(false);
        }
        Ok(())
    }
}
