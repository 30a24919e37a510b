// SPDX-License-Identifier: GPL-2.0

//! Device memory: the PCI peer-to-peer (P2PDMA) memory of every provider that published some,
//! registered with each connection like the pool, so that direct I/O from and into it (the
//! GPUDirect path: a checkpoint straight out of accelerator memory) goes out with a keyed SGL
//! carrying its RKEY, and no byte passes through host DRAM or a CPU copy of the transport.
//!
//! The providers are found when a connection is set up: each published memory the
//! connection's RDMA device can reach (see [`crate::wrap::peer_mem::Reach`]) is mapped the
//! peer-to-peer way and registered as a memory region of its own, whose RKEY is invalidated
//! with the connection's other keys when it goes away. Each registration holds its provider's
//! memory, so the provider's driver cannot release it while a key to it is live. A request
//! whose pages are peer memory gets a keyed SGL at their place in their provider's
//! registration; peer memory no registration covers, or a request that mixes it with other
//! memory, fails with `EREMOTEIO` (the block layer's convention for peer memory a device
//! cannot reach): the CPU never copies it through the pool.

use crate::registry::Registry;
use crate::request::Request;
use crate::wrap::log::{log_info, Prefix};
use crate::wrap::nvme::OwnedRq;
use crate::wrap::peer_mem::{PeerMap, PeerMem, Provider, ProviderHandler, ProviderWatch, Reach};
use crate::wrap::rdma::{MemoryRegion, Pd};
use crate::wrap::sync::Global;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

/// The providers whose drivers are letting their memory go: no connection registers it from
/// then on, and the connections that have it registered are reset to let it go.
#[pin_data]
pub(crate) struct Providers {
    #[pin]
    leaving: Mutex<KVec<Provider>>,
    #[pin]
    watch: ProviderWatch<Providers>,
}

static PROVIDERS: Global<Providers> = Global::new();

impl Providers {
    /// Starts watching the PCI bus for providers going away (module init).
    pub(crate) fn publish() -> Result {
        PROVIDERS.publish(Arc::pin_init(
            try_pin_init!(Providers {
                leaving <- kernel::new_mutex!(KVec::new(), "rsrdma_providers::leaving"),
                watch <- ProviderWatch::new(),
            }? Error),
            GFP_KERNEL,
        )?)
    }

    /// Stops watching (module unload, once no controller is left). The notifier is taken off
    /// the bus first, which waits for a running call: the last reference to the list is then
    /// never dropped inside the notifier chain, whose lock its unregistration takes.
    pub(crate) fn withdraw() {
        if let Some(p) = PROVIDERS.withdraw() {
            p.watch.unregister();
        }
    }

    /// Whether `p` is going away.
    fn is_leaving(p: Provider) -> bool {
        PROVIDERS
            .get()
            .is_some_and(|w| w.leaving.lock().contains(&p))
    }
}

impl ProviderHandler for Providers {
    fn leaving(provider: Provider) {
        let Some(w) = PROVIDERS.get() else { return };
        // Recorded first: a connection set up from here on leaves the provider out, and one
        // that registered it before checks this list after installing its registrations (see
        // `Ctrl::register_peer_mem`), so either it sees the provider here or the walk below
        // sees its registrations.
        if w.leaving.lock().push(provider, GFP_KERNEL).is_err() {
            log_info!(
                Prefix::NONE,
                "out of memory recording a provider going away"
            );
        }
        let Some(reg) = Registry::get() else { return };
        for ctrl in reg.all() {
            ctrl.peer_provider_leaving(provider);
        }
    }

    fn gone(provider: Provider) {
        let Some(w) = PROVIDERS.get() else { return };
        let mut leaving = w.leaving.lock();
        if !leaving.contains(&provider) {
            return;
        }
        // Out of memory, the list stays as it is (the provider listed, its memory not
        // registered again until the module is reloaded), never shorter than it should be.
        let Ok(mut kept) = KVec::with_capacity(leaving.len(), GFP_KERNEL) else {
            return;
        };
        for &l in leaving.iter().filter(|&&l| l != provider) {
            // Within the capacity: cannot fail.
            let _ = kept.push(l, GFP_KERNEL);
        }
        *leaving = kept;
    }
}

