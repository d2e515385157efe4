//! The DMA mapping hook: how a page becomes visible to a device.
//!
//! [`page_pool`](crate::page_pool) maps a page once when it enters a pool and unmaps it once
//! when it leaves; the remote recycle ring ([`RecycleRing`](crate::page_pool::RecycleRing))
//! unmaps the pages it has to free when it is full. Both take the mapper as a parameter, so
//! this module is a leaf: it depends only on [`Pfn`]. The kernel has no IOMMU and uses
//! [`IdentityDma`]; tests use mappers that record live mappings and fail on demand.

use core::fmt;

use crate::Pfn;

/// A DMA mapping failure (the IOMMU or bounce-buffer space ran out).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct DmaError;

impl fmt::Display for DmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DMA mapping failed")
    }
}

/// DMA mapping hook, called once per page when it enters the pool and once when it leaves.
pub trait DmaMapper {
    /// Map the page at `pfn` for device access and return its bus address (bytes).
    fn map(&mut self, pfn: Pfn) -> Result<u64, DmaError>;
    /// Undo [`DmaMapper::map`]; `dma` is the address `map` returned.
    fn unmap(&mut self, pfn: Pfn, dma: u64);
}

/// The kernel's mapper: identity-mapped, no IOMMU, so the bus address is the physical address.
#[derive(Copy, Clone, Debug, Default)]
pub struct IdentityDma;

impl DmaMapper for IdentityDma {
    #[inline]
    fn map(&mut self, pfn: Pfn) -> Result<u64, DmaError> {
        // The fault image fails some mappings (an IOMMU out of space); the release image
        // compiles this to nothing.
        if crate::fault::hit(crate::fault::Fault::DmaMap) {
            return Err(DmaError);
        }
        Ok(pfn.addr())
    }
    #[inline]
    fn unmap(&mut self, _pfn: Pfn, _dma: u64) {}
}
