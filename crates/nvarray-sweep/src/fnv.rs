//! FNV-1a, 64 bits: the sweep's identities of devices, workloads and the binary (not for
//! security: to tell results of different inputs apart).

pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// `bytes` as one field: followed by a separator, so that ("ab", "c") and ("a", "bc")
    /// differ.
    pub fn write(&mut self, bytes: &[u8]) {
        self.write_raw(bytes);
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    }

    /// `bytes` as a continuation of what came before (a file read in pieces).
    pub fn write_raw(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn value(&self) -> u64 {
        self.0
    }
}
