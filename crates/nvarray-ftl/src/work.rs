//! What the collector did on the flash, per die, for the timing model to book.

/// Reads, programs and erases per die that one host write's collection caused. The timing
/// model books each die's share back to back: a page copy's read on the victim's die and its
/// program on the collector's line are counted on their own dies, without the order between
/// the two (a copy's program waits for its read only through the die they share, if any).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DieWork {
    pub reads: Vec<u32>,
    pub programs: Vec<u32>,
    pub erases: Vec<u32>,
    /// Whether any count is non-zero (so a model can skip the booking).
    pub any: bool,
    /// The dies with a non-zero count, each once (so booking and clearing visit only them).
    pub touched: Vec<u32>,
}

impl DieWork {
    pub fn new(dies: u32) -> Self {
        DieWork {
            reads: vec![0; dies as usize],
            programs: vec![0; dies as usize],
            erases: vec![0; dies as usize],
            any: false,
            touched: Vec::with_capacity(dies as usize),
        }
    }

    /// Marks `die` as having work (once).
    #[inline]
    fn touch(&mut self, die: u32) {
        let d = die as usize;
        if self.reads[d] == 0 && self.programs[d] == 0 && self.erases[d] == 0 {
            self.touched.push(die);
        }
        self.any = true;
    }

    #[inline]
    pub(crate) fn add_read(&mut self, die: u32) {
        self.touch(die);
        self.reads[die as usize] += 1;
    }

    #[inline]
    pub(crate) fn add_program(&mut self, die: u32) {
        self.touch(die);
        self.programs[die as usize] += 1;
    }

    /// `n` reads on `die` (none if `n` is 0).
    pub(crate) fn add_reads(&mut self, die: u32, n: u32) {
        if n > 0 {
            self.touch(die);
            self.reads[die as usize] += n;
        }
    }

    /// `n` programs on `die` (none if `n` is 0).
    pub(crate) fn add_programs(&mut self, die: u32, n: u32) {
        if n > 0 {
            self.touch(die);
            self.programs[die as usize] += n;
        }
    }

    /// One erase on every die (a line's).
    pub(crate) fn add_erase_everywhere(&mut self) {
        for die in 0..self.erases.len() as u32 {
            self.touch(die);
            self.erases[die as usize] += 1;
        }
    }

    /// Zeroes every count (keeps the allocation).
    pub fn clear(&mut self) {
        for &die in &self.touched {
            let d = die as usize;
            self.reads[d] = 0;
            self.programs[d] = 0;
            self.erases[d] = 0;
        }
        self.touched.clear();
        self.any = false;
    }
}

/// The collection one host write caused: `forced` had to finish before the write could be
/// programmed; `background` runs on the dies beside it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcWork {
    pub forced: DieWork,
    pub background: DieWork,
}

impl GcWork {
    pub fn new(dies: u32) -> Self {
        GcWork {
            forced: DieWork::new(dies),
            background: DieWork::new(dies),
        }
    }

    pub fn clear(&mut self) {
        self.forced.clear();
        self.background.clear();
    }
}