/// The largest MR page the registrations use: a page list entry per 2 GiB at most.
const MAX_PAGE: u64 = 1 << 31;
/// The same for a device that reaches the memory through the kernel's linear map.
const MAX_CPU_PAGE: u64 = 1 << 30;

/// One provider's memory registered with a connection.
pub(crate) struct PeerReg {
    mem: Arc<PeerMem>,
    region: Arc<MemoryRegion>,
    reach: Reach,
}

impl PeerReg {
    /// The provider's memory.
    pub(crate) fn mem(&self) -> &PeerMem {
        &self.mem
    }

    /// Its memory region, as registration work requests take it.
    pub(crate) fn region(&self) -> &Arc<MemoryRegion> {
        &self.region
    }

    /// How the connection's device reaches it.
    pub(crate) fn reach(&self) -> Reach {
        self.reach
    }
}

/// A connection's registrations of peer memory (possibly none).
#[derive(Default)]
pub(crate) struct PeerRegs(KVec<PeerReg>);

/// A provider the connection's device cannot take, and why.
pub(crate) struct Skipped {
    pub(crate) mem: Arc<PeerMem>,
    pub(crate) err: Error,
}

impl PeerRegs {
    /// Maps every provider's memory that `pd`'s device reaches and prepares its region (the
    /// caller registers them); the providers it cannot take are returned apart.
    pub(crate) fn map(pd: &Arc<Pd>) -> Result<(Self, KVec<Skipped>)> {
        let dev = pd.device();
        let mut regs = KVec::new();
        let mut skipped = KVec::new();
        if !dev.takes_peer_mem() {
            return Ok((Self(regs), skipped));
        }
        let caps = dev.page_size_cap();
        for mem in PeerMem::all()? {
            if Providers::is_leaving(mem.provider()) {
                continue;
            }
            let reg = mem.reach(dev).and_then(|reach| {
                // The largest page size the device supports that the memory's place and size
                // are aligned to, at most `MAX_PAGE`; `MAX_CPU_PAGE` for a device without DMA,
                // which addresses the memory by its kernel address: the linear map aligns that
                // as it aligns the physical one only up to a PUD (1 GiB).
                let max = if reach == Reach::Cpu {
                    MAX_CPU_PAGE
                } else {
                    MAX_PAGE
                };
                let align = mem
                    .phys()
                    .trailing_zeros()
                    .min(mem.len().trailing_zeros())
                    .min(max.trailing_zeros());
                let sizes = caps & ((2u64 << align) - 1);
                if sizes == 0 {
                    return Err(EINVAL);
                }
                let shift = 63 - sizes.leading_zeros();
                if mem.len() >> shift > u64::from(dev.max_fast_reg_page_list_len()) {
                    return Err(EINVAL);
                }
                let map = PeerMap::map(dev, mem.clone(), shift)?;
                let region = Arc::new(MemoryRegion::new_peer(pd, map)?, GFP_KERNEL)?;
                Ok(PeerReg {
                    mem: mem.clone(),
                    region,
                    reach,
                })
            });
            match reg {
                Ok(reg) => regs.push(reg, GFP_KERNEL)?,
                Err(err) => skipped.push(Skipped { mem, err }, GFP_KERNEL)?,
            }
        }
        Ok((Self(regs), skipped))
    }

    /// The registrations.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &PeerReg> {
        self.0.iter()
    }

    /// Whether one of them is of a provider going away.
    pub(crate) fn any_leaving(&self) -> bool {
        self.0
            .iter()
            .any(|r| Providers::is_leaving(r.mem.provider()))
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The registration holding all of a request's data in one run, and the data's offset in
    /// it.
    pub(crate) fn find(&self, rq: &OwnedRq<'_, Request>) -> Option<(&PeerReg, u64)> {
        self.0
            .iter()
            .find_map(|r| rq.offset_in(&*r.mem).map(|off| (r, off)))
    }
}
