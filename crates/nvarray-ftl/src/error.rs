//! What an FTL cannot be built from.

/// A geometry or setting the FTL cannot work with; each names the field and what it needs.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FtlError {
    #[error("ftl.over_provisioning must be a number from 0 to 10, found {0}")]
    OverProvisioning(f64),
    #[error(
        "ftl.page_bytes must be a power of two from 512 that divides the erase block \
         ({erase_block_bytes} bytes), found {page_bytes}"
    )]
    PageBytes {
        page_bytes: u32,
        erase_block_bytes: u64,
    },
    #[error(
        "ftl.gc_forced_free_lines must be at least 1 (the collector's own line comes from the \
         free ones) and at most ftl.gc_background_free_lines ({background}), found {forced}"
    )]
    Thresholds { forced: u32, background: u32 },
    #[error("ftl.placement_handles must be from 1 to 64, found {0}")]
    PlacementHandles(u32),
    #[error(
        "over-provisioning {over_provisioning} leaves {spare} spare lines of {pages_per_line} \
         pages, and the collector needs at least {needed} (two open lines per placement handle \
         and the forced threshold plus one); raise ftl.over_provisioning or make the erase \
         blocks smaller (memory.erase_block_bytes)"
    )]
    TooFewSpareLines {
        over_provisioning: f64,
        spare: u64,
        needed: u64,
        pages_per_line: u32,
    },
    #[error(
        "the spare area is too coarse for the collector: over-provisioning {over_provisioning} \
         gives {spare} spare lines of {line_bytes} bytes (one erase block on each of {dies} \
         dies), and the free-line threshold and open lines hold {reserve} of them, more than a \
         third; use smaller erase blocks (memory.erase_block_bytes), fewer dies \
         (memory.controllers, memory.banks_per_controller), a larger memory.capacity_bytes or \
         more ftl.over_provisioning"
    )]
    TooCoarse {
        over_provisioning: f64,
        spare: u64,
        reserve: u64,
        line_bytes: u64,
        dies: u32,
    },
    #[error(
        "the FTL over {pages} physical pages needs {bytes} bytes of host memory before the run \
         writes a page (its maps' directories, per-line counts and any pooled pages' counts), \
         past ftl.map_budget_bytes \
         ({limit}); set a smaller memory.capacity_bytes, a larger ftl.page_bytes or a larger \
         budget"
    )]
    TooLarge { pages: u64, bytes: u64, limit: u64 },
    #[error(
        "ftl.map_cache_bytes must be 0 (the whole map in DRAM) or a multiple of ftl.page_bytes \
         ({page_bytes}, one translation page), found {bytes}"
    )]
    MapCache { bytes: u64, page_bytes: u32 },
    #[error(
        "the FTL's maps take {bytes} bytes of host memory after {written} host pages written, \
         past ftl.map_budget_bytes ({budget}): raise it (--set ftl.map_budget_bytes=SIZE) if \
         the machine has the memory, or write less (a map entry costs 8 to 16 bytes a page \
         written, 4 once a region is written densely)"
    )]
    MapBudget {
        bytes: u64,
        budget: u64,
        written: u64,
    },
    #[error(
        "a bulk precondition does not model victim = \"cost-benefit\", and the page-by-page one \
         needs {needed} bytes of maps for this drive, past ftl.map_budget_bytes ({budget}): use \
         another ftl.victim, raise the budget, or precondition a smaller drive"
    )]
    BulkCostBenefit { needed: u64, budget: u64 },
}
