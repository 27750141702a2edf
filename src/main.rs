//! The `certgen` binary: a doorway to [`certgen::main`].

fn main() -> std::process::ExitCode {
    certgen::main()
}
