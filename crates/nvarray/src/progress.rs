//! The one progress bar of the CLI (sweeps, benchmark runs), on stderr so it never mixes with a
//! table or JSON on stdout. indicatif draws nothing when stderr is not a terminal, so scripts
//! and tests see no bar.

use indicatif::{ProgressBar, ProgressStyle};

/// Positions per step: an engine reports fractions of a run, and a sweep's bar is steps long.
const TICKS_PER_STEP: u64 = 1000;

pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `steps` runs; `verb` says what is happening ("sweeping", "emulating").
    pub fn new(verb: &str, steps: u64) -> Self {
        assert!(steps > 0);
        assert!(
            steps <= u64::MAX / TICKS_PER_STEP,
            "{steps} steps overflow the bar"
        );
        let template = format!(
            "{{spinner}} {verb} {{msg}} [{{bar:30}}] {{percent}}%, {{elapsed}} elapsed, ~{{eta}} left"
        );
        let bar = ProgressBar::new(steps * TICKS_PER_STEP).with_style(
            ProgressStyle::with_template(&template)
                .expect("valid template")
                .progress_chars("=> "),
        );
        Progress { bar }
    }

    pub fn set_message(&self, message: String) {
        self.bar.set_message(message);
    }

    /// Step `step` (from 0) is `fraction` done.
    pub fn set(&self, step: u64, fraction: f64) {
        // An engine's estimate may overshoot 1 or be NaN; keep the bar inside this step.
        let fraction = if fraction.is_finite() {
            fraction.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let position = step * TICKS_PER_STEP + (fraction * TICKS_PER_STEP as f64) as u64;
        // Step `steps` at fraction 0 is the end: all done.
        debug_assert!(
            position <= self.bar.length().unwrap_or(u64::MAX),
            "step {step} ({fraction}) past the bar's end"
        );
        self.bar.set_position(position);
    }

    /// `steps` (with a fraction) are done: for steps that run side by side.
    pub fn set_done(&self, steps: f64) {
        let steps = if steps.is_finite() {
            steps.max(0.0)
        } else {
            0.0
        };
        self.bar.set_position(
            ((steps * TICKS_PER_STEP as f64) as u64).min(self.bar.length().unwrap_or(0)),
        );
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
