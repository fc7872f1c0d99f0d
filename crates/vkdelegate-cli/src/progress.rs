//! A load's progress on standard error, for loads past a second: the step being loaded and
//! the time so far, redrawn on one line while standard error is a terminal (nothing is written
//! otherwise, so logs and piped output stay as they were).

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vkdelegate::program::{LoadProgress, Program, ProgramBuilder, ProgramError};

/// Loads shorter than this show nothing.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// How often the line is redrawn.
const TICK: Duration = Duration::from_millis(200);

/// The step being loaded (`None` once the load has ended).
type Shared = Arc<Mutex<Option<String>>>;

/// The display of one load; [`LoadDisplay::finish`] (or drop) ends it.
pub struct LoadDisplay {
    state: Shared,
    ticker: Option<JoinHandle<()>>,
}

/// `builder` reporting its load of `what` to a display, and the display.
pub fn shown(builder: ProgramBuilder, what: &str) -> (ProgramBuilder, LoadDisplay) {
    let display = LoadDisplay::start(what);
    let report = display.state.clone();
    let builder = builder.on_progress(move |p: LoadProgress<'_>| {
        if let Ok(mut s) = report.lock() {
            if s.is_some() && p.step < p.steps {
                *s = Some(format!("step {} of {} ({}) ", p.step + 1, p.steps, p.name));
            }
        }
    });
    (builder, display)
}

/// Builds `builder`'s program (the load of `what`), with the display while it loads.
pub fn build(builder: ProgramBuilder, what: &str) -> Result<Program, ProgramError> {
    let (builder, display) = shown(builder, what);
    let built = builder.build();
    display.finish();
    built
}

/// Redraws the line until the load ends, then clears it.
fn draw(state: &Shared, what: &str) {
    let start = Instant::now();
    let mut drawn = false;
    loop {
        std::thread::sleep(TICK);
        let step = match state.lock() {
            Ok(s) => s.clone(),
            Err(_) => None,
        };
        let Some(step) = step else { break };
        if start.elapsed() >= QUIET_FOR {
            let secs = start.elapsed().as_secs_f64();
            eprint!("\r\x1b[2Kloading {what}: {step}{secs:.1} s");
            let _ = std::io::stderr().flush();
            drawn = true;
        }
    }
    if drawn {
        eprint!("\r\x1b[2K");
        let _ = std::io::stderr().flush();
    }
}

impl LoadDisplay {
    /// A display of the load of `what` that shows only the time so far (a load that does not
    /// report its steps, such as a language model's).
    pub fn start(what: &str) -> LoadDisplay {
        let state: Shared = Arc::new(Mutex::new(Some(String::new())));
        let ticker = std::io::stderr().is_terminal().then(|| {
            let (state, what) = (state.clone(), what.to_string());
            std::thread::spawn(move || draw(&state, &what))
        });
        LoadDisplay { state, ticker }
    }

    /// Ends the display (the load has ended, built or not).
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if let Ok(mut s) = self.state.lock() {
            *s = None;
        }
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

impl Drop for LoadDisplay {
    fn drop(&mut self) {
        self.end();
    }
}
