//! Standard output for the client commands.
//!
//! `println!` panics when stdout is gone (`fusebox cluster status | head
//! -0`), so every command prints through [`outln!`] instead. A reader that
//! went away wanted no more output: the process ends with code 0, as
//! `head` expects. Any other write failure is reported and ends it with 1.

use std::fmt;
use std::io::{self, Write};

/// Prints one line to stdout; see the module's notes on a closed stdout.
macro_rules! outln {
    () => {
        $crate::out::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `args` and a newline to stdout, ending the process if it cannot.
pub(crate) fn line(args: fmt::Arguments<'_>) {
    write(format_args!("{args}\n"));
}

/// Writes `args` to stdout as they are, ending the process if it cannot.
pub(crate) fn write(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            std::process::exit(1)
        }
    }
}
