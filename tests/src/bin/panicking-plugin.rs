//! A test-only CNI plugin whose every verb panics: shows what a runtime gets from skel's
//! panic hook (no production plugin has a way to panic on purpose).

#![forbid(unsafe_code)]

use libcni::Error;
use libcni::skel::{CmdArgs, Plugin, plugin_main};

struct Panicking;

impl Plugin for Panicking {
    fn add(&self, _: &CmdArgs) -> Result<String, Error> {
        panic!("ADD went wrong")
    }
    fn del(&self, _: &CmdArgs) -> Result<(), Error> {
        panic!("DEL went wrong")
    }
    fn check(&self, _: &CmdArgs) -> Result<(), Error> {
        panic!("CHECK went wrong")
    }
    fn status(&self, _: &CmdArgs) -> Result<(), Error> {
        panic!("STATUS went wrong")
    }
    fn gc(&self, _: &CmdArgs) -> Result<(), Error> {
        panic!("GC went wrong")
    }
}

fn main() {
    plugin_main(&Panicking, "panicking test plugin");
}
