//! This node's files as one object: the plugin binaries and the conflist, put in place
//! by every mode.

use std::path::PathBuf;

use ipnetwork::IpNetwork;

use super::atomic::{self, FileError};
use super::binaries::{self, Binary};
use super::conflist::{self, Settings};
use crate::config::Args;
use crate::kube::podcidr::show;
use crate::log;

/// Why a file of the node could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The flags, the environment or the source dir (their messages).
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    File(#[from] FileError),
}

/// This node's files: the plugin binaries and the conflist.
pub struct Installer<'a> {
    args: &'a Args,
    pub node: String,
    bins: Vec<Binary>,
}

impl<'a> Installer<'a> {
    pub fn new(args: &'a Args) -> Result<Installer<'a>, FilesError> {
        let installer = Installer {
            args,
            node: args.node_name().map_err(FilesError::Setup)?.to_string(),
            bins: binaries::load(&args.source_dir).map_err(FilesError::Setup)?,
        };
        installer.remove_stale_temps();
        Ok(installer)
    }

    fn remove_stale_temps(&self) {
        for dir in [&self.args.bin_dir, &self.args.conf_dir] {
            for name in atomic::remove_stale_temps(dir) {
                log(&format!(
                    "removed a stale temporary file {}",
                    dir.join(name).display()
                ));
            }
        }
    }

    /// How many plugin binaries it puts in place.
    pub fn binaries(&self) -> usize {
        self.bins.len()
    }

    pub fn conf_path(&self) -> PathBuf {
        self.args.conf_dir.join(&self.args.conf_name)
    }

    pub fn put_binaries(&self) -> Result<(), FilesError> {
        let written = binaries::install(&self.bins, &self.args.bin_dir)?;
        for name in written {
            log(&format!(
                "installed {}",
                self.args.bin_dir.join(name).display()
            ));
        }
        Ok(())
    }

    pub fn waiting(&self) -> String {
        format!(
            "node {} has no spec.podCIDR(s) yet (assigned by kube-controller-manager \
             --allocate-node-cidrs or your IPAM controller); waiting, no subnet is made up",
            self.node
        )
    }

    /// Network configs in the conf dir that a runtime picks before ours (lexical order).
    fn configs_before_ours(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.args.conf_dir) else {
            return vec![];
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| {
                [".conf", ".conflist", ".json"]
                    .iter()
                    .any(|ext| n.ends_with(ext))
                    && *n < self.args.conf_name
            })
            .collect();
        names.sort();
        names
    }

    /// `mtu`: the pods' MTU unless --mtu is given (the overlay's when it is used, else the
    /// default route's interface's; None: the bridge plugin's default).
    pub fn put_conflist(&self, cidrs: &[IpNetwork], mtu: Option<u32>) -> Result<(), FilesError> {
        let mtu = self.args.mtu.or(mtu);
        let settings = Settings {
            cni_version: &self.args.cni_version,
            bridge: &self.args.bridge,
            mtu,
            ip_masq: self.args.files_only,
            portmap_backend: self.args.portmap_backend.map(|b| b.as_str()),
        };
        let text = conflist::render(&settings, cidrs).map_err(FilesError::Setup)?;
        if atomic::put(
            &self.args.conf_dir,
            &self.args.conf_name,
            text.as_bytes(),
            0o644,
        )? {
            let mtu = mtu.map_or("the bridge plugin's default".to_string(), |m| m.to_string());
            log(&format!(
                "wrote {} for podCIDRs {} (mtu {mtu})",
                self.conf_path().display(),
                show(cidrs)
            ));
            for first in self.configs_before_ours() {
                log(&format!(
                    "warning: {} sorts before {}: runtimes use the first config, not ours",
                    first, self.args.conf_name
                ));
            }
        }
        Ok(())
    }
}
